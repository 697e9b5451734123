package gateway

import (
	"context"
	"fmt"
	"sync"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/zarr"
)

// Metadata document keys, relative to a node's prefix.
const (
	keyV3     = "zarr.json"
	keyZarray = ".zarray"
	keyZgroup = ".zgroup"
	keyZattrs = ".zattrs"
)

// node is a loaded group or array.
type node struct {
	path  string
	array *zarr.Array
	group *zarr.Group

	// The array's chunk layout, built once per loaded node (cached nodes
	// are never modified): see Gateway.layout.
	layoutOnce sync.Once
	lay        *layout
	layErr     error

	// docBytes is the size of the metadata documents the node was read
	// from: what its cache entry is weighed by.
	docBytes int64
}

// prefix is the store prefix of the node's keys ("" for the root).
func (n *node) prefix() string { return nodePrefix(n.path) }

func nodePrefix(path string) string {
	if path == "" {
		return ""
	}
	return path + "/"
}

// checkPath validates a node path: "" (the root) or a valid store key.
func checkPath(path string) error {
	if path == "" {
		return nil
	}
	if err := storesvc.ValidateKey(path); err != nil {
		return errs.New(errs.InvalidArgument, "invalid node path %q: must be empty (the root) or a valid key without leading or trailing \"/\"", path)
	}
	return nil
}

// maxMetadataBytes bounds one metadata document (consolidated metadata of
// a large hierarchy included): larger ones are refused before they are
// read.
const maxMetadataBytes = 64 << 20

// loadNode reads a node's metadata with one GetPartialValues: zarr.json, or
// .zarray / .zgroup with .zattrs (v2 and NCZarr).
func (g *Gateway) loadNode(ctx context.Context, path string) (*node, error) {
	if err := checkPath(path); err != nil {
		return nil, err
	}
	p := nodePrefix(path)
	reqs := []storesvc.KeyRange{{Key: p + keyV3}, {Key: p + keyZarray}, {Key: p + keyZgroup}, {Key: p + keyZattrs}}
	vals, err := retry(ctx, g.cfg.StoreRetries, func() ([]storesvc.PartialValue, error) {
		return g.store.GetPartialValuesMax(ctx, reqs, maxMetadataBytes)
	})
	if err != nil {
		return nil, err
	}
	v3, zarray, zgroup, zattrs := vals[0], vals[1], vals[2], vals[3]
	n := &node{path: path}
	for _, v := range vals {
		n.docBytes += int64(len(v.Data))
	}
	switch {
	case v3.Found:
		parsed, err := zarr.ParseV3(v3.Data)
		if err != nil {
			return nil, fmt.Errorf("node %q (%s): %w", path, p+keyV3, err)
		}
		n.array, n.group = parsed.Array, parsed.Group
	case zarray.Found:
		a, err := zarr.ParseV2Array(zarray.Data, zattrs.Data)
		if err != nil {
			return nil, fmt.Errorf("node %q (%s): %w", path, p+keyZarray, err)
		}
		n.array = a
	case zgroup.Found:
		g, err := zarr.ParseV2Group(zgroup.Data, zattrs.Data)
		if err != nil {
			return nil, fmt.Errorf("node %q (%s): %w", path, p+keyZgroup, err)
		}
		n.group = g
	default:
		return nil, errs.New(errs.NotFound, "no Zarr node at %q (none of zarr.json, .zarray, .zgroup)", path)
	}
	return n, nil
}
