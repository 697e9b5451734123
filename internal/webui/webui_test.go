package webui

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"html"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/gateway"
	"github.com/zarrgate/zarrgate/internal/testenv"
	"github.com/zarrgate/zarrgate/storesvc/memory"
)

var ctx = context.Background()

// newGateway holds
//
//	data           group, attributes {"title": "test data"}
//	data/ramp      float32 (3, 30, 60), chunks (1, 16, 32), ramp[k,y,x] = k*1000 + x + 1 (not the fill value 0, which is transparent)
//	data/labels    int16 (50,)
//	other/mask     uint8 (8, 8), never written (fill)
//	secret/hidden  float32 (2, 2)
func newGateway(t *testing.T) *gateway.Gateway {
	t.Helper()
	g := gateway.New(memory.New(), codecsvc.NewLocal(), gateway.Config{})
	if _, err := g.CreateGroup(ctx, "data", gateway.GroupSpec{Format: gateway.FormatV3, Attributes: json.RawMessage(`{"title":"test data"}`)}); err != nil {
		t.Fatal(err)
	}
	for path, spec := range map[string]gateway.ArraySpec{
		"data/ramp":     {Shape: []int64{3, 30, 60}, DataType: "float32", ChunkShape: []int64{1, 16, 32}, DimensionNames: []string{"time", "y", "x"}},
		"data/labels":   {Shape: []int64{50}, DataType: "int16", ChunkShape: []int64{25}},
		"other/mask":    {Shape: []int64{8, 8}, DataType: "uint8", ChunkShape: []int64{4, 4}},
		"secret/hidden": {Shape: []int64{2, 2}, DataType: "float32", ChunkShape: []int64{2, 2}},
	} {
		spec.Format = gateway.FormatV3
		if _, err := g.CreateArray(ctx, path, spec); err != nil {
			t.Fatal(err)
		}
	}
	var data []byte
	for k := range 3 {
		for range 30 {
			for x := range 60 {
				data = binary.LittleEndian.AppendUint32(data, math.Float32bits(float32(k*1000+x+1)))
			}
		}
	}
	sent := false
	if _, err := g.WriteSlab(ctx, "data/ramp", nil, func() (gateway.Block, error) {
		if sent {
			return gateway.Block{}, io.EOF
		}
		sent = true
		return gateway.Block{Origin: []int64{0, 0, 0}, Shape: []int64{3, 30, 60}, Data: data}, nil
	}); err != nil {
		t.Fatal(err)
	}
	return g
}

// denySecret is an Authorize hook refusing everything under secret/.
func denySecret(r *http.Request, path string) error {
	if path == "secret" || strings.HasPrefix(path, "secret/") {
		return errs.New(errs.PermissionDenied, "no access to %q", path)
	}
	return nil
}

func serve(t *testing.T) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/ui/", http.StripPrefix("/ui", Handler(newGateway(t), Options{Authorize: denySecret})))
	mux.Handle("/ui", http.StripPrefix("/ui", Handler(newGateway(t), Options{Authorize: denySecret})))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func getBody(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// TestAPI checks the JSON API the page is built on.
func TestAPI(t *testing.T) {
	srv := serve(t)
	resp, body := getBody(t, srv.URL+"/ui/api/tree")
	want := `{"nodes":[{"path":"data","kind":"group"},{"path":"data/labels","kind":"array"},{"path":"data/ramp","kind":"array"},{"path":"other","kind":"group"},{"path":"other/mask","kind":"array"}],"truncated":false}`
	if resp.StatusCode != 200 || body != want {
		t.Fatalf("tree: %s %s", resp.Status, body)
	}
	resp, body = getBody(t, srv.URL+"/ui/api/node?path=data/ramp")
	var n nodeInfo
	if err := json.Unmarshal([]byte(body), &n); err != nil || resp.StatusCode != 200 {
		t.Fatalf("node: %s %s", resp.Status, body)
	}
	if n.Kind != "array" || n.DataType != "float32" || len(n.Shape) != 3 || n.ChunkShape[2] != 32 || n.ShardShape != nil ||
		strings.Join(n.DimensionNames, ",") != "time,y,x" || !strings.Contains(string(n.Codecs), "bytes") || n.Format != "zarr v3" {
		t.Fatalf("node: %+v", n)
	}
	if _, body = getBody(t, srv.URL+"/ui/api/node?path=data"); !strings.Contains(body, `"attributes":{"title":"test data"}`) {
		t.Fatalf("group: %s", body)
	}
	for url, code := range map[string]int{
		"/ui/api/node?path=secret/hidden":      403,
		"/ui/api/slab/secret/hidden":           403,
		"/ui/api/node?path=nope":               404,
		"/ui/api/slab/data/ramp?sel=5":         416,
		"/ui/api/slab/data/ramp?format=png":    400, // 3-D
		"/ui/api/whatever":                     404,
		"/ui/app.js":                           200,
		"/ui/":                                 200,
		"/ui/api/slab/data/ramp?sel=0,0:2,0:2": 200,
	} {
		if resp, body := getBody(t, srv.URL+url); resp.StatusCode != code {
			t.Errorf("%s: %s %s, want %d", url, resp.Status, body, code)
		}
	}
	// "/ui" redirects to "/ui/"; the page carries its policy.
	resp, body = getBody(t, srv.URL+"/ui")
	if resp.StatusCode != 200 || resp.Request.URL.Path != "/ui/" || !strings.Contains(body, `<script src="app.js">`) ||
		!strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Fatalf("/ui: %s at %s", resp.Status, resp.Request.URL)
	}
}

