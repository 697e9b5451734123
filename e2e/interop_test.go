package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/gateway"
	"github.com/zarrgate/zarrgate/internal/testenv"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/file"
)

// The fixtures zarr-python 3 and numcodecs wrote (testdata/zarrpython/gen.py).
const fixtures = "../testdata/zarrpython/fixtures"

type fixture struct {
	Path       string  `json:"path"`
	ZarrFormat int     `json:"zarr_format"`
	Dtype      string  `json:"dtype"`
	Shape      []int64 `json:"shape"`
	Kind       string  `json:"kind"`
	Expected   string  `json:"expected"`
}

func loadManifest(t *testing.T, path string) []fixture {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Arrays []fixture `json:"arrays"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	if len(m.Arrays) < 50 {
		t.Fatalf("manifest lists only %d arrays", len(m.Arrays))
	}
	return m.Arrays
}

// readWhole reads a whole array through the gateway engine into dense
// bytes (fixed size) or strings.
func readWhole(t *testing.T, g *gateway.Gateway, path string) (*gateway.SlabInfo, []byte, []string) {
	t.Helper()
	var info gateway.SlabInfo
	var data []byte
	var strs []string
	var elem int64
	err := g.ReadSlab(context.Background(), path, nil, func(i gateway.SlabInfo) error {
		info = i
		n := int64(1)
		for _, s := range i.Shape {
			n *= s
		}
		elem = int64(i.DataType.Size)
		data = make([]byte, n*elem)
		strs = make([]string, n)
		return nil
	}, func(b gateway.Block) error {
		nd := len(b.Shape)
		idx := make([]int64, nd)
		total := int64(1)
		for _, s := range b.Shape {
			total *= s
		}
		for k := range total {
			var lin int64
			for d := range nd {
				lin = lin*info.Shape[d] + b.Origin[d] + idx[d]
			}
			if elem > 0 {
				copy(data[lin*elem:(lin+1)*elem], b.Data[k*elem:])
			} else {
				strs[lin] = string(b.Data[b.Offsets[k]:b.Offsets[k+1]])
			}
			for d := nd - 1; d >= 0; d-- {
				idx[d]++
				if idx[d] < b.Shape[d] {
					break
				}
				idx[d] = 0
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("ReadSlab(%s): %v", path, err)
	}
	return &info, data, strs
}

// sameFloats compares raw element bytes, treating any NaN as equal to any
// NaN of the same width.
func sameBytes(got, want []byte, dtype string) bool {
	if bytes.Equal(got, want) {
		return true
	}
	width := map[string]int{"float32": 4, "<f4": 4, "float64": 8, "<f8": 8, ">f8": 8, "complex64": 4, "complex128": 8}[dtype]
	if width == 0 || len(got) != len(want) {
		return false
	}
	for i := 0; i < len(got); i += width {
		g, w := got[i:i+width], want[i:i+width]
		if bytes.Equal(g, w) {
			continue
		}
		if width == 4 && math.IsNaN(float64(math.Float32frombits(binary.LittleEndian.Uint32(g)))) && math.IsNaN(float64(math.Float32frombits(binary.LittleEndian.Uint32(w)))) {
			continue
		}
		if width == 8 && math.IsNaN(math.Float64frombits(binary.LittleEndian.Uint64(g))) && math.IsNaN(math.Float64frombits(binary.LittleEndian.Uint64(w))) {
			continue
		}
		return false
	}
	return true
}

func expectedStrings(t *testing.T, f fixture, dir string) []string {
	raw, err := os.ReadFile(filepath.Join(dir, f.Expected))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	json.Unmarshal(raw, &want)
	if f.Kind == "bytes" {
		for i, s := range want {
			b, _ := base64.StdEncoding.DecodeString(s)
			want[i] = string(b)
		}
	}
	return want
}

// Every array zarr-python wrote reads back through the gateway with the
// values zarr-python recorded: every codec, data type, fill value, sharding
// layout and v2 variant in the manifest.
func TestReadsWhatZarrPythonWrote(t *testing.T) {
	fs, err := file.New(filepath.Join(fixtures, "data"))
	if err != nil {
		t.Fatal(err)
	}
	g := gateway.New(storesvc.Wrap(fs, storesvc.ReadOnly()), codecsvc.NewLocal(), gateway.Config{})
	expDir := filepath.Join(fixtures, "expected")
	for _, f := range loadManifest(t, filepath.Join(fixtures, "manifest.json")) {
		t.Run(f.Path, func(t *testing.T) {
			info, data, strs := readWhole(t, g, f.Path)
			if len(info.Shape) != len(f.Shape) {
				t.Fatalf("shape %v, want %v", info.Shape, f.Shape)
			}
			if f.Kind == "fixed" {
				want, err := os.ReadFile(filepath.Join(expDir, f.Expected))
				if err != nil {
					t.Fatal(err)
				}
				if !sameBytes(data, want, f.Dtype) {
					t.Fatalf("values differ from zarr-python's (%d bytes vs %d)", len(data), len(want))
				}
				return
			}
			want := expectedStrings(t, f, expDir)
			if strings.Join(strs, "\x00") != strings.Join(want, "\x00") {
				t.Fatalf("strings differ: %q vs %q", strs, want)
			}
		})
	}
}

// copyMetadata copies a node's metadata documents (and those of the root
// group) from one store directory to another.
func copyMetadata(t *testing.T, from, to, path string) {
	for _, doc := range []string{"zarr.json", ".zarray", ".zattrs", ".zgroup"} {
		for _, p := range []string{filepath.Join(path, doc), doc} {
			b, err := os.ReadFile(filepath.Join(from, p))
			if err != nil {
				continue
			}
			os.MkdirAll(filepath.Dir(filepath.Join(to, p)), 0o755)
			if err := os.WriteFile(filepath.Join(to, p), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// The gateway writes every fixture's values (with zarr-python's metadata)
// and arrays whose metadata it creates itself; zarr-python reads them back
// with the expected values (testdata/zarrpython/gen.py --check).
func TestZarrPythonReadsWhatGatewayWrote(t *testing.T) {
	py := testenv.Python(t)
	out := t.TempDir()
	fs, err := file.New(out)
	if err != nil {
		t.Fatal(err)
	}
	g := gateway.New(fs, codecsvc.NewLocal(), gateway.Config{})
	ctx := context.Background()
	manifestIn := loadManifest(t, filepath.Join(fixtures, "manifest.json"))
	expDir := filepath.Join(fixtures, "expected")
	var written []fixture
	src, err := file.New(filepath.Join(fixtures, "data"))
	if err != nil {
		t.Fatal(err)
	}
	ro := gateway.New(storesvc.Wrap(src, storesvc.ReadOnly()), codecsvc.NewLocal(), gateway.Config{})
	for _, f := range manifestIn {
		copyMetadata(t, filepath.Join(fixtures, "data"), out, f.Path)
		// Write the values read from zarr-python's array: the gateway then
		// encodes every chunk itself.
		info, data, strs := readWhole(t, ro, f.Path)
		b := gateway.Block{Origin: make([]int64, len(info.Shape)), Shape: info.Shape, Data: data}
		if info.DataType.VariableLength() {
			b.Data, b.Offsets = nil, []int64{0}
			for _, s := range strs {
				b.Data = append(b.Data, s...)
				b.Offsets = append(b.Offsets, int64(len(b.Data)))
			}
		}
		// Drop what zarr-python stored, so every chunk is the gateway's.
		if err := g.Store().ErasePrefix(ctx, f.Path+"/c/"); err != nil {
			t.Fatal(err)
		}
		next := func() func() (gateway.Block, error) {
			done := false
			return func() (gateway.Block, error) {
				if done {
					return gateway.Block{}, io.EOF
				}
				done = true
				return b, nil
			}
		}()
		if _, err := g.WriteSlab(ctx, f.Path, nil, next); err != nil {
			t.Fatalf("WriteSlab(%s): %v", f.Path, err)
		}
		written = append(written, f)
	}
	// Arrays whose metadata the gateway writes itself.
	mdir := t.TempDir()
	exp := filepath.Join(mdir, "expected")
	os.MkdirAll(exp, 0o755)
	for _, f := range written {
		b, _ := os.ReadFile(filepath.Join(expDir, f.Expected))
		os.WriteFile(filepath.Join(exp, f.Expected), b, 0o644)
	}
	for _, c := range []struct {
		path, dtype string
		spec        gateway.ArraySpec
	}{
		{"gw/v3-default", "float32", gateway.ArraySpec{Shape: []int64{30, 40}, DataType: "float32", ChunkShape: []int64{8, 16}, DimensionNames: []string{"y", "x"}, Attributes: json.RawMessage(`{"units":"K"}`)}},
		{"gw/v3-sharded", "int16", gateway.ArraySpec{Shape: []int64{30, 40}, DataType: "int16", ChunkShape: []int64{5, 8}, ShardShape: []int64{10, 16},
			Codecs: json.RawMessage(`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"blosc","configuration":{"cname":"lz4","clevel":5,"shuffle":"shuffle","typesize":2,"blocksize":0}}]`)}},
		{"gw/v3-strings", "string", gateway.ArraySpec{Shape: []int64{6, 5}, DataType: "string", ChunkShape: []int64{4, 3}}},
		{"gw/v2-blosc", "<f8", gateway.ArraySpec{Format: gateway.FormatV2, Shape: []int64{30, 40}, DataType: "float64", ChunkShape: []int64{8, 16},
			Codecs: json.RawMessage(`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"blosc","configuration":{"cname":"zstd","clevel":3,"shuffle":"bitshuffle","typesize":8,"blocksize":0}}]`)}},
		{"gw/v2-order-F", "<i4", gateway.ArraySpec{Format: gateway.FormatV2, Shape: []int64{9, 10}, DataType: "int32", ChunkShape: []int64{4, 4},
			Codecs: json.RawMessage(`[{"name":"transpose","configuration":{"order":[1,0]}},{"name":"bytes","configuration":{"endian":"little"}},{"name":"numcodecs.zlib","configuration":{"level":1}}]`)}},
	} {
		if _, err := g.CreateArray(ctx, c.path, c.spec); err != nil {
			t.Fatalf("CreateArray(%s): %v", c.path, err)
		}
		n := c.spec.Shape[0] * c.spec.Shape[1]
		b := gateway.Block{Origin: []int64{0, 0}, Shape: c.spec.Shape}
		f := fixture{Path: c.path, Dtype: c.dtype, Shape: c.spec.Shape, Kind: "fixed", Expected: strings.ReplaceAll(c.path, "/", "__") + ".bin"}
		var want []byte
		var strs []string
		for i := range n {
			switch c.spec.DataType {
			case "float32":
				b.Data = binary.LittleEndian.AppendUint32(b.Data, math.Float32bits(float32(i)*0.5))
			case "float64":
				b.Data = binary.LittleEndian.AppendUint64(b.Data, math.Float64bits(float64(i)*0.25))
			case "int16":
				b.Data = binary.LittleEndian.AppendUint16(b.Data, uint16(int16(i-500)))
			case "int32":
				b.Data = binary.LittleEndian.AppendUint32(b.Data, uint32(int32(i*3-100)))
			case "string":
				strs = append(strs, strings.Repeat("ß", int(i%3))+"v"+string(rune('a'+i%26)))
			}
		}
		if strs != nil {
			b.Offsets = []int64{0}
			for _, s := range strs {
				b.Data = append(b.Data, s...)
				b.Offsets = append(b.Offsets, int64(len(b.Data)))
			}
			f.Kind, f.Expected = "strings", strings.ReplaceAll(c.path, "/", "__")+".json"
			want, _ = json.Marshal(strs)
		} else {
			want = b.Data
		}
		os.WriteFile(filepath.Join(exp, f.Expected), want, 0o644)
		done := false
		if _, err := g.WriteSlab(ctx, c.path, nil, func() (gateway.Block, error) {
			if done {
				return gateway.Block{}, io.EOF
			}
			done = true
			return b, nil
		}); err != nil {
			t.Fatalf("WriteSlab(%s): %v", c.path, err)
		}
		written = append(written, f)
	}
	manifest, _ := json.Marshal(map[string]any{"arrays": written})
	mpath := filepath.Join(mdir, "manifest.json")
	os.WriteFile(mpath, manifest, 0o644)
	cmd := exec.Command(py, "../testdata/zarrpython/gen.py", "--check", out, mpath)
	res, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("zarr-python could not read what the gateway wrote: %v\n%s", err, res)
	}
	if !strings.Contains(string(res), "passed, 0 failed") {
		t.Fatalf("zarr-python check:\n%s", res)
	}
	t.Logf("zarr-python: %s", strings.TrimSpace(string(res[strings.LastIndexByte(strings.TrimSpace(string(res)), '\n')+1:])))
}
