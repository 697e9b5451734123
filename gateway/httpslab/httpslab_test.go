package httpslab

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"image/color"
	"image/png"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/gateway"
	"github.com/zarrgate/zarrgate/internal/bufpool"
	"github.com/zarrgate/zarrgate/internal/membudget"
	"github.com/zarrgate/zarrgate/internal/testenv"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/memory"
	"github.com/zarrgate/zarrgate/zarr"
)

func init() { bufpool.CheckDoublePuts() }

var ctx = context.Background()

// val is the value the test arrays hold at (i, j).
func val(i, j int64) float64 { return float64(i*1000 + j) }

// newGateway is a gateway on a memory store holding
//
//	f   float32 (37, 53), chunks (8, 10), f[i,j] = i*1000+j
//	s   int16 (3, 40, 30) sharded (3, 20, 30) / chunks (1, 10, 15), s[k,i,j] = k*100+i (int16)
//	img float64 (4, 5), chunks (2, 2), fill -1: row 0 unwritten (fill), img[1,1] NaN, else i*1000+j
//	grp a group
//	str a string array (2, 2)
func newGateway(t *testing.T, cfg gateway.Config) *gateway.Gateway {
	t.Helper()
	g := gateway.New(memory.New(), codecsvc.NewLocal(), cfg)
	mk := func(path string, spec gateway.ArraySpec) {
		t.Helper()
		if spec.Format == 0 {
			spec.Format = gateway.FormatV3
		}
		if _, err := g.CreateArray(ctx, path, spec); err != nil {
			t.Fatal(err)
		}
	}
	write := func(path string, sel []zarr.Range, shape []int64, data []byte) {
		t.Helper()
		sent := false
		_, err := g.WriteSlab(ctx, path, sel, func() (gateway.Block, error) {
			if sent {
				return gateway.Block{}, io.EOF
			}
			sent = true
			return gateway.Block{Origin: make([]int64, len(shape)), Shape: shape, Data: data}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	mk("f", gateway.ArraySpec{Shape: []int64{37, 53}, DataType: "float32", ChunkShape: []int64{8, 10}})
	var f []byte
	for i := range int64(37) {
		for j := range int64(53) {
			f = binary.LittleEndian.AppendUint32(f, math.Float32bits(float32(val(i, j))))
		}
	}
	write("f", nil, []int64{37, 53}, f)

	mk("s", gateway.ArraySpec{Shape: []int64{3, 40, 30}, DataType: "int16", ChunkShape: []int64{1, 10, 15}, ShardShape: []int64{3, 20, 30}})
	var s []byte
	for k := range int64(3) {
		for i := range int64(40) {
			for range 30 {
				s = binary.LittleEndian.AppendUint16(s, uint16(k*100+i))
			}
		}
	}
	write("s", nil, []int64{3, 40, 30}, s)

	mk("img", gateway.ArraySpec{Shape: []int64{4, 5}, DataType: "float64", ChunkShape: []int64{2, 2}, FillValue: json.RawMessage("-1")})
	var im []byte
	for i := int64(1); i < 4; i++ {
		for j := range int64(5) {
			v := val(i, j)
			if i == 1 && j == 1 {
				v = math.NaN()
			}
			im = binary.LittleEndian.AppendUint64(im, math.Float64bits(v))
		}
	}
	write("img", []zarr.Range{{Start: 1, Stop: 4, Step: 1}, {Start: 0, Stop: 5, Step: 1}}, []int64{3, 5}, im)

	if _, err := g.CreateGroup(ctx, "grp", gateway.GroupSpec{Format: gateway.FormatV3}); err != nil {
		t.Fatal(err)
	}
	mk("str", gateway.ArraySpec{Shape: []int64{2, 2}, DataType: "string", ChunkShape: []int64{2, 2}})
	return g
}

func serve(t testing.TB, g *gateway.Gateway, opts Options) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/slab/", http.StripPrefix("/slab", Handler(g, opts)))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, srv *httptest.Server, path string, q url.Values) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Get(srv.URL + "/slab/" + path + "?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s?%s: reading the body: %v", path, q.Encode(), err)
	}
	return resp, body
}

var npyRE = regexp.MustCompile(`^\{'descr': '([^']+)', 'fortran_order': False, 'shape': \(([0-9, ]*)\), \} *\n$`)

// parseNpy checks a .npy file's framing and returns its descr, shape and
// data.
func parseNpy(t *testing.T, b []byte) (string, []int64, []byte) {
	t.Helper()
	if !bytes.HasPrefix(b, []byte("\x93NUMPY\x01\x00")) || len(b) < 10 {
		t.Fatalf("not a .npy 1.0 file: %q", b[:min(len(b), 16)])
	}
	n := int(binary.LittleEndian.Uint16(b[8:10]))
	if (10+n)%64 != 0 || len(b) < 10+n {
		t.Fatalf(".npy header of %d bytes: data not 64-aligned", n)
	}
	m := npyRE.FindStringSubmatch(string(b[10 : 10+n]))
	if m == nil {
		t.Fatalf(".npy header %q", b[10:10+n])
	}
	var shape []int64
	for _, s := range strings.Split(m[2], ",") {
		if s = strings.TrimSpace(s); s != "" {
			v, _ := strconv.ParseInt(s, 10, 64)
			shape = append(shape, v)
		}
	}
	return m[1], shape, b[10+n:]
}

// expected2D is f's selection computed from the values' formula.
func expectedF(sel []zarr.Range) ([]int64, []byte) {
	var out []byte
	shape := []int64{sel[0].Count(), sel[1].Count()}
	for i := sel[0].Start; i < sel[0].Stop; i += sel[0].Step {
		for j := sel[1].Start; j < sel[1].Stop; j += sel[1].Step {
			out = binary.LittleEndian.AppendUint32(out, math.Float32bits(float32(val(i, j))))
		}
	}
	return shape, out
}

// TestNpyEqualsReadSlab reads selections of an unsharded and a sharded
// array as .npy, with bands small enough that every read takes several,
// and compares them with the values written and with ReadSlab's.
func TestNpyEqualsReadSlab(t *testing.T) {
	g := newGateway(t, gateway.Config{})
	for _, band := range []int64{1, 500, 1 << 20} {
		srv := serve(t, g, Options{BandBytes: band})
		for _, tc := range []struct {
			sel  string
			want []zarr.Range
		}{
			{"", []zarr.Range{rg(0, 37, 1), rg(0, 53, 1)}},
			{"3:30,5:50", []zarr.Range{rg(3, 30, 1), rg(5, 50, 1)}},
			{"1::3,::2", []zarr.Range{rg(1, 37, 3), rg(0, 53, 2)}},
			{"-9:,-1", []zarr.Range{rg(28, 37, 1), rg(52, 53, 1)}},
			{"7:9,:", []zarr.Range{rg(7, 9, 1), rg(0, 53, 1)}},
			{"5:5,:", []zarr.Range{rg(5, 5, 1), rg(0, 53, 1)}},
		} {
			resp, body := get(t, srv, "f", url.Values{"sel": {tc.sel}})
			if resp.StatusCode != 200 {
				t.Fatalf("band %d sel %q: %s: %s", band, tc.sel, resp.Status, body)
			}
			descr, shape, data := parseNpy(t, body)
			wshape, wdata := expectedF(tc.want)
			if descr != "<f4" || fmt.Sprint(shape) != fmt.Sprint(wshape) || !bytes.Equal(data, wdata) {
				t.Fatalf("band %d sel %q: %s %v %d bytes, want <f4 %v %d bytes (equal: %v)", band, tc.sel, descr, shape, len(data), wshape, len(wdata), bytes.Equal(data, wdata))
			}
			if got := resp.Header.Get("Content-Length"); got != strconv.Itoa(len(body)) {
				t.Fatalf("Content-Length %s for %d bytes", got, len(body))
			}
			if rs := readSlab(t, g, "f", tc.want); !bytes.Equal(rs, data) {
				t.Fatalf("sel %q: .npy differs from ReadSlab", tc.sel)
			}
		}
		// The sharded 3-D array, a strided selection across shards.
		resp, body := get(t, srv, "s", url.Values{"sel": {"::2,3:37:5,1:29:4"}})
		if resp.StatusCode != 200 {
			t.Fatalf("s: %s: %s", resp.Status, body)
		}
		descr, shape, data := parseNpy(t, body)
		sel := []zarr.Range{rg(0, 3, 2), rg(3, 37, 5), rg(1, 29, 4)}
		var want []byte
		for k := int64(0); k < 3; k += 2 {
			for i := int64(3); i < 37; i += 5 {
				for j := int64(1); j < 29; j += 4 {
					want = binary.LittleEndian.AppendUint16(want, uint16(k*100+i))
				}
			}
		}
		if descr != "<i2" || fmt.Sprint(shape) != "[2 7 7]" || !bytes.Equal(data, want) || !bytes.Equal(data, readSlab(t, g, "s", sel)) {
			t.Fatalf("s: %s %v, equal %v", descr, shape, bytes.Equal(data, want))
		}
	}
}

// readSlab is ReadSlab's output assembled in C order by the test itself.
func readSlab(t *testing.T, g *gateway.Gateway, path string, sel []zarr.Range) []byte {
	t.Helper()
	var shape []int64
	var out []byte
	var elem int64
	err := g.ReadSlab(ctx, path, sel, func(si gateway.SlabInfo) error {
		shape, elem = si.Shape, int64(si.DataType.Size)
		out = make([]byte, elem*product(shape))
		return nil
	}, func(b gateway.Block) error {
		// element by element, independent of place
		idx := make([]int64, len(b.Shape))
		for k := range product(b.Shape) {
			flat := int64(0)
			for d := range shape {
				flat = flat*shape[d] + b.Origin[d] + idx[d]
			}
			copy(out[flat*elem:(flat+1)*elem], b.Data[k*elem:(k+1)*elem])
			for d := len(idx) - 1; d >= 0; d-- {
				if idx[d]++; idx[d] < b.Shape[d] {
					break
				}
				idx[d] = 0
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestNpyLoadsInNumpy has numpy load the endpoint's .npy and compare it
// with the values' formula.
func TestNpyLoadsInNumpy(t *testing.T) {
	py := testenv.Python(t)
	g := newGateway(t, gateway.Config{})
	// v2 fixed-width strings, bytes (|S3) and UTF-32 (<U2), stored raw
	// (CreateArray makes v3 types only).
	for path, c := range map[string]struct {
		dt   string
		data string
	}{"bs": {"|S3", "ab\x00xyz"}, "us": {"<U2", "h\x00\x00\x00i\x00\x00\x00\xe9\x00\x00\x00\x00\x00\x00\x00"}} {
		meta := `{"zarr_format":2,"shape":[2],"chunks":[2],"dtype":"` + c.dt + `","compressor":null,"fill_value":null,"order":"C","filters":null}`
		for key, v := range map[string]string{path + "/.zarray": meta, path + "/0": c.data} {
			if _, err := g.Store().Set(ctx, key, strings.NewReader(v), storesvc.Condition{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	srv := serve(t, g, Options{BandBytes: 700})
	dir := t.TempDir()
	for name, q := range map[string]string{"f": "2:35:3,::4", "s": "1,:,3:9", "bs": "", "us": ""} {
		resp, body := get(t, srv, name, url.Values{"sel": {q}})
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %s", name, resp.Status)
		}
		if err := os.WriteFile(filepath.Join(dir, name+".npy"), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	script := `
import numpy as np, sys
d = sys.argv[1]
f = np.load(d + "/f.npy")
i, j = np.meshgrid(np.arange(37), np.arange(53), indexing="ij")
full = (i * 1000 + j).astype(np.float32)
assert f.dtype == np.float32 and f.shape == (11, 14), (f.dtype, f.shape)
assert np.array_equal(f, full[2:35:3, ::4])
s = np.load(d + "/s.npy")
assert s.dtype == np.int16 and s.shape == (1, 40, 6), (s.dtype, s.shape)
assert np.array_equal(s[0], np.repeat((100 + np.arange(40)).astype(np.int16)[:, None], 6, axis=1))
bs = np.load(d + "/bs.npy")
assert bs.dtype == np.dtype("S3") and bs.tolist() == [b"ab", b"xyz"], (bs.dtype, bs)
us = np.load(d + "/us.npy")
assert us.dtype == np.dtype("<U2") and us.tolist() == ["hi", "\u00e9"], (us.dtype, us)
print("ok")
`
	out, err := exec.Command(py, "-c", script, dir).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("numpy: %v: %s", err, out)
	}
}

// TestRawAndHead checks the raw format's headers and HEAD.
func TestRawAndHead(t *testing.T) {
	g := newGateway(t, gateway.Config{})
	srv := serve(t, g, Options{BandBytes: 100})
	resp, body := get(t, srv, "f", url.Values{"sel": {"1:4,2:7:2"}, "format": {"raw"}})
	_, want := expectedF([]zarr.Range{rg(1, 4, 1), rg(2, 7, 2)})
	if resp.StatusCode != 200 || !bytes.Equal(body, want) || resp.Header.Get(HeaderShape) != "3,3" ||
		resp.Header.Get(HeaderDataType) != "float32" || resp.Header.Get(HeaderByteOrder) != "little" {
		t.Fatalf("raw: %s %v %d bytes", resp.Status, resp.Header, len(body))
	}
	hr, err := http.Head(srv.URL + "/slab/f?sel=1:4")
	if err != nil {
		t.Fatal(err)
	}
	hr.Body.Close()
	if hr.StatusCode != 200 || hr.ContentLength != int64(len(NpyHeader(zarr.DataType{Name: "float32", Size: 4}, []int64{3, 53})))+3*53*4 {
		t.Fatalf("HEAD: %s, Content-Length %d", hr.Status, hr.ContentLength)
	}
}

// TestJSON checks the nested lists, NaN and strings.
func TestJSON(t *testing.T) {
	g := newGateway(t, gateway.Config{})
	srv := serve(t, g, Options{MaxJSONElements: 20})
	resp, body := get(t, srv, "img", url.Values{"sel": {"0:2,0:3"}, "format": {"json"}})
	if resp.StatusCode != 200 || string(body) != `{"data":[[-1,-1,-1],[1000,"NaN",1002]],"data_type":"float64","shape":[2,3]}` {
		t.Fatalf("json: %s %s", resp.Status, body)
	}
	resp, body = get(t, srv, "s", url.Values{"sel": {"2,39,0:2"}, "format": {"json"}})
	if resp.StatusCode != 200 || string(body) != `{"data":[[[239,239]]],"data_type":"int16","shape":[1,1,2]}` {
		t.Fatalf("json: %s %s", resp.Status, body)
	}
	resp, body = get(t, srv, "str", url.Values{"format": {"json"}})
	if resp.StatusCode != 200 || string(body) != `{"data":[["",""],["",""]],"data_type":"string","shape":[2,2]}` {
		t.Fatalf("json strings: %s %s", resp.Status, body)
	}
	resp, body = get(t, srv, "f", url.Values{"sel": {"0:3,0:7"}, "format": {"json"}})
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("json of 21 elements over a limit of 20: %s %s", resp.Status, body)
	}
}

// TestPNG checks an image's size, colours, transparency and value range.
func TestPNG(t *testing.T) {
	g := newGateway(t, gateway.Config{})
	srv := serve(t, g, Options{MaxPNGPixels: 400})
	resp, body := get(t, srv, "img", url.Values{"format": {"png"}})
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "image/png" {
		t.Fatalf("png: %s %s", resp.Status, body)
	}
	img, err := png.Decode(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != 5 || b.Dy() != 4 {
		t.Fatalf("image of %v, want 5 × 4", b)
	}
	at := func(x, y int) color.NRGBA { return color.NRGBAModel.Convert(img.At(x, y)).(color.NRGBA) }
	// Values run from 1000 (black) to 3004 (white); row 0 is fill, (1,1) NaN.
	for _, c := range []struct {
		x, y int
		want color.NRGBA
	}{
		{0, 0, color.NRGBA{}}, {4, 0, color.NRGBA{}}, {1, 1, color.NRGBA{}},
		{0, 1, color.NRGBA{0, 0, 0, 255}}, {4, 3, color.NRGBA{255, 255, 255, 255}},
		{2, 2, gray((val(2, 2) - 1000) / 2004)},
	} {
		if got := at(c.x, c.y); got != c.want {
			t.Errorf("pixel (%d, %d) = %v, want %v", c.x, c.y, got, c.want)
		}
	}
	if r := resp.Header.Get("X-Zarr-Value-Range"); r != "1000,3004" {
		t.Errorf("value range %q", r)
	}
	// Given range and viridis; one index of a 3-D array is an image.
	resp, body = get(t, srv, "s", url.Values{"sel": {"1,0:20,0:10"}, "format": {"png"}, "cmap": {"viridis"}, "vmin": {"100"}, "vmax": {"119"}})
	if resp.StatusCode != 200 {
		t.Fatalf("png of s: %s %s", resp.Status, body)
	}
	img, err = png.Decode(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != 10 || b.Dy() != 20 {
		t.Fatalf("image of %v, want 10 × 20", b)
	}
	if got := at(3, 0); got != (color.NRGBA{68, 1, 84, 255}) {
		t.Errorf("viridis at vmin = %v", got)
	}
	if got := at(3, 19); got != (color.NRGBA{253, 231, 37, 255}) {
		t.Errorf("viridis at vmax = %v", got)
	}
}

// TestErrors maps the engine's refusals to HTTP statuses, before any body
// is sent.
func TestErrors(t *testing.T) {
	g := gateway.New(newGateway(t, gateway.Config{}).Store(), codecsvc.NewLocal(), gateway.Config{MaxSlabBytes: 4000})
	deny := func(r *http.Request, path string) error {
		if path == "secret" || r.Header.Get("X-Test-Deny") != "" {
			return errs.New(errs.PermissionDenied, "no reading %q", path)
		}
		return nil
	}
	srv := serve(t, g, Options{Authorize: deny, MaxPNGPixels: 100})
	for _, tc := range []struct {
		path string
		q    url.Values
		want int
	}{
		{"f", url.Values{"sel": {"0,x"}}, 400},
		{"f", url.Values{"sel": {"0:1:0"}}, 400},
		{"f", url.Values{"sel": {"0:1:-1"}}, 400},
		{"f", url.Values{"sel": {"0,1,2"}}, 400},
		{"f", url.Values{"sel": {"0,100:200"}}, 416},
		{"f", url.Values{"sel": {"37"}}, 416},
		{"f", url.Values{"sel": {"9:3"}}, 416},
		{"f", url.Values{"sel": {"0:10,0:20"}, "format": {"xml"}}, 400},
		{"nope", nil, 404},
		{"grp", nil, 422},
		{"secret", nil, 403},
		{"f", nil, 413}, // 37*53*4 bytes > MaxSlabBytes
		{"f", url.Values{"sel": {"0:30,0:30"}, "format": {"png"}}, 413},
		{"s", url.Values{"sel": {"0:2,0:2,0:2"}, "format": {"png"}}, 400},
		{"s", url.Values{"sel": {"0,0:2,0:2"}, "format": {"png"}, "vmin": {"NaN"}}, 400},
		{"s", url.Values{"sel": {"0,0:2,0:2"}, "format": {"png"}, "cmap": {"jet"}}, 400},
		{"str", nil, 400}, // variable-length: json only
	} {
		resp, body := get(t, srv, tc.path, tc.q)
		if resp.StatusCode != tc.want {
			t.Errorf("%s?%s: %s (%s), want %d", tc.path, tc.q.Encode(), resp.Status, body, tc.want)
		}
	}
	// Paths a mux would clean, straight to the handler: the engine's key
	// checks refuse them.
	for _, p := range []string{"/f/../s", "/f//x", "/./f"} {
		rec := httptest.NewRecorder()
		Handler(g, Options{}).ServeHTTP(rec, &http.Request{Method: "GET", URL: &url.URL{Path: p}})
		if rec.Code != 400 && rec.Code != 404 {
			t.Errorf("path %q: %d %s", p, rec.Code, rec.Body)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/slab/f", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %s", resp.Status)
	}
}

// TestLateErrorAborts corrupts a chunk read in a later band: the status is
// out by then, so the response must end short of its Content-Length (an
// error for the client), never as a short file that looks whole.
func TestLateErrorAborts(t *testing.T) {
	g := newGateway(t, gateway.Config{})
	if _, err := g.Store().Set(ctx, "f/c/3/0", strings.NewReader("not zstd"), storesvc.Condition{}); err != nil {
		t.Fatal(err)
	}
	srv := serve(t, g, Options{BandBytes: 1})
	resp, err := http.Get(srv.URL + "/slab/f")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %s: the first bands are fine", resp.Status)
	}
	_, err = io.ReadAll(resp.Body)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("reading a body cut short: %v, want unexpected EOF", err)
	}
	// The same chunk in the first band: an error status.
	resp2, body := get(t, srv, "f", url.Values{"sel": {"24:30"}})
	if resp2.StatusCode < 400 || resp2.StatusCode == 500 && !strings.Contains(string(body), "f/c/3/0") {
		t.Fatalf("corrupt chunk in the first band: %s %s", resp2.Status, body)
	}
}

// TestBandsBoundMemory reads a slab much larger than a band and checks
// that the request held no more memory than the engine needs for a read
// of one band plus two band buffers (one written out while the next is
// read): never the whole slab.
func TestBandsBoundMemory(t *testing.T) {
	store := newGateway(t, gateway.Config{}).Store()
	w := gateway.New(store, codecsvc.NewLocal(), gateway.Config{})
	if _, err := w.CreateArray(ctx, "big", gateway.ArraySpec{Format: gateway.FormatV3, Shape: []int64{512, 512}, DataType: "float32", ChunkShape: []int64{16, 512}}); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 512*512*4)
	for i := range data {
		data[i] = byte(i * 7 / 3)
	}
	sent := false
	if _, err := w.WriteSlab(ctx, "big", nil, func() (gateway.Block, error) {
		if sent {
			return gateway.Block{}, io.EOF
		}
		sent = true
		return gateway.Block{Origin: []int64{0, 0}, Shape: []int64{512, 512}, Data: data}, nil
	}); err != nil {
		t.Fatal(err)
	}
	band := int64(16 * 512 * 4)
	// The engine's own memory for one band.
	g0 := gateway.New(store, codecsvc.NewLocal(), gateway.Config{Parallelism: 1})
	readSlab(t, g0, "big", []zarr.Range{rg(0, 16, 1), rg(0, 512, 1)})
	engine := g0.Budget().Peak()

	g := gateway.New(store, codecsvc.NewLocal(), gateway.Config{Parallelism: 1})
	srv := serve(t, g, Options{BandBytes: band})
	resp, body := get(t, srv, "big", nil)
	if _, _, got := parseNpy(t, body); resp.StatusCode != 200 || !bytes.Equal(got, data) {
		t.Fatalf("%s, %d bytes", resp.Status, len(body))
	}
	if peak, bound := g.Budget().Peak(), engine+2*band; peak > bound || bound >= int64(len(data)) {
		t.Fatalf("budget peak %d bytes for a %d-byte slab, want at most %d (engine %d + two bands of %d)", peak, len(data), bound, engine, band)
	}
}

func rg(start, stop, step int64) zarr.Range { return zarr.Range{Start: start, Stop: stop, Step: step} }

// TestClientGoesAway closes the connection after the first bytes of a
// 16 MiB response, far more than the connection buffers: the handler must
// stop, end, and give back every byte it reserved.
func TestClientGoesAway(t *testing.T) {
	g := newGateway(t, gateway.Config{})
	if _, err := g.CreateArray(ctx, "big", gateway.ArraySpec{Format: gateway.FormatV3, Shape: []int64{2048, 2048}, DataType: "float32", ChunkShape: []int64{64, 2048}}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	h := Handler(g, Options{BandBytes: 1})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(done)
		r.URL.Path = strings.TrimPrefix(r.URL.Path, "/slab")
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/slab/big")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 200)); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close() // before the end: the transport drops the connection
	<-done
	if n := g.Budget().InUse(); n != 0 {
		t.Fatalf("%d bytes of the budget still reserved after the handler ended", n)
	}
}

// TestStatus pins the code-to-status table docs/slab-http.md shows.
func TestStatus(t *testing.T) {
	for code, want := range map[errs.Code]int{
		errs.CodeInvalidArgument: 400, errs.CodeUnauthenticated: 401, errs.CodePermissionDenied: 403,
		errs.CodeNotFound: 404, errs.CodeAlreadyExists: 409, errs.CodeFailedPrecondition: 422,
		errs.CodeOutOfRange: 416, errs.CodeResourceExhausted: 413, errs.CodeUnavailable: 503,
		errs.CodeAborted: 503, errs.CodeDeadlineExceeded: 504, errs.CodeCanceled: 499,
		errs.CodeUnimplemented: 501, errs.CodeDataLoss: 500, errs.CodeInternal: 500, errs.CodeUnknown: 500,
	} {
		if got := Status(errs.WithCode(code, "x", nil)); got != want {
			t.Errorf("%v: %d, want %d", code, got, want)
		}
	}
	// The memory budget: too large for it is 413, busy is 503 (later).
	b := membudget.New(1<<20, 10*time.Millisecond)
	if _, err := b.Acquire(context.Background(), 2<<20, "too large"); Status(err) != 413 || membudget.IsBusy(err) {
		t.Errorf("a request over the whole budget: %d (%v)", Status(err), err)
	}
	held, _ := b.Acquire(context.Background(), 1<<20, "held")
	_, err := b.Acquire(context.Background(), 1<<10, "waits")
	if Status(err) != 503 || !membudget.IsBusy(err) || errs.CodeOf(err) != errs.CodeResourceExhausted {
		t.Errorf("a request the busy budget refused: %d, code %v (%v)", Status(err), errs.CodeOf(err), err)
	}
	held.Release()
	if Status(context.Canceled) != 499 || Status(errors.New("plain")) != 500 {
		t.Error("context.Canceled or an uncoded error")
	}
}
