package e2e

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/gateway"
	"github.com/zarrgate/zarrgate/internal/testenv"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/file"
	"github.com/zarrgate/zarrgate/zarr"
)

// checkNCZarr reads the dataset testdata/nczarr/simple.cdl describes.
func checkNCZarr(t *testing.T, dir string) {
	fs, err := file.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	g := gateway.New(storesvc.Wrap(fs, storesvc.ReadOnly()), codecsvc.NewLocal(), gateway.Config{})
	root, err := g.GetNode(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if root.Format != gateway.FormatNCZarr || fmt.Sprint(root.Group.Dimensions) != "[{time 3 false} {lat 4 false} {lon 5 false}]" {
		t.Fatalf("root group: format %v, dimensions %v", root.Format, root.Group.Dimensions)
	}
	temp, err := g.GetNode(context.Background(), "temp")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(temp.Array.DimensionNames) != "[time lat lon]" || fmt.Sprint(temp.Array.Shape) != "[3 4 5]" {
		t.Fatalf("temp: dimensions %v, shape %v", temp.Array.DimensionNames, temp.Array.Shape)
	}
	var attrs map[string]any
	json.Unmarshal(temp.Array.Attributes, &attrs)
	if attrs["units"] != "K" || attrs["scale_factor"] != 0.5 {
		t.Fatalf("temp attributes %s", temp.Array.Attributes)
	}
	_, data, _ := readWhole(t, g, "temp")
	for i := range 60 {
		if v := math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:])); v != float32(i) {
			t.Fatalf("temp[%d] = %v", i, v)
		}
	}
	_, data, _ = readWhole(t, g, "lon")
	for i, want := range []float64{0, 72.5, 145, 217.5, 290} {
		if v := math.Float64frombits(binary.LittleEndian.Uint64(data[8*i:])); v != want {
			t.Fatalf("lon[%d] = %v", i, v)
		}
	}
	info, data, _ := readWhole(t, g, "scalar")
	if len(info.Shape) != 0 || int32(binary.LittleEndian.Uint32(data)) != 42 {
		t.Fatalf("scalar: shape %v value %v (a netCDF scalar is a 0-d array)", info.Shape, data)
	}
}

// The NCZarr dataset netCDF 4.9.0's ncgen wrote (committed).
func TestReadsNCZarrFixture(t *testing.T) {
	checkNCZarr(t, "../testdata/nczarr/simple.ncz")
}

// The same, written by ncgen now.
func TestReadsNCZarrFromNcgen(t *testing.T) {
	ncgen := testenv.Tool(t, "ncgen")
	dir := filepath.Join(t.TempDir(), "simple.ncz")
	cdl, _ := filepath.Abs("../testdata/nczarr/simple.cdl")
	out, err := exec.Command(ncgen, "-4", "-lb", "-o", "file://"+dir+"#mode=nczarr,file", cdl).CombinedOutput()
	if err != nil {
		t.Fatalf("ncgen: %v\n%s", err, out)
	}
	checkNCZarr(t, dir)
}

