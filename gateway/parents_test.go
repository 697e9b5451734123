package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/file"
	"github.com/zarrgate/zarrgate/zarr"
)

// writeCounter is a real file store that counts the successful writes of
// each key, to tell a parent written once from one written over.
type writeCounter struct {
	storesvc.Store
	mu     sync.Mutex
	writes map[string]int
}

func (s *writeCounter) Set(ctx context.Context, key string, value io.Reader, cond storesvc.Condition) (string, error) {
	gen, err := s.Store.Set(ctx, key, value, cond)
	if err == nil {
		s.mu.Lock()
		s.writes[key]++
		s.mu.Unlock()
	}
	return gen, err
}

func (s *writeCounter) count(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes[key]
}

func newCountingGateway(t *testing.T) (*Gateway, *writeCounter) {
	t.Helper()
	fs, err := file.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cs := &writeCounter{Store: fs, writes: map[string]int{}}
	return New(cs, nil, Config{}), cs
}

// keys lists every stored key, sorted.
func keys(t *testing.T, g *Gateway) []string {
	t.Helper()
	var out []string
	for k, err := range g.store.ListPrefix(ctx, "") {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func descendants(t *testing.T, g *Gateway, path string) string {
	t.Helper()
	var paths []string
	err := g.Children(ctx, path, true, func(n *Node) error {
		kind := "group"
		if n.Array != nil {
			kind = "array"
		}
		paths = append(paths, fmt.Sprintf("%s:%s:%s", n.Path, kind, n.Format))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(paths, " ")
}

func wantGroup(t *testing.T, g *Gateway, path string, format Format) *Node {
	t.Helper()
	n, err := g.GetNode(ctx, path)
	if err != nil {
		t.Fatalf("parent %q: %v", path, err)
	}
	if n.Group == nil || n.Format != format {
		t.Fatalf("parent %q: %+v, want a %s group", path, n, format)
	}
	return n
}

var smallArray = ArraySpec{Shape: []int64{4}, DataType: "int32", ChunkShape: []int64{2}}

// An array made under missing groups makes them, the root included, in
// its own format, as zarr-python does; an existing group is kept as it is.
func TestParentsV3(t *testing.T) {
	g, cs := newCountingGateway(t)
	if _, err := g.CreateArray(ctx, "climate/t2m", smallArray); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(keys(t, g)); got != "[climate/t2m/zarr.json climate/zarr.json zarr.json]" {
		t.Fatalf("keys = %s", got)
	}
	for _, p := range []string{"", "climate"} {
		wantGroup(t, g, p, FormatV3)
		key := nodePrefix(p) + "zarr.json"
		raw, _, err := storesvc.ReadAll(ctx, g.store, key)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			ZarrFormat int    `json:"zarr_format"`
			NodeType   string `json:"node_type"`
		}
		if err := json.Unmarshal(raw, &doc); err != nil || doc.ZarrFormat != 3 || doc.NodeType != "group" {
			t.Fatalf("%s = %s (%v)", key, raw, err)
		}
	}
	if got := descendants(t, g, ""); got != "climate:group:zarr v3 climate/t2m:array:zarr v3" {
		t.Fatalf("tree = %s", got)
	}

	// A nested group likewise; the groups already there are not written
	// again (their attributes stay).
	if _, err := g.UpdateAttributes(ctx, "climate", json.RawMessage(`{"title":"keep me"}`), false); err != nil {
		t.Fatal(err)
	}
	before := cs.count("climate/zarr.json")
	if _, err := g.CreateGroup(ctx, "climate/daily/stats", GroupSpec{Attributes: json.RawMessage(`{"a":1}`)}); err != nil {
		t.Fatal(err)
	}
	if cs.count("climate/zarr.json") != before || cs.count("zarr.json") != 1 {
		t.Fatalf("existing groups written again: climate %d→%d, root %d", before, cs.count("climate/zarr.json"), cs.count("zarr.json"))
	}
	if n := wantGroup(t, g, "climate", FormatV3); !strings.Contains(string(n.Group.Attributes), `"keep me"`) {
		t.Fatalf("climate's attributes = %s", n.Group.Attributes)
	}
	wantGroup(t, g, "climate/daily", FormatV3)
	if got := descendants(t, g, "climate"); got != "climate/daily:group:zarr v3 climate/daily/stats:group:zarr v3 climate/t2m:array:zarr v3" {
		t.Fatalf("tree = %s", got)
	}
}

func TestParentsV2(t *testing.T) {
	g, _ := newCountingGateway(t)
	spec := smallArray
	spec.Format = FormatV2
	if _, err := g.CreateArray(ctx, "climate/t2m", spec); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"", "climate"} {
		wantGroup(t, g, p, FormatV2)
		raw, _, err := storesvc.ReadAll(ctx, g.store, nodePrefix(p)+".zgroup")
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := json.Unmarshal(raw, &doc); err != nil || fmt.Sprint(doc) != "map[zarr_format:2]" {
			t.Fatalf(".zgroup of %q = %s (%v)", p, raw, err)
		}
	}
	for _, k := range keys(t, g) {
		if strings.HasSuffix(k, "zarr.json") {
			t.Fatalf("a v2 hierarchy got %s", k)
		}
	}
	if got := descendants(t, g, ""); got != "climate:group:zarr v2 climate/t2m:array:zarr v2" {
		t.Fatalf("tree = %s", got)
	}
	if _, err := g.CreateGroup(ctx, "a/b", GroupSpec{Format: FormatV2}); err != nil {
		t.Fatal(err)
	}
	wantGroup(t, g, "a", FormatV2)
}

// NCZarr parents are NCZarr groups, each listed in its parent's
// _nczarr_group, as netCDF finds them; the root carries the superblock.
func TestParentsNCZarr(t *testing.T) {
	g, _ := newCountingGateway(t)
	// The root declares the dimension the variable uses (netCDF resolves
	// a variable's dimensions against its enclosing groups).
	if _, err := g.CreateGroup(ctx, "", GroupSpec{Format: FormatNCZarr, Dimensions: []zarr.Dimension{{Name: "n", Size: 4}}}); err != nil {
		t.Fatal(err)
	}
	spec := smallArray
	spec.Format, spec.DimensionNames = FormatNCZarr, []string{"n"}
	if _, err := g.CreateArray(ctx, "model/run1/x", spec); err != nil {
		t.Fatal(err)
	}
	root := wantGroup(t, g, "", FormatNCZarr)
	if !root.Group.NCZarr.Superblock || fmt.Sprint(root.Group.Dimensions) != fmt.Sprint([]zarr.Dimension{{Name: "n", Size: 4}}) || fmt.Sprint(root.Group.NCZarr.Groups) != "[model]" {
		t.Fatalf("root = %+v %+v", root.Group, root.Group.NCZarr)
	}
	model := wantGroup(t, g, "model", FormatNCZarr)
	if model.Group.NCZarr.Superblock || fmt.Sprint(model.Group.NCZarr.Groups) != "[run1]" || len(model.Group.NCZarr.Arrays) != 0 {
		t.Fatalf("model = %+v", model.Group.NCZarr)
	}
	run := wantGroup(t, g, "model/run1", FormatNCZarr)
	if fmt.Sprint(run.Group.NCZarr.Arrays) != "[x]" || len(run.Group.NCZarr.Groups) != 0 {
		t.Fatalf("run1 = %+v", run.Group.NCZarr)
	}

	// From an empty store: the root is made too, with the superblock.
	g2, _ := newCountingGateway(t)
	if _, err := g2.CreateGroup(ctx, "a/b", GroupSpec{Format: FormatNCZarr}); err != nil {
		t.Fatal(err)
	}
	root = wantGroup(t, g2, "", FormatNCZarr)
	a := wantGroup(t, g2, "a", FormatNCZarr)
	if !root.Group.NCZarr.Superblock || fmt.Sprint(root.Group.NCZarr.Groups) != "[a]" || fmt.Sprint(a.Group.NCZarr.Groups) != "[b]" {
		t.Fatalf("root %+v, a %+v", root.Group.NCZarr, a.Group.NCZarr)
	}
	raw, _, err := storesvc.ReadAll(ctx, g2.store, ".zattrs")
	if err != nil || !strings.Contains(string(raw), "_nczarr_superblock") {
		t.Fatalf("root .zattrs = %s, %v", raw, err)
	}
}

// Creators of siblings under the same missing parents, all at once, all
// succeed; each parent is written exactly once, and (NCZarr) every
// sibling is listed in it.
func TestParentsConcurrentSiblings(t *testing.T) {
	for _, format := range []Format{FormatV3, FormatV2, FormatNCZarr} {
		t.Run(format.String(), func(t *testing.T) {
			g, cs := newCountingGateway(t)
			// Several rounds, each under new missing groups, as one round
			// may not meet every interleaving.
			const rounds = 6
			var tops []string
			for r := range rounds {
				top := fmt.Sprintf("p%d", r)
				tops = append(tops, top)
				createSiblings(t, g, top+"/q", format)
			}
			defining := "zarr.json"
			if format != FormatV3 {
				defining = ".zgroup"
			}
			parents := []string{""}
			for _, top := range tops {
				parents = append(parents, top, top+"/q")
			}
			for _, p := range parents {
				wantGroup(t, g, p, format)
				if c := cs.count(nodePrefix(p) + defining); c != 1 {
					t.Errorf("%s of %q written %d times", defining, p, c)
				}
			}
			if format == FormatNCZarr {
				if r := wantGroup(t, g, "", format).Group.NCZarr; fmt.Sprint(slices.Sorted(slices.Values(r.Groups))) != fmt.Sprint(tops) {
					t.Errorf("root lists %v", r.Groups)
				}
				for _, top := range tops {
					if p := wantGroup(t, g, top, format).Group.NCZarr; fmt.Sprint(p.Groups) != "[q]" {
						t.Errorf("%s lists %v", top, p.Groups)
					}
				}
			}
		})
	}
}

// createSiblings creates 8 arrays under parent at once, checks they all
// succeed and are all its children (and, NCZarr, listed in it).
func createSiblings(t *testing.T, g *Gateway, parent string, format Format) {
	t.Helper()
	const n = 8
	start := make(chan struct{})
	errc := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			spec := smallArray
			spec.Format = format
			if format == FormatNCZarr {
				spec.Shape, spec.ChunkShape = nil, nil // a scalar: no dimensions to declare
			}
			_, err := g.CreateArray(ctx, fmt.Sprintf("%s/a%d", parent, i), spec)
			errc <- err
		}()
	}
	close(start)
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			t.Fatal(err)
		}
	}
	var want, got []string
	for i := range n {
		want = append(want, fmt.Sprintf("%s/a%d", parent, i))
	}
	if err := g.Children(ctx, parent, false, func(n *Node) error { got = append(got, n.Path); return nil }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("children of %s = %v", parent, got)
	}
	if format == FormatNCZarr {
		q := wantGroup(t, g, parent, format).Group.NCZarr
		if vars := slices.Sorted(slices.Values(q.Arrays)); fmt.Sprint(vars) != "[a0 a1 a2 a3 a4 a5 a6 a7]" {
			t.Fatalf("%s lists %v", parent, q.Arrays)
		}
	}
}

