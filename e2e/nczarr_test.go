package e2e

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
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
