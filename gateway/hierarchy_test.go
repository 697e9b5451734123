package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/file"
	"github.com/zarrgate/zarrgate/storesvc/memory"
	"github.com/zarrgate/zarrgate/zarr"
)

var ctx = context.Background()

func newTestGateway(t *testing.T) *Gateway {
	t.Helper()
	fs, err := file.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return New(fs, nil, Config{})
}

func wantCode(t *testing.T, what string, err error, kind *errs.Kind) {
	t.Helper()
	if !errors.Is(err, kind) {
		t.Fatalf("%s: got %v, want %v", what, err, kind)
	}
}

func TestHierarchyV3(t *testing.T) {
	g := newTestGateway(t)
	if _, err := g.CreateGroup(ctx, "", GroupSpec{Attributes: json.RawMessage(`{"title":"root"}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.CreateGroup(ctx, "g", GroupSpec{}); err != nil {
		t.Fatal(err)
	}
	spec := ArraySpec{Shape: []int64{100, 50}, DataType: "float32", ChunkShape: []int64{10, 10}, DimensionNames: []string{"y", "x"}, FillValue: json.RawMessage(`"NaN"`)}
	if _, err := g.CreateArray(ctx, "g/a", spec); err != nil {
		t.Fatal(err)
	}
	_, err := g.CreateArray(ctx, "g/a", spec)
	wantCode(t, "creating over an array", err, errs.AlreadyExists)
	_, err = g.CreateGroup(ctx, "g", GroupSpec{})
	wantCode(t, "creating over a group", err, errs.AlreadyExists)

	n, err := g.GetNode(ctx, "g/a")
	if err != nil {
		t.Fatal(err)
	}
	if n.Format != FormatV3 || n.Array == nil || n.Array.DataType.Name != "float32" || fmt.Sprint(n.Array.Shape) != "[100 50]" || fmt.Sprint(n.Array.DimensionNames) != "[y x]" {
		t.Fatalf("node = %+v / %+v", n, n.Array)
	}
	raw, _, err := storesvc.ReadAll(ctx, g.store, "g/a/zarr.json")
	if err != nil || !strings.Contains(string(raw), `"node_type":"array"`) && !strings.Contains(string(raw), `"node_type": "array"`) {
		t.Fatalf("zarr.json = %s, %v", raw, err)
	}

	var paths []string
	err = g.Children(ctx, "", true, func(n *Node) error { paths = append(paths, n.Path); return nil })
	if err != nil || fmt.Sprint(paths) != "[g g/a]" {
		t.Fatalf("children = %v, %v", paths, err)
	}
	_, err = g.GetNode(ctx, "nope")
	wantCode(t, "missing node", err, errs.NotFound)
	_, err = g.GetNode(ctx, "../x")
	wantCode(t, "bad path", err, errs.InvalidArgument)

	if _, err := g.UpdateAttributes(ctx, "g/a", json.RawMessage(`{"units":"K","scale":2}`), false); err != nil {
		t.Fatal(err)
	}
	n, err = g.UpdateAttributes(ctx, "g/a", json.RawMessage(`{"scale":3}`), true)
	if err != nil {
		t.Fatal(err)
	}
	var attrs map[string]any
	json.Unmarshal(n.Array.Attributes, &attrs)
	if attrs["units"] != "K" || attrs["scale"] != float64(3) {
		t.Fatalf("merged attributes = %s", n.Array.Attributes)
	}
	_, err = g.UpdateAttributes(ctx, "g/a", json.RawMessage(`[1]`), false)
	wantCode(t, "non-object attributes", err, errs.InvalidArgument)

	// Resize erases chunks wholly outside the new shape.
	for _, k := range []string{"g/a/c/0/0", "g/a/c/9/4", "g/a/c/5/0"} {
		if _, err := g.store.Set(ctx, k, strings.NewReader("x"), storesvc.Condition{}); err != nil {
			t.Fatal(err)
		}
	}
	n, err = g.Resize(ctx, "g/a", []int64{55, 50})
	if err != nil || fmt.Sprint(n.Array.Shape) != "[55 50]" {
		t.Fatalf("resize: %v %v", n, err)
	}
	for k, want := range map[string]bool{"g/a/c/0/0": true, "g/a/c/5/0": true, "g/a/c/9/4": false} {
		_, err := g.store.Get(ctx, k, storesvc.ByteRange{})
		if (err == nil) != want {
			t.Errorf("after resize, %s exists = %v, want %v", k, err == nil, want)
		}
	}
	_, err = g.Resize(ctx, "g/a", []int64{5})
	wantCode(t, "resize to another rank", err, errs.InvalidArgument)

	if err := g.Delete(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	_, err = g.GetNode(ctx, "g/a")
	wantCode(t, "deleted node", err, errs.NotFound)
	if _, err := g.GetNode(ctx, ""); err != nil {
		t.Fatalf("root after deleting a child: %v", err)
	}
}

func TestCreateArrayErrors(t *testing.T) {
	g := newTestGateway(t)
	cases := []struct {
		spec ArraySpec
		kind *errs.Kind
		word string
	}{
		{ArraySpec{Shape: []int64{10}, DataType: "float128"}, errs.Unimplemented, "float128"},
		{ArraySpec{Shape: []int64{10}, DataType: "int8", ChunkShape: []int64{0}}, errs.InvalidArgument, "chunk_shape"},
		{ArraySpec{Shape: []int64{10}, DataType: "int8", ChunkShape: []int64{2, 2}}, errs.InvalidArgument, "chunk_shape"},
		{ArraySpec{Shape: []int64{10}, DataType: "int8", ShardShape: []int64{3}, ChunkShape: []int64{2}}, errs.InvalidArgument, "shard_shape"},
		{ArraySpec{Shape: []int64{10}, DataType: "int8", Codecs: json.RawMessage(`{"x":1}`)}, errs.InvalidArgument, "codecs"},
		{ArraySpec{Shape: []int64{10}, DataType: "int8", FillValue: json.RawMessage(`"abc"`)}, errs.InvalidArgument, "fill"},
		{ArraySpec{Shape: []int64{10}, DataType: "int8", DimensionNames: []string{"a", "b"}}, errs.InvalidArgument, "dimension_names"},
	}
	for _, c := range cases {
		_, err := g.CreateArray(ctx, "a", c.spec)
		if !errors.Is(err, c.kind) || !strings.Contains(err.Error(), c.word) {
			t.Errorf("CreateArray(%+v) = %v, want %v naming %q", c.spec, err, c.kind, c.word)
		}
	}
}

// TestShardIndexMustHaveFixedSize: a compressed shard index has no fixed
// size, so partial reads cannot find it. Creating such an array fails, and
// reading one another tool wrote fails with the same clear error.
func TestShardIndexMustHaveFixedSize(t *testing.T) {
	st := memory.New()
	g := New(st, codecsvc.NewLocal(), Config{})
	codecs := `[{"name":"sharding_indexed","configuration":{"chunk_shape":[2],"codecs":[{"name":"bytes"}],"index_codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"gzip","configuration":{"level":1}}]}}]`
	_, err := g.CreateArray(ctx, "a", ArraySpec{Shape: []int64{10}, DataType: "int8", ChunkShape: []int64{10}, Codecs: json.RawMessage(codecs)})
	if !errors.Is(err, errs.InvalidArgument) || !strings.Contains(err.Error(), "index_codecs") {
		t.Fatalf("CreateArray = %v, want InvalidArgument naming index_codecs", err)
	}
	meta := `{"zarr_format":3,"node_type":"array","shape":[10],"data_type":"int8","chunk_grid":{"name":"regular","configuration":{"chunk_shape":[10]}},` +
		`"chunk_key_encoding":{"name":"default"},"fill_value":0,"codecs":` + codecs + `}`
	if _, err := st.Set(ctx, "b/zarr.json", strings.NewReader(meta), storesvc.Condition{}); err != nil {
		t.Fatal(err)
	}
	err = g.ReadSlab(ctx, "b", nil, func(SlabInfo) error { return nil }, func(Block) error { return nil })
	if !errors.Is(err, errs.InvalidArgument) || !strings.Contains(err.Error(), "index_codecs") {
		t.Fatalf("ReadSlab = %v, want InvalidArgument naming index_codecs", err)
	}
}

func TestHierarchyV2AndNCZarr(t *testing.T) {
	g := newTestGateway(t)
	if _, err := g.CreateGroup(ctx, "", GroupSpec{Format: FormatV2}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.CreateArray(ctx, "v2", ArraySpec{Format: FormatV2, Shape: []int64{4, 4}, DataType: "int16", ChunkShape: []int64{2, 2},
		Codecs: json.RawMessage(`[{"name":"bytes","configuration":{"endian":"big"}},{"name":"numcodecs.zlib","configuration":{"level":1}}]`)}); err != nil {
		t.Fatal(err)
	}
	za, _, err := storesvc.ReadAll(ctx, g.store, "v2/.zarray")
	if err != nil || !strings.Contains(string(za), `">i2"`) || !strings.Contains(string(za), `"zlib"`) {
		t.Fatalf(".zarray = %s, %v", za, err)
	}
	n, err := g.GetNode(ctx, "v2")
	if err != nil || n.Format != FormatV2 {
		t.Fatalf("v2 node: %+v, %v", n, err)
	}

	nc := New(memory.New(), nil, Config{})
	if _, err := nc.CreateGroup(ctx, "", GroupSpec{Format: FormatNCZarr, Dimensions: nczDims()}); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.CreateArray(ctx, "t", ArraySpec{Format: FormatNCZarr, Shape: []int64{3, 4}, DataType: "float64", ChunkShape: []int64{3, 4}, DimensionNames: []string{"time", "x"}}); err != nil {
		t.Fatal(err)
	}
	n, err = nc.GetNode(ctx, "t")
	if err != nil || n.Format != FormatNCZarr || fmt.Sprint(n.Array.DimensionNames) != "[time x]" {
		t.Fatalf("nczarr array: %+v, %v", n, err)
	}
	root, err := nc.GetNode(ctx, "")
	if err != nil || root.Group.NCZarr == nil || fmt.Sprint(root.Group.NCZarr.Arrays) != "[t]" {
		t.Fatalf("nczarr root does not list the variable: %+v, %v", root.Group, err)
	}
}

func TestConcurrentAttributeMerges(t *testing.T) {
	g := newTestGateway(t)
	g2 := New(g.store.Unwrap(), nil, Config{}) // a second gateway on the same store
	if _, err := g.CreateGroup(ctx, "", GroupSpec{}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gw := g
			if i%2 == 1 {
				gw = g2
			}
			if _, err := gw.UpdateAttributes(ctx, "", json.RawMessage(fmt.Sprintf(`{"k%d":%d}`, i, i)), true); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	n, err := New(g.store.Unwrap(), nil, Config{MetadataTTL: -1}).GetNode(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var attrs map[string]int
	json.Unmarshal(n.Group.Attributes, &attrs)
	if len(attrs) != 8 {
		t.Fatalf("attributes after 8 concurrent merges: %s", n.Group.Attributes)
	}
}

func nczDims() []zarr.Dimension {
	return []zarr.Dimension{{Name: "time", Size: 3, Unlimited: true}, {Name: "x", Size: 4}}
}
