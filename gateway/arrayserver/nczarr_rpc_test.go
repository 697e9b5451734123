package arrayserver

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/gateway"
	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"
	"github.com/zarrgate/zarrgate/storesvc"
)

// CreateGroup's nczarr_legacy reaches the store: a group asked for over
// RPC on an empty store, its missing parents (the root's superblock
// included) and what is made inside it later without asking (an array,
// and an array whose own parent is missing) all carry the upper-case keys
// netCDF-C 4.9.0 reads, and none the lower-case ones.
func TestCreateGroupRPCNCZarrLegacy(t *testing.T) {
	g := newTestGateway(t)
	c := serveGateway(t, g)
	if _, err := c.CreateGroup(ctx, &gatewayv1.CreateGroupRequest{Path: "model/run1", Format: gatewayv1.Format_FORMAT_NCZARR, NczarrLegacy: true,
		Dimensions: []*gatewayv1.Dimension{{Name: "level", Size: 2}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.CreateArray(ctx, "model/run1/v", gateway.ArraySpec{Format: gateway.FormatNCZarr, Shape: []int64{2}, DataType: "int32", DimensionNames: []string{"level"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.CreateArray(ctx, "model/run1/deep/w", gateway.ArraySpec{Format: gateway.FormatNCZarr, Shape: []int64{2}, DataType: "int32", DimensionNames: []string{"level"}}); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{
		".zgroup":                   `"_NCZARR_SUPERBLOCK"`,
		"model/.zgroup":             `"_NCZARR_GROUP":{"dims":{},"vars":[],"groups":["run1"]}`,
		"model/run1/.zgroup":        `"_NCZARR_GROUP":{"dims":{"level":2},"vars":["v"],"groups":["deep"]}`,
		"model/run1/v/.zarray":      `"_NCZARR_ARRAY":{"dimrefs":["/model/run1/level"]`,
		"model/run1/deep/.zgroup":   `"_NCZARR_GROUP":{"dims":{},"vars":["w"],"groups":[]}`,
		"model/run1/deep/w/.zarray": `"_NCZARR_ARRAY":{"dimrefs":["/model/run1/level"]`,
	} {
		b, _, err := storesvc.ReadAll(ctx, g.Store(), key)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		got := strings.Join(strings.Fields(string(b)), "")
		if !strings.Contains(got, want) || strings.Contains(got, "_nczarr") {
			t.Errorf("%s = %s, want %s and no lower-case keys", key, got, want)
		}
	}
}

// The legacy form is refused with another format, and inside a dataset
// of the lower-case form, also when the groups between are missing (they
// would otherwise be made in one form and the group in the other).
func TestCreateGroupRPCNCZarrLegacyRefused(t *testing.T) {
	g := newTestGateway(t)
	c := serveGateway(t, g)
	_, err := c.CreateGroup(ctx, &gatewayv1.CreateGroupRequest{Path: "a", Format: gatewayv1.Format_FORMAT_ZARR_V2, NczarrLegacy: true})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("legacy with v2: %v", err)
	}
	if _, err := c.CreateGroup(ctx, &gatewayv1.CreateGroupRequest{Path: "", Format: gatewayv1.Format_FORMAT_NCZARR}); err != nil {
		t.Fatal(err)
	}
	_, err = c.CreateGroup(ctx, &gatewayv1.CreateGroupRequest{Path: "a/b", Format: gatewayv1.Format_FORMAT_NCZARR, NczarrLegacy: true})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "lower-case") {
		t.Fatalf("legacy below a lower-case root: %v", err)
	}
	if _, _, err := storesvc.ReadAll(ctx, g.Store(), "a/.zgroup"); !errors.Is(err, errs.NotFound) {
		t.Errorf("a refused group left a parent behind: %v", err)
	}
}
