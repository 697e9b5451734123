package gateway

import (
	"bytes"
	"context"
	"errors"
	"strings"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/zarr"
)

type parentCheckKey struct{}

// WithParentCheck returns ctx carrying check, which CreateGroup and
// CreateArray called with that context ask about every missing parent
// group they would create (by path, "" for the root), after finding which
// are missing and before writing anything: an error from check fails the
// call, with nothing written. The authorization layer uses it, as writing
// a parent's metadata is writing outside the node the call names.
func WithParentCheck(ctx context.Context, check func(path string) error) context.Context {
	return context.WithValue(ctx, parentCheckKey{}, check)
}

// ensureParents creates the groups missing above path, the root included,
// in the format of the node being created, as zarr-python does when it
// creates a node (zarr/core/metadata/io.py, _build_parents and
// save_metadata): a node whose ancestors have no metadata is invisible to
// hierarchy walks (ours, zarr-python's, netCDF's). As there, an array at
// any ancestor is refused before anything is written (FailedPrecondition
// naming it), and every write is if-absent, so creators racing over the
// same missing parents (siblings made at once) all succeed, the parent is
// written once and an existing node is never written over. Beyond
// zarr-python, an ancestor holding a node of another format is left as
// it is rather than given a second metadata document. Missing NCZarr
// groups take the form (legacy: netCDF 4.9.0's upper-case keys) of the
// nearest NCZarr group above them, or legacy when there is none: one
// dataset has one form, the one its reader understands. A parent check in
// ctx (WithParentCheck) is asked about every missing group before the
// first is created.
func (g *Gateway) ensureParents(ctx context.Context, path string, format Format, legacy bool) error {
	if path == "" {
		return nil
	}
	parts := strings.Split(path, "/")
	var missing []string
	var forms []bool       // legacy, per missing group
	for i := range parts { // "", then parts[0], ... up to path's parent
		p := strings.Join(parts[:i], "/")
		// Straight from the store, not the cache: a group another gateway
		// deleted a moment ago must be made again.
		n, err := g.loadNode(ctx, p)
		switch {
		case err == nil:
			if err := inTheWay(n, path); err != nil {
				return err
			}
			if n.group != nil && n.group.NCZarr != nil {
				legacy = n.group.NCZarr.Legacy
			}
		case errors.Is(err, errs.NotFound):
			missing = append(missing, p)
			forms = append(forms, legacy)
		default:
			return err
		}
	}
	// Every parent is allowed, or none is created: the check comes before
	// the first write.
	if check, ok := ctx.Value(parentCheckKey{}).(func(string) error); ok {
		for _, p := range missing {
			if err := check(p); err != nil {
				return err
			}
		}
	}
	for i, p := range missing { // from the root down: each one's parent is there
		if err := g.createParent(ctx, p, path, format, forms[i]); err != nil {
			return err
		}
	}
	return nil
}

// createParent creates an empty group in format at p, an ancestor of
// child that had no node, unless another creator just made one; an
// NCZarr one in the legacy form if asked.
func (g *Gateway) createParent(ctx context.Context, p, child string, format Format, legacy bool) error {
	grp := &zarr.Group{ZarrFormat: 3}
	switch format {
	case 0, FormatV3:
	case FormatV2:
		grp.ZarrFormat = 2
	case FormatNCZarr:
		// As CreateGroup writes one: the root carries the superblock.
		grp.ZarrFormat = 2
		grp.NCZarr = &zarr.NCZarrGroup{Superblock: p == "", Version: "2.0.0", Legacy: legacy}
	default:
		return errs.New(errs.InvalidArgument, "create %q: unknown format %d", child, format)
	}
	docs, err := encodeDocs(&node{path: p, group: grp})
	if err != nil {
		return err
	}
	// The documents beside the defining one (.zattrs) go first, and only
	// if absent: a v2 group is visible from its .zgroup on, and an NCZarr
	// group is one only with its .zattrs, so a racer that finds the
	// .zgroup must find the .zattrs too, and must not have the sibling it
	// registered there overwritten by a late empty list.
	for _, d := range docs[1:] {
		if len(d.data) == 0 {
			continue
		}
		if err := g.setIfAbsent(ctx, d); err != nil {
			return err
		}
	}
	err = g.createDoc(ctx, p, docs[0])
	g.cache.dropNode(p)
	switch {
	case errors.Is(err, errs.AlreadyExists):
		// Another creator got there first: fine if it made a group.
		n, err := g.loadNode(ctx, p)
		if err != nil {
			return err
		}
		if err := inTheWay(n, child); err != nil {
			return err
		}
	case err != nil:
		return err
	}
	// Whoever finds the group missing registers it with its parent (the
	// parent is there: ensureParents goes from the root down); repeating
	// it is harmless, so a racer that lost the creation still makes sure.
	if format == FormatNCZarr && p != "" {
		return g.registerNCZarrChild(ctx, p, false)
	}
	return nil
}

// inTheWay fails if n, found where child needs a parent group, is an array.
func inTheWay(n *node, child string) error {
	if n.array != nil {
		where := "/" + n.path
		if n.path == "" {
			where = "the root (/)"
		}
		return errs.New(errs.FailedPrecondition, "cannot create %q: %s is an array, and only a group can hold nodes", child, where)
	}
	return nil
}

// setIfAbsent writes d unless its key holds a value already, which is left
// as it is.
func (g *Gateway) setIfAbsent(ctx context.Context, d doc) error {
	// A repeat after a lost answer finds our own value: also fine.
	_, err := retry(ctx, g.cfg.StoreRetries, func() (string, error) {
		return g.store.Set(ctx, d.key, bytes.NewReader(d.data), storesvc.Condition{IfAbsent: true})
	})
	if errors.Is(err, errs.FailedPrecondition) {
		return nil
	}
	return err
}