// ncdump prints a Zarr v2 array the gateway wrote (with xarray's dimension
// names, which netCDF maps to dimensions). Uncompressed: Debian's netCDF
// 4.9.0 decodes Zarr compressors only through HDF5 filter plugins, which it
// does not install, and then reads compressed bytes as values.
func TestNcdumpReadsGatewayV2(t *testing.T) {
	ncdump := testenv.Tool(t, "ncdump")
	dir := t.TempDir()
	fs, err := file.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	g := gateway.New(fs, codecsvc.NewLocal(), gateway.Config{})
	ctx := context.Background()
	if _, err := g.CreateGroup(ctx, "", gateway.GroupSpec{Format: gateway.FormatV2, Attributes: json.RawMessage(`{"title":"written by zarrgate"}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.CreateArray(ctx, "elevation", gateway.ArraySpec{Format: gateway.FormatV2, Shape: []int64{3, 4}, DataType: "int32", ChunkShape: []int64{2, 2},
		DimensionNames: []string{"y", "x"}, Codecs: json.RawMessage(`[{"name":"bytes","configuration":{"endian":"little"}}]`)}); err != nil {
		t.Fatal(err)
	}
	var data []byte
	for i := range 12 {
		data = binary.LittleEndian.AppendUint32(data, uint32(i*100))
	}
	done := false
	if _, err := g.WriteSlab(ctx, "elevation", nil, func() (gateway.Block, error) {
		if done {
			return gateway.Block{}, io.EOF
		}
		done = true
		return gateway.Block{Origin: []int64{0, 0}, Shape: []int64{3, 4}, Data: data}, nil
	}); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(ncdump, "file://"+dir+"#mode=zarr,file").CombinedOutput()
	if err != nil {
		t.Fatalf("ncdump: %v\n%s", err, out)
	}
	text := strings.Join(strings.Fields(string(out)), " ")
	for _, want := range []string{"int elevation(y, x)", "y = 3", "x = 4", "elevation = 0, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1100"} {
		if !strings.Contains(text, want) {
			t.Errorf("ncdump output lacks %q:\n%s", want, out)
		}
	}
}

// writeNCZarrSubgroups writes, through the gateway, a dataset with a
// subgroup that declares its own dimension and an array in it that uses
// both a root dimension and the subgroup's:
//
//	dimensions: x = 3 ;  variables: float x(x) (never written: all fill)
//	group: sub { dimensions: level = 2 ; variables: int v(x, level) }
//
// with float and int attributes on arrays and groups. Uncompressed, so
// Debian's netCDF 4.9.0 (no filter plugins) reads the values.
func writeNCZarrSubgroups(t *testing.T, dir string, legacy bool) {
	t.Helper()
	fs, err := file.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	g := gateway.New(fs, codecsvc.NewLocal(), gateway.Config{})
	ctx := context.Background()
	raw := json.RawMessage(`[{"name":"bytes","configuration":{"endian":"little"}}]`)
	if _, err := g.CreateGroup(ctx, "", gateway.GroupSpec{Format: gateway.FormatNCZarr, NCZarrLegacy: legacy,
		Dimensions: []zarr.Dimension{{Name: "x", Size: 3}}, Attributes: json.RawMessage(`{"title":"zarrgate","gf":2.5,"gi":7}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.CreateArray(ctx, "x", gateway.ArraySpec{Format: gateway.FormatNCZarr, Shape: []int64{3}, DataType: "float32",
		DimensionNames: []string{"x"}, Codecs: raw, FillValue: json.RawMessage(`-9.5`), Attributes: json.RawMessage(`{"scale":1.5,"count":"seven"}`)}); err != nil {
		t.Fatal(err)
	}
	// An attribute rewritten with a value of another kind is typed afresh
	// (as char it would read back as "7", or fail).
	if _, err := g.UpdateAttributes(ctx, "x", json.RawMessage(`{"count":7}`), true); err != nil {
		t.Fatal(err)
	}
	// The subgroup takes the root's form without being told.
	if _, err := g.CreateGroup(ctx, "sub", gateway.GroupSpec{Format: gateway.FormatNCZarr,
		Dimensions: []zarr.Dimension{{Name: "level", Size: 2}}, Attributes: json.RawMessage(`{"depth":12.25}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.CreateArray(ctx, "sub/v", gateway.ArraySpec{Format: gateway.FormatNCZarr, Shape: []int64{3, 2}, DataType: "int32",
		DimensionNames: []string{"x", "level"}, Codecs: raw, FillValue: json.RawMessage(`-1`), Attributes: json.RawMessage(`{"f":0.25,"i":42,"big":5000000000}`)}); err != nil {
		t.Fatal(err)
	}
	// Rows 0 and 1 written, row 2 left to the fill value.
	var data []byte
	for i := range 4 {
		data = binary.LittleEndian.AppendUint32(data, uint32(i+1))
	}
	done := false
	if _, err := g.WriteSlab(ctx, "sub/v", []zarr.Range{{Start: 0, Stop: 2, Step: 1}, {Start: 0, Stop: 2, Step: 1}}, func() (gateway.Block, error) {
		if done {
			return gateway.Block{}, io.EOF
		}
		done = true
		return gateway.Block{Origin: []int64{0, 0}, Shape: []int64{2, 2}, Data: data}, nil
	}); err != nil {
		t.Fatal(err)
	}
}

// Debian's ncdump (netCDF-C 4.9.0, what CI installs) reads the upper-case
// form with the subgroup's dimension in the subgroup, the variable's
// dimensions resolved there and at the root, the fill values and the
// attributes' types (a "f" suffix is float, none on an integer is int,
// "L" int64, a trailing "." or fraction double).
func TestNcdumpReadsGatewayNCZarrSubgroups(t *testing.T) {
	ncdump := testenv.Tool(t, "ncdump")
	dir := filepath.Join(t.TempDir(), "sub.ncz")
	writeNCZarrSubgroups(t, dir, true)
	out, err := exec.Command(ncdump, "file://"+dir+"#mode=nczarr,file").CombinedOutput()
	if err != nil {
		t.Fatalf("ncdump: %v\n%s", err, out)
	}
	text := strings.Join(strings.Fields(string(out)), " ")
	want := []string{
		"dimensions: x = 3 ; variables: float x(x) ;",
		`:title = "zarrgate" ;`, ":gf = 2.5 ;", ":gi = 7 ;",
		"x:scale = 1.5 ;", "x:count = 7 ;", "x = -9.5, -9.5, -9.5 ;",
		"group: sub { dimensions: level = 2 ; variables: int v(x, level) ;",
		"v:f = 0.25 ;", "v:i = 42 ;", "v:big = 5000000000LL ;", ":depth = 12.25 ;",
		"v = 1, 2, 3, 4, -1, -1 ;",
	}
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("ncdump output lacks %q", w)
		}
	}
	// A dangling /level would make ncdump invent a root dimension; NCZarr
	// attributes read as plain ones mean the form was not understood.
	for _, bad := range []string{"level = 2 ; variables: float", "_nczarr", "_NCZARR", "_Anonymous"} {
		if strings.Contains(text, bad) {
			t.Errorf("ncdump output has %q", bad)
		}
	}
	if t.Failed() {
		t.Logf("ncdump output:\n%s", out)
	}
}

// ncDumpPy prints a netCDF dataset as JSON: per group its dimensions, its
// attributes with their numpy types, its variables with the full names of
// their dimensions (the group that declares each), type, fill value
// (nc_inq_var_fill) and data, and its subgroups.
const ncDumpPy = `
import json, sys, netCDF4, numpy as np
def attrs(o):
    out = {}
    for k in o.ncattrs():
        v = o.getncattr(k)
        out[k] = ["str", v] if isinstance(v, str) else [np.asarray(v).dtype.str, np.asarray(v).tolist()]
    return out
def walk(g):
    d = {"dims": {n: len(x) for n, x in g.dimensions.items()}, "attrs": attrs(g), "vars": {}, "groups": {}}
    for n, v in g.variables.items():
        v.set_auto_mask(False)
        d["vars"][n] = {"dims": [x.group().path.rstrip("/") + "/" + x.name for x in v.get_dims()],
                        "dtype": v.dtype.str, "fill": v.get_fill_value().item(), "attrs": attrs(v),
                        "data": np.asarray(v[...]).tolist()}
    for n, s in g.groups.items():
        d["groups"][n] = walk(s)
    return d
print(json.dumps({"lib": netCDF4.__netcdf4libversion__, "root": walk(netCDF4.Dataset(sys.argv[1], "r"))}))
`

// netCDF-C 4.10 (the netCDF4 wheel from PyPI) reads the current,
// lower-case form with the same structure, types and values.
func TestNetCDF4ReadsGatewayNCZarrSubgroups(t *testing.T) {
	py := testenv.Python(t)
	if out, err := exec.Command(py, "-c", "import netCDF4").CombinedOutput(); err != nil {
		if os.Getenv("ZARRGATE_INTEROP_REQUIRED") != "" {
			t.Fatalf("netCDF4 is missing from %s but the interop checks are required: %s", py, out)
		}
		t.Skipf("netCDF4 is missing from %s: run scripts/deps.sh", py)
	}
	dir := filepath.Join(t.TempDir(), "sub.ncz")
	writeNCZarrSubgroups(t, dir, false)
	out, err := exec.Command(py, "-c", ncDumpPy, "file://"+dir+"#mode=nczarr,file").CombinedOutput()
	if err != nil {
		t.Fatalf("netCDF4: %v\n%s", err, out)
	}
	var got struct {
		Lib  string
		Root json.RawMessage
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("netCDF4 printed %s: %v", out, err)
	}
	if !strings.HasPrefix(got.Lib, "4.10.") {
		t.Errorf("netCDF-C %s, want 4.10.x (the pinned netCDF4 wheel)", got.Lib)
	}
	want := `{"attrs": {"gf": ["<f8", 2.5], "gi": ["<i4", 7], "title": ["str", "zarrgate"]}, "dims": {"x": 3},
	 "groups": {"sub": {"attrs": {"depth": ["<f8", 12.25]}, "dims": {"level": 2}, "groups": {},
	   "vars": {"v": {"attrs": {"big": ["<i8", 5000000000], "f": ["<f8", 0.25], "i": ["<i4", 42]},
	     "data": [[1, 2], [3, 4], [-1, -1]], "dims": ["/x", "/sub/level"], "dtype": "<i4", "fill": -1}}}},
	 "vars": {"x": {"attrs": {"count": ["<i4", 7], "scale": ["<f8", 1.5]}, "data": [-9.5, -9.5, -9.5],
	   "dims": ["/x"], "dtype": "<f4", "fill": -9.5}}}`
	var gotV, wantV any
	json.Unmarshal(got.Root, &gotV)
	if err := json.Unmarshal([]byte(want), &wantV); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gotV, wantV) {
		g, _ := json.MarshalIndent(gotV, "", " ")
		t.Errorf("netCDF-C %s reads\n%s\nwant\n%s", got.Lib, g, want)
	}
}

// A dataset ncgen 4.9.0 wrote keeps its form when the gateway adds to it:
// the new array in the subgroup uses the subgroup's own dimension, and the
// subgroup's updated list of variables stays where 4.9.0 reads it.
func TestNcdumpReadsNcgenDatasetExtended(t *testing.T) {
	ncgen, ncdump := testenv.Tool(t, "ncgen"), testenv.Tool(t, "ncdump")
	tmp := t.TempDir()
	cdl := filepath.Join(tmp, "sub.cdl")
	if err := os.WriteFile(cdl, []byte(`netcdf sub { dimensions: x = 3 ; variables: int x(x) ; data: x = 7, 8, 9 ;
		group: sub { dimensions: level = 2 ; variables: double v(level) ; v:units = "m" ; data: v = 0.5, 1.5 ; } }`), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(tmp, "sub.ncz")
	if out, err := exec.Command(ncgen, "-4", "-lb", "-o", "file://"+dir+"#mode=nczarr,file", cdl).CombinedOutput(); err != nil {
		t.Fatalf("ncgen: %v\n%s", err, out)
	}
	fs, err := file.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	g := gateway.New(fs, codecsvc.NewLocal(), gateway.Config{})
	ctx := context.Background()
	if _, err := g.CreateArray(ctx, "sub/w", gateway.ArraySpec{Format: gateway.FormatNCZarr, Shape: []int64{3, 2}, DataType: "int16",
		DimensionNames: []string{"x", "level"}, FillValue: json.RawMessage(`-3`), Attributes: json.RawMessage(`{"n":5}`),
		Codecs: json.RawMessage(`[{"name":"bytes","configuration":{"endian":"little"}}]`)}); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(ncdump, "file://"+dir+"#mode=nczarr,file").CombinedOutput()
	if err != nil {
		t.Fatalf("ncdump: %v\n%s", err, out)
	}
	text := strings.Join(strings.Fields(string(out)), " ")
	for _, w := range []string{"dimensions: x = 3 ; variables: int x(x) ;", "group: sub { dimensions: level = 2 ; variables: double v(level) ;",
		"short w(x, level) ;", "w:n = 5 ;", "x = 7, 8, 9 ;", "v = 0.5, 1.5 ;", "w = -3, -3, -3, -3, -3, -3 ;"} {
		if !strings.Contains(text, w) {
			t.Errorf("ncdump output lacks %q:\n%s", w, out)
		}
	}
}
