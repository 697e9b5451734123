// zarrgate mkarray: create an array.

package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/zarrgate/zarrgate/client"
)

func runMkarray(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("mkarray", stderr)
	addr := addrFlag(fs)
	shape := fs.String("shape", "", "shape, e.g. 1000,2000 (required)")
	dtype := fs.String("dtype", "float32", "data type (v3 name)")
	chunks := fs.String("chunks", "", "chunk shape (default: one chunk)")
	shards := fs.String("shards", "", "shard shape (v3 only; multiples of the chunk shape)")
	codecs := fs.String("codecs", "", `codec chain as v3 JSON (default bytes + zstd)`)
	fill := fs.String("fill", "", "fill value as v3 JSON (default 0)")
	dims := fs.String("dims", "", "dimension names, e.g. time,lat,lon")
	format := fs.String("format", "v3", "v3, v2 or nczarr")
	attrs := fs.String("attrs", "", "attributes as a JSON object")
	path, err := parseWithPath(fs, args, false)
	if err != nil {
		return err
	}
	spec := client.ArraySpec{DataType: *dtype, Codecs: *codecs, FillValue: *fill, Attributes: *attrs}
	if spec.Shape, err = parseInts(*shape); err != nil || *shape == "" {
		return usageError{fmt.Errorf("--shape %q: want comma-separated non-negative integers", *shape)}
	}
	if spec.ChunkShape, err = parseInts(*chunks); err != nil {
		return usageError{fmt.Errorf("--chunks %q: %v", *chunks, err)}
	}
	if spec.ShardShape, err = parseInts(*shards); err != nil {
		return usageError{fmt.Errorf("--shards %q: %v", *shards, err)}
	}
	if *dims != "" {
		spec.DimensionNames = strings.Split(*dims, ",")
	}
	switch *format {
	case "v3":
		spec.Format = client.FormatV3
	case "v2":
		spec.Format = client.FormatV2
	case "nczarr":
		spec.Format = client.FormatNCZarr
	default:
		return usageError{fmt.Errorf("--format %q: want v3, v2 or nczarr", *format)}
	}
	ctx, c, err := dial(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	a, err := c.CreateArray(ctx, path, spec)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "created /%s: %s %v in chunks %v\n", a.Path, a.DataType, a.Shape, a.ChunkShape)
	return nil
}

func parseInts(s string) ([]int64, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []int64
	for _, p := range strings.Split(s, ",") {
		v, err := strconv.ParseInt(strings.TrimSpace(p), 10, 64)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("%q is not a non-negative integer", p)
		}
		out = append(out, v)
	}
	return out, nil
}