// An array where a parent group is needed is FailedPrecondition naming
// it, and nothing is written: not even the missing groups above it.
func TestParentsArrayInTheWay(t *testing.T) {
	g, _ := newCountingGateway(t)
	if _, err := g.CreateArray(ctx, "a/arr", smallArray); err != nil {
		t.Fatal(err)
	}
	// Leave the array without parents, as older writers did.
	for _, k := range []string{"zarr.json", "a/zarr.json"} {
		if err := g.store.Erase(ctx, k, storesvc.Condition{}); err != nil {
			t.Fatal(err)
		}
	}
	before := keys(t, g)
	_, err := g.CreateArray(ctx, "a/arr/x/y", smallArray)
	wantCode(t, "array under an array", err, errs.FailedPrecondition)
	if !strings.Contains(err.Error(), "/a/arr is an array") {
		t.Fatalf("error does not name the array: %v", err)
	}
	_, err = g.CreateGroup(ctx, "a/arr/g", GroupSpec{Format: FormatV2})
	wantCode(t, "group under an array", err, errs.FailedPrecondition)
	if after := keys(t, g); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("refused creations wrote keys: %v → %v", before, after)
	}

	// The root itself.
	g2, _ := newCountingGateway(t)
	if _, err := g2.CreateArray(ctx, "", smallArray); err != nil {
		t.Fatal(err)
	}
	_, err = g2.CreateGroup(ctx, "g", GroupSpec{})
	wantCode(t, "group under a root array", err, errs.FailedPrecondition)
	if !strings.Contains(err.Error(), "the root (/) is an array") {
		t.Fatalf("error does not name the root: %v", err)
	}
}
