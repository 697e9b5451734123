// zarrgate info: a node's metadata and the bytes it stores.

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/zarrgate/zarrgate/client"
	"github.com/zarrgate/zarrgate/storesvc"
)

func runInfo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("info", stderr)
	addr := addrFlag(fs)
	asJSON := fs.Bool("json", false, "print as JSON")
	path, err := parseWithPath(fs, args, true)
	if err != nil {
		return err
	}
	ctx, c, err := dial(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	n, err := c.GetNode(ctx, path)
	if err != nil {
		return err
	}
	store, err := c.Store(ctx)
	if err != nil {
		return err
	}
	stored, count, err := storedBytes(ctx, store, path)
	if err != nil {
		return err
	}
	if *asJSON {
		out := map[string]any{"path": n.Path, "format": n.Format.String(), "array": n.IsArray, "attributes": n.Attributes,
			"stored_bytes": stored, "stored_keys": count}
		if n.IsArray {
			out["shape"], out["data_type"], out["chunk_shape"], out["shard_shape"] = n.Shape, n.DataType, n.ChunkShape, n.ShardShape
			out["codecs"], out["dimension_names"], out["fill_value"] = n.Codecs, n.DimensionNames, n.FillValue
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	kind := "group"
	if n.IsArray {
		kind = "array"
	}
	fmt.Fprintf(w, "path:        /%s\nkind:        %s\nformat:      %s\n", n.Path, kind, formatName(n.Format))
	if n.IsArray {
		fmt.Fprintf(w, "shape:       %v\ndata type:   %s\nchunks:      %v\n", n.Shape, n.DataType, n.ChunkShape)
		if n.ShardShape != nil {
			fmt.Fprintf(w, "shards:      %v\n", n.ShardShape)
		}
		if len(n.DimensionNames) > 0 {
			fmt.Fprintf(w, "dimensions:  %s\n", strings.Join(n.DimensionNames, ", "))
		}
		fmt.Fprintf(w, "fill value:  %s\ncodecs:      %s\n", n.FillValue, n.Codecs)
	}
	for _, d := range n.Dimensions {
		fmt.Fprintf(w, "dimension:   %s = %d%s\n", d.Name, d.Size, map[bool]string{true: " (unlimited)"}[d.Unlimited])
	}
	var compact bytes.Buffer
	if json.Compact(&compact, n.Attributes) == nil && compact.Len() > 2 {
		fmt.Fprintf(w, "attributes:  %s\n", compact.String())
	}
	fmt.Fprintf(w, "stored:      %s in %s\n", humanBytes(stored), countOf(count, "key"))
	return nil
}

// formatName is a storage format as users call it.
func formatName(f client.Format) string {
	switch f {
	case client.FormatV3:
		return "Zarr v3"
	case client.FormatV2:
		return "Zarr v2"
	case client.FormatNCZarr:
		return "NCZarr"
	}
	return strings.ToLower(strings.TrimPrefix(f.String(), "FORMAT_"))
}

// storedBytes sums the sizes of the keys under a node's prefix.
func storedBytes(ctx context.Context, s *storesvc.Portable, path string) (int64, int64, error) {
	prefix := ""
	if path != "" {
		prefix = path + "/"
	}
	var keys []string
	for k, err := range s.ListPrefix(ctx, prefix) {
		if err != nil {
			return 0, 0, err
		}
		keys = append(keys, k)
	}
	sizes, err := sizesOf(ctx, s, keys)
	if err != nil {
		return 0, 0, err
	}
	var total int64
	for _, sz := range sizes {
		total += max(sz, 0)
	}
	return total, int64(len(keys)), nil
}

// sizesOf returns the size of each key (-1 if missing), 16 at a time.
func sizesOf(ctx context.Context, s storesvc.Store, keys []string) ([]int64, error) {
	out := make([]int64, len(keys))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	sem := make(chan struct{}, 16)
	for i, k := range keys {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			obj, err := s.Get(ctx, k, storesvc.Bounded(0, 0))
			if errors.Is(err, storesvc.ErrNotFound) {
				out[i] = -1
				return
			}
			if err != nil {
				mu.Lock()
				first = cmpErr(first, err)
				mu.Unlock()
				return
			}
			obj.Close()
			out[i] = obj.Size
		}()
	}
	wg.Wait()
	return out, first
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
