// Reads and writes of string (and bytes) arrays: variable-length elements.

package client

import (
	"context"

	"github.com/zarrgate/zarrgate/errs"
)

// ReadStrings reads a slab of a string (or bytes) array.
func ReadStrings(ctx context.Context, a *Array, sel Selection) ([]string, []int64, error) {
	hdr, blocks, err := a.blocks(ctx, sel, recvReuse)
	if err != nil {
		return nil, nil, err
	}
	if hdr.ElementSize != 0 {
		return nil, nil, errs.New(errs.InvalidArgument, "array %q holds %s, not strings", a.Path, hdr.DataType)
	}
	out := make([]string, product(hdr.Shape))
	strides := make([]int64, len(hdr.Shape))
	acc := int64(1)
	for d := len(hdr.Shape) - 1; d >= 0; d-- {
		strides[d] = acc
		acc *= hdr.Shape[d]
	}
	for b, err := range blocks {
		if err != nil {
			return nil, nil, err
		}
		n := product(b.Shape)
		if int64(len(b.Offsets)) != n+1 {
			return nil, nil, errs.New(errs.DataLoss, "read %q: block at %v has %d offsets for %d elements", a.Path, b.Origin, len(b.Offsets), n)
		}
		idx := make([]int64, len(b.Shape))
		for k := range n {
			off := int64(0)
			for d := range idx {
				off += (b.Origin[d] + idx[d]) * strides[d]
			}
			out[off] = string(b.Data[b.Offsets[k]:b.Offsets[k+1]])
			for d := len(idx) - 1; d >= 0; d-- {
				idx[d]++
				if idx[d] < b.Shape[d] {
					break
				}
				idx[d] = 0
			}
		}
	}
	return out, hdr.Shape, nil
}

// WriteStrings writes src, in C order, to the slab sel of a string array.
func WriteStrings(ctx context.Context, a *Array, sel Selection, src []string) (WriteStats, error) {
	shape := sel.Shape(a.Shape)
	if n := product(shape); int64(len(src)) != n {
		return WriteStats{}, errs.New(errs.InvalidArgument, "write %q: src has %d elements, the slab %v has %d", a.Path, len(src), shape, n)
	}
	b := Block{Origin: make([]int64, len(shape)), Shape: shape, Offsets: make([]int64, 1, len(src)+1)}
	for _, s := range src {
		b.Data = append(b.Data, s...)
		b.Offsets = append(b.Offsets, int64(len(b.Data)))
	}
	return a.WriteBlocks(ctx, sel, func(yield func(Block, error) bool) { yield(b, nil) })
}
