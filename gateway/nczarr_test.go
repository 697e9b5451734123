package gateway

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/zarr"
)

// ncDataset makes an NCZarr root declaring x = 3 and level = 5, and a
// subgroup sub declaring its own level = 2, in the given form.
func ncDataset(t *testing.T, legacy bool) *Gateway {
	t.Helper()
	g := newTestGateway(t)
	if _, err := g.CreateGroup(ctx, "", GroupSpec{Format: FormatNCZarr, NCZarrLegacy: legacy,
		Dimensions: []zarr.Dimension{{Name: "x", Size: 3}, {Name: "level", Size: 5}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.CreateGroup(ctx, "sub", GroupSpec{Format: FormatNCZarr, Dimensions: []zarr.Dimension{{Name: "level", Size: 2}}}); err != nil {
		t.Fatal(err)
	}
	return g
}

func TestNCZarrDimensionsResolveOutward(t *testing.T) {
	g := ncDataset(t, false)
	for _, c := range []struct {
		path  string
		shape []int64
		names []string
		refs  string
		short string // the names the array reports
	}{
		// The innermost declaration wins: sub's level hides the root's.
		{"sub/v", []int64{3, 2}, []string{"x", "level"}, "[/x /sub/level]", "[x level]"},
		// A full reference reaches the hidden one.
		{"sub/w", []int64{3, 5}, []string{"x", "/level"}, "[/x /level]", "[x level]"},
		{"sub/u", []int64{2}, []string{"/sub/level"}, "[/sub/level]", "[level]"},
		{"r", []int64{5}, []string{"level"}, "[/level]", "[level]"},
	} {
		if _, err := g.CreateArray(ctx, c.path, ArraySpec{Format: FormatNCZarr, Shape: c.shape, DataType: "int32", DimensionNames: c.names}); err != nil {
			t.Fatalf("%s: %v", c.path, err)
		}
		n, err := New(g.store.Unwrap(), nil, Config{}).GetNode(ctx, c.path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(n.Array.NCZarr.DimensionRefs); got != c.refs {
			t.Errorf("%s: dimension references %s, want %s", c.path, got, c.refs)
		}
		if got := fmt.Sprint(n.Array.DimensionNames); got != c.short {
			t.Errorf("%s: dimension names %s, want %s", c.path, got, c.short)
		}
	}
	sub, err := g.GetNode(ctx, "sub")
	if err != nil || fmt.Sprint(sub.Group.NCZarr.Arrays) != "[v w u]" {
		t.Fatalf("sub lists %v (%v)", sub.Group.NCZarr, err)
	}
}

func TestNCZarrDimensionErrors(t *testing.T) {
	g := ncDataset(t, false)
	for _, c := range []struct {
		path  string
		shape []int64
		names []string
		want  string
	}{
		{"sub/deep/v", []int64{4}, []string{"time"}, `dimension "time" is declared in none of the enclosing groups (searched /sub/deep, /sub, /)`},
		{"v", []int64{2}, []string{"sub_only"}, `dimension "sub_only" is declared in none of the enclosing groups (searched /)`},
		// A subgroup's dimension is not visible from the root.
		{"v", []int64{3, 2}, []string{"x", "/sub/level"}, `"/sub/level" is not a dimension declared by one of the enclosing groups (/)`},
		{"sub/v", []int64{3, 3}, []string{"x", "level"}, "dimension /sub/level has length 2, the array's shape[1] is 3"},
	} {
		_, err := g.CreateArray(ctx, c.path, ArraySpec{Format: FormatNCZarr, Shape: c.shape, DataType: "int32", DimensionNames: c.names})
		if !errors.Is(err, errs.InvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %v: %v, want InvalidArgument with %q", c.path, c.names, err, c.want)
		}
		if _, err := g.GetNode(ctx, c.path); !errors.Is(err, errs.NotFound) {
			t.Errorf("%s: a refused array was written (%v)", c.path, err)
		}
	}
	if _, err := g.CreateGroup(ctx, "g", GroupSpec{Format: FormatNCZarr, Dimensions: []zarr.Dimension{{Name: "a", Size: 1}, {Name: "a", Size: 2}}}); !errors.Is(err, errs.InvalidArgument) {
		t.Errorf("a dimension declared twice: %v", err)
	}
	if _, err := g.CreateGroup(ctx, "g", GroupSpec{Format: FormatV2, NCZarrLegacy: true}); !errors.Is(err, errs.InvalidArgument) {
		t.Errorf("the legacy form of a plain v2 group: %v", err)
	}
	if _, err := newTestGateway(t).CreateGroup(ctx, "", GroupSpec{Format: FormatNCZarr, NCZarrLegacy: true,
		Dimensions: []zarr.Dimension{{Name: "t", Unlimited: true}}}); !errors.Is(err, errs.InvalidArgument) || !strings.Contains(err.Error(), "unlimited") {
		t.Errorf("an unlimited dimension in the legacy form: %v", err)
	}
	// One dataset, one form: a 4.9.0-form subgroup under a current root
	// would be unreadable to both netCDF versions.
	if _, err := g.CreateGroup(ctx, "g", GroupSpec{Format: FormatNCZarr, NCZarrLegacy: true}); !errors.Is(err, errs.InvalidArgument) {
		t.Errorf("a legacy subgroup under a current root: %v", err)
	}
}

// The legacy form puts NCZarr's keys, upper-case, where netCDF 4.9.0 reads
// them, and every node created below the root follows it, including the
// root's lists updated as children are added.
func TestNCZarrLegacyForm(t *testing.T) {
	g := ncDataset(t, true)
	if _, err := g.CreateArray(ctx, "sub/v", ArraySpec{Format: FormatNCZarr, Shape: []int64{3, 2}, DataType: "int32",
		DimensionNames: []string{"x", "level"}, Attributes: []byte(`{"f":0.5}`)}); err != nil {
		t.Fatal(err)
	}
	read := func(key string) string {
		b, _, err := storesvc.ReadAll(ctx, g.store, key)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(strings.Fields(string(b)), "")
	}
	for key, want := range map[string][]string{
		".zgroup":       {`"_NCZARR_SUPERBLOCK":{"version":"2.0.0"}`, `"_NCZARR_GROUP":{"dims":{"x":3,"level":5},"vars":[],"groups":["sub"]}`},
		"sub/.zgroup":   {`"_NCZARR_GROUP":{"dims":{"level":2},"vars":["v"],"groups":[]}`},
		"sub/v/.zarray": {`"_NCZARR_ARRAY":{"dimrefs":["/x","/sub/level"],"storage":"chunked"}`},
		"sub/v/.zattrs": {`"_NCZARR_ATTR":{"types":{"f":"<f8"}}`},
		"sub/.zattrs":   {`"_NCZARR_ATTR":{"types":{}}`},
		".zattrs":       {`"_NCZARR_ATTR"`},
	} {
		got := read(key)
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("%s = %s, lacks %s", key, got, w)
			}
		}
		if strings.Contains(got, "_nczarr") {
			t.Errorf("%s = %s: lower-case keys in the legacy form", key, got)
		}
	}
	n, err := g.GetNode(ctx, "sub/v")
	if err != nil || !n.Array.NCZarr.Legacy || n.Format != FormatNCZarr {
		t.Fatalf("sub/v read back: %+v, %v", n, err)
	}
}
