package gateway

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/zarr"
)

// enclosingGroups lists the groups around path, innermost first, ending
// with the root ("").
func enclosingGroups(path string) []string {
	var out []string
	for p := path; p != ""; {
		if i := strings.LastIndexByte(p, '/'); i >= 0 {
			p = p[:i]
		} else {
			p = ""
		}
		out = append(out, p)
	}
	return out
}

// loadGroup reads the group at path straight from the store (not the
// cache: a dimension another gateway declared a moment ago must count),
// nil when nothing or an array is there.
func (g *Gateway) loadGroup(ctx context.Context, path string) (*zarr.Group, error) {
	n, err := g.loadNode(ctx, path)
	if errors.Is(err, errs.NotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return n.group, nil
}

// nearestGroup returns the nearest group there is above path (nil if
// none): the one whose NCZarr form a new node, and the missing groups
// between, take.
func (g *Gateway) nearestGroup(ctx context.Context, path string) (*zarr.Group, error) {
	for _, p := range enclosingGroups(path) {
		grp, err := g.loadGroup(ctx, p)
		if err != nil || grp != nil {
			return grp, err
		}
	}
	return nil, nil
}

// newNCZarrGroup returns the netCDF information of a new NCZarr group at
// path. Its form is its parent's when the parent is an NCZarr group: a
// dataset is read by one netCDF version, which understands one form only
// (4.9.0 the upper-case keys, 4.10 the lower-case ones). Otherwise the
// spec chooses (GroupSpec.NCZarrLegacy).
func (g *Gateway) newNCZarrGroup(ctx context.Context, path string, spec GroupSpec) (*zarr.NCZarrGroup, error) {
	seen := map[string]bool{}
	for i, d := range spec.Dimensions {
		switch {
		case d.Name == "" || strings.ContainsAny(d.Name, "/"):
			return nil, errs.New(errs.InvalidArgument, "create group %q: dimensions[%d]: name %q must be non-empty and without '/'", path, i, d.Name)
		case seen[d.Name]:
			return nil, errs.New(errs.InvalidArgument, "create group %q: dimensions[%d]: %q is declared twice", path, i, d.Name)
		case d.Size < 0:
			return nil, errs.New(errs.InvalidArgument, "create group %q: dimensions[%d]: size %d is negative", path, i, d.Size)
		}
		seen[d.Name] = true
	}
	nc := &zarr.NCZarrGroup{Superblock: path == "", Version: "2.0.0", Legacy: spec.NCZarrLegacy}
	// The nearest group there, not only the parent: missing groups between
	// are made in its form (ensureParents), so this one must take it too.
	parent, err := g.nearestGroup(ctx, path)
	if err != nil {
		return nil, err
	}
	if parent != nil && parent.NCZarr != nil {
		if spec.NCZarrLegacy && !parent.NCZarr.Legacy {
			return nil, errs.New(errs.InvalidArgument, "create group %q: the NCZarr dataset around it uses the current (lower-case) form; one dataset cannot mix it with netCDF 4.9.0's", path)
		}
		nc.Legacy = parent.NCZarr.Legacy
	}
	if nc.Legacy {
		for _, d := range spec.Dimensions {
			if d.Unlimited {
				// ncgen 4.9.0 itself fails on one ("Invalid dimension size").
				return nil, errs.New(errs.InvalidArgument, "create group %q: dimension %q: netCDF 4.9.0's NCZarr form has no unlimited dimensions", path, d.Name)
			}
		}
	}
	return nc, nil
}

// resolveNCZarrDims turns the array's dimension names into references to
// the shared dimensions they name, as netCDF resolves a name: in the
// array's group, then each enclosing group out to the root; the first
// group declaring it wins ("level" in group sub is "/sub/level"). A name
// may also be a full reference ("/x", "/sub/level") to a dimension of an
// enclosing group, to reach one an inner group hides. A name declared
// nowhere is refused: netCDF 4.9.0 would invent a root dimension for the
// dangling reference and 4.10 crashes on it. The array takes the form
// (upper- or lower-case keys) of its group.
func (g *Gateway) resolveNCZarrDims(ctx context.Context, path string, a *zarr.Array) error {
	groups := enclosingGroups(path)
	loaded := make([]*zarr.Group, len(groups))
	for i, p := range groups {
		grp, err := g.loadGroup(ctx, p)
		if err != nil {
			return err
		}
		loaded[i] = grp
	}
	// The nearest group there gives the form; missing ones between are
	// made in its form (ensureParents).
	for _, grp := range loaded {
		if grp != nil {
			if grp.NCZarr != nil {
				a.NCZarr.Legacy = grp.NCZarr.Legacy
			}
			break
		}
	}
	find := func(grp *zarr.Group, name string) (zarr.Dimension, bool) {
		if grp == nil {
			return zarr.Dimension{}, false
		}
		for _, d := range grp.Dimensions {
			if d.Name == name {
				return d, true
			}
		}
		return zarr.Dimension{}, false
	}
	refs := make([]string, len(a.DimensionNames))
	names := make([]string, len(a.DimensionNames))
	for i, name := range a.DimensionNames {
		field := fmt.Sprintf("create array %q: dimension_names[%d]", path, i)
		var dim zarr.Dimension
		found := false
		if full, ok := strings.CutPrefix(name, "/"); ok {
			grpPath, short := "", full
			if j := strings.LastIndexByte(full, '/'); j >= 0 {
				grpPath, short = full[:j], full[j+1:]
			}
			for k, p := range groups {
				if p == grpPath {
					dim, found = find(loaded[k], short)
				}
			}
			if !found {
				return errs.New(errs.InvalidArgument, "%s: %q is not a dimension declared by one of the enclosing groups (%s)", field, name, groupList(groups))
			}
			refs[i], names[i] = name, short
		} else {
			for k, p := range groups {
				if dim, found = find(loaded[k], name); found {
					refs[i], names[i] = "/"+nodePrefix(p)+name, name
					break
				}
			}
			if !found {
				return errs.New(errs.InvalidArgument, "%s: dimension %q is declared in none of the enclosing groups (searched %s); declare it with the group that should hold it", field, name, groupList(groups))
			}
		}
		// A fixed dimension has one length for every variable using it. An
		// unlimited one grows with its variables, so any length fits.
		if !dim.Unlimited && dim.Size != a.Shape[i] {
			return errs.New(errs.InvalidArgument, "%s: dimension %s has length %d, the array's shape[%d] is %d", field, refs[i], dim.Size, i, a.Shape[i])
		}
	}
	a.DimensionNames = names
	a.NCZarr.DimensionRefs = refs
	return nil
}

// groupList names groups as netCDF does ("/sub, /").
func groupList(groups []string) string {
	s := make([]string, len(groups))
	for i, p := range groups {
		s[i] = "/" + p
	}
	return strings.Join(s, ", ")
}