// chromium runs Debian's chromium headless against the page with args.
func chromium(t *testing.T, args ...string) []byte {
	t.Helper()
	bin := testenv.Chromium(t)
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
		"--hide-scrollbars", "--force-device-scale-factor=1", "--force-color-profile=srgb",
		"--user-data-dir=" + t.TempDir(), "--window-size=1000,700", "--virtual-time-budget=15000"}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute) // a hung browser must not hang the test run
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, stderr.Bytes())
	}
	return out
}

var selftestRE = regexp.MustCompile(`<pre id="selftest">([^<]*)</pre>`)

// TestPageInChromium loads the page in headless chromium: the tree lists
// the test arrays (and not the one Authorize refuses), the slice image has
// the array's last two dimensions as its size, and the screenshot shows
// the colormap's ends at the image's left and right edges. The
// screenshot is kept: $ZARRGATE_UI_SCREENSHOT names where, else the
// test's temporary directory.
func TestPageInChromium(t *testing.T) {
	srv := serve(t)
	page := srv.URL + "/ui/?selftest#data/ramp"
	dom := chromium(t, "--dump-dom", page)
	m := selftestRE.FindSubmatch(dom)
	if m == nil {
		t.Fatalf("no self-test results in the page:\n%s", dom)
	}
	var res struct {
		Tree        []string
		Natural     []int
		Rect        []float64
		Pixel00     []int
		Kind        string
		Attributes  *string
		DecodeError string
	}
	if err := json.Unmarshal([]byte(html.UnescapeString(string(m[1]))), &res); err != nil {
		t.Fatalf("self-test results %q: %v", m[1], err)
	}
	if strings.Join(res.Tree, " ") != "data data/labels data/ramp other other/mask" {
		t.Errorf("tree lists %v", res.Tree)
	}
	if len(res.Natural) != 2 || res.Natural[0] != 60 || res.Natural[1] != 30 {
		t.Fatalf("slice image of %v pixels, want 60 × 30", res.Natural)
	}
	// 60 × 30 is zoomed by floor(512/60) = 8.
	if len(res.Rect) != 4 || res.Rect[2] != 480 || res.Rect[3] != 240 {
		t.Fatalf("slice shown at %v, want 480 × 240", res.Rect)
	}
	if !sameColor(res.Pixel00, color.NRGBA{68, 1, 84, 255}) {
		t.Errorf("image pixel (0, 0) = %v, want viridis' lowest (68, 1, 84)", res.Pixel00)
	}

	// A 1-D array never written: one row, all fill, so transparent.
	m = selftestRE.FindSubmatch(chromium(t, "--dump-dom", srv.URL+"/ui/?selftest#data/labels"))
	var one struct {
		Natural []int
		Pixel00 []int
	}
	if m == nil || json.Unmarshal([]byte(html.UnescapeString(string(m[1]))), &one) != nil ||
		len(one.Natural) != 2 || one.Natural[0] != 50 || one.Natural[1] != 1 || !sameColor(one.Pixel00, color.NRGBA{}) {
		t.Errorf("1-D array of fill: %s", m)
	}

	shot := os.Getenv("ZARRGATE_UI_SCREENSHOT")
	if shot == "" {
		shot = filepath.Join(t.TempDir(), "ui.png")
	} else if shot, _ = filepath.Abs(shot); shot == "" {
		t.Fatal("bad ZARRGATE_UI_SCREENSHOT")
	}
	chromium(t, "--screenshot="+shot, srv.URL+"/ui/#data/ramp")
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%v)", shot, img.Bounds())
	if img.Bounds().Dx() != 1000 || img.Bounds().Dy() != 700 {
		t.Fatalf("screenshot of %v, want the window's 1000 × 700", img.Bounds())
	}
	left, top := int(res.Rect[0]), int(res.Rect[1])
	for _, c := range []struct {
		p    image.Point
		want color.NRGBA
	}{
		{image.Pt(left+4, top+4), color.NRGBA{68, 1, 84, 255}},            // x = 0: vmin
		{image.Pt(left+480-4, top+240-4), color.NRGBA{253, 231, 37, 255}}, // x = 59: vmax
	} {
		got := color.NRGBAModel.Convert(img.At(c.p.X, c.p.Y)).(color.NRGBA)
		if !sameColor([]int{int(got.R), int(got.G), int(got.B), int(got.A)}, c.want) {
			t.Errorf("screenshot pixel %v = %v, want %v", c.p, got, c.want)
		}
	}
}

// sameColor allows the few levels of rounding a browser's compositing may
// add.
func sameColor(got []int, want color.NRGBA) bool {
	if len(got) != 4 {
		return false
	}
	w := []int{int(want.R), int(want.G), int(want.B), int(want.A)}
	for i := range got {
		if d := got[i] - w[i]; d < -3 || d > 3 {
			return false
		}
	}
	return true
}
