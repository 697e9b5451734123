package e2e

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/gateway"
	"github.com/zarrgate/zarrgate/internal/testenv"
	"github.com/zarrgate/zarrgate/storesvc/file"
	"github.com/zarrgate/zarrgate/zarr"
)

// zarr-python opens the hierarchy the CLI made, reads it with the given
// format, and reports its members, the formats of the parents it finds,
// what it reads of the array and the group, and its tree.
const parentsCheck = `
import json, sys, zarr
root = zarr.open_group(sys.argv[1], mode="r", zarr_format=int(sys.argv[2]))
t2m = root["climate/t2m"]
print(json.dumps({
    "members": sorted(k for k, _ in root.members(max_depth=None)),
    "formats": [root.metadata.zarr_format, root["climate"].metadata.zarr_format, root["model"].metadata.zarr_format],
    "t2m": [list(t2m.shape), str(t2m.dtype), t2m.attrs.get("units")],
    "run1": root["model/run1"].attrs.asdict(),
    "tree": str(root.tree()),
}))
`

// An array or a group made with missing parents (issue 13) shows in ls,
// its parent in info, and the whole hierarchy in zarr-python, in v3 and v2.
func TestParentsVisibleEverywhere(t *testing.T) {
	for _, tc := range []struct{ format, zarrFormat string }{{"v3", "3"}, {"v2", "2"}} {
		t.Run(tc.format, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "store")
			s := startServer(t, "--root", root)
			a := "--addr=" + s.addr

			mustZg(t, "", "mkarray", a, "climate/t2m", "--shape", "365,72,144", "--dtype", "float32",
				"--chunks", "1,36,72", "--dims", "time,lat,lon", "--attrs", `{"units": "K"}`, "--format", tc.format)
			out := mustZg(t, "", "mkgroup", a, "model/run1", "--attrs", `{"member": 1}`, "--format", tc.format)
			if strings.TrimSpace(out) != "created group /model/run1 ("+tc.format+")" {
				t.Fatalf("mkgroup: %q", out)
			}

			var listed []string
			for _, line := range strings.Split(strings.TrimSpace(mustZg(t, "", "ls", a, "-r")), "\n") {
				listed = append(listed, strings.Join(strings.Fields(line)[:2], " "))
			}
			if got := strings.Join(listed, "; "); got != "climate group; climate/t2m array; model group; model/run1 group" {
				t.Fatalf("ls -r lists: %s", got)
			}
			out = mustZg(t, "", "info", a, "climate")
			if !strings.Contains(out, "/climate") || !strings.Contains(out, "group") {
				t.Fatalf("info climate:\n%s", out)
			}

			// An existing group is not made again; an array cannot hold one.
			_, errOut, code := zg(t, "", "mkgroup", a, "model", "--format", tc.format)
			if code != 1 || !strings.Contains(errOut, "already exists") {
				t.Fatalf("mkgroup over a group: exit %d: %s", code, errOut)
			}
			_, errOut, code = zg(t, "", "mkgroup", a, "climate/t2m/x/y", "--format", tc.format)
			if code != 1 || !strings.Contains(errOut, "/climate/t2m is an array") {
				t.Fatalf("mkgroup under an array: exit %d: %s", code, errOut)
			}

			t.Run("zarr-python", func(t *testing.T) {
				py := testenv.Python(t)
				res, err := exec.Command(py, "-c", parentsCheck, root, tc.zarrFormat).CombinedOutput()
				if err != nil {
					t.Fatalf("zarr-python: %v\n%s", err, res)
				}
				var got struct {
					Members []string
					Formats []int
					T2m     []any
					Run1    map[string]any
					Tree    string
				}
				if err := json.Unmarshal(res, &got); err != nil {
					t.Fatalf("zarr-python said %s: %v", res, err)
				}
				if strings.Join(got.Members, " ") != "climate climate/t2m model model/run1" {
					t.Errorf("zarr-python's members: %v", got.Members)
				}
				if f := got.Formats; len(f) != 3 || f[0] != f[1] || f[1] != f[2] || fmt.Sprint(f[0]) != tc.zarrFormat {
					t.Errorf("zarr-python finds parents of formats %v", f)
				}
				if b, _ := json.Marshal(got.T2m); string(b) != `[[365,72,144],"float32","K"]` {
					t.Errorf("zarr-python reads climate/t2m as %s", b)
				}
				if got.Run1["member"] != 1.0 {
					t.Errorf("zarr-python reads model/run1's attributes as %v", got.Run1)
				}
				if !strings.Contains(got.Tree, "climate") || !strings.Contains(got.Tree, "t2m") || !strings.Contains(got.Tree, "run1") {
					t.Errorf("zarr-python's tree:\n%s", got.Tree)
				}
			})
		})
	}
}

// An NCZarr variable made under missing groups: netCDF's ncdump finds the
// groups the gateway made for it, nested, and the variable in the
// innermost one with its dimension (declared by the root) and values.
func TestNcdumpReadsNCZarrParents(t *testing.T) {
	ncdump := testenv.Tool(t, "ncdump")
	dir := t.TempDir()
	fs, err := file.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	g := gateway.New(fs, codecsvc.NewLocal(), gateway.Config{})
	ctx := context.Background()
	if _, err := g.CreateGroup(ctx, "", gateway.GroupSpec{Format: gateway.FormatNCZarr, Dimensions: []zarr.Dimension{{Name: "n", Size: 3}}}); err != nil {
		t.Fatal(err)
	}
	// Uncompressed: see TestNcdumpReadsGatewayV2.
	if _, err := g.CreateArray(ctx, "model/run1/x", gateway.ArraySpec{Format: gateway.FormatNCZarr, Shape: []int64{3}, DataType: "int32",
		DimensionNames: []string{"n"}, Codecs: json.RawMessage(`[{"name":"bytes","configuration":{"endian":"little"}}]`)}); err != nil {
		t.Fatal(err)
	}
	done := false
	if _, err := g.WriteSlab(ctx, "model/run1/x", nil, func() (gateway.Block, error) {
		if done {
			return gateway.Block{}, io.EOF
		}
		done = true
		return gateway.Block{Origin: []int64{0}, Shape: []int64{3}, Data: binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, 7), 8), 9)}, nil
	}); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(ncdump, "file://"+dir+"#mode=nczarr,file").CombinedOutput()
	if err != nil {
		t.Fatalf("ncdump: %v\n%s", err, out)
	}
	text := strings.Join(strings.Fields(string(out)), " ")
	model, run1, x := strings.Index(text, "group: model {"), strings.Index(text, "group: run1 {"), strings.Index(text, "int x(n) ;")
	if !strings.Contains(text, "n = 3 ;") || model < 0 || run1 < model || x < run1 || !strings.Contains(text, "x = 7, 8, 9 ;") {
		t.Fatalf("ncdump does not show x(n) in group run1 in group model:\n%s", out)
	}
}
