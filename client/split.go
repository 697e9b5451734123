// Split reads: a large typed read through the socket as parallel ReadSlab
// calls on several connections (WithConnections).

package client

import (
	"context"
	"slices"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/zarrgate/zarrgate/errs"
)

// splitMinElements is the smallest slab a client with several connections
// splits (4 Mi elements: 16 MiB of float32).
var splitMinElements int64 = 1 << 22 // a variable for tests

// splitCuts returns the slab rows (along the first dimension) at which a
// read of sel is cut into bands, one per connection, or nil when it is not
// split: one connection, shared memory on, a small slab, or a selection of
// another rank (the gateway's to refuse). Cuts fall on chunk (shard)
// boundaries of the array where the selection allows.
func (a *Array) splitCuts(sel Selection) []int64 {
	n := len(a.c.bands)
	if n < 2 || a.c.shared.Load() || len(a.Shape) == 0 || (sel != nil && len(sel) != len(a.Shape)) {
		return nil
	}
	shape := sel.Shape(a.Shape)
	if product(shape) < splitMinElements || shape[0] < 2 {
		return nil
	}
	start, step := int64(0), int64(1)
	if sel != nil {
		start, step = sel[0].Start, max(sel[0].Step, 1)
	}
	chunk := int64(1)
	if len(a.ShardShape) > 0 && a.ShardShape[0] > 0 {
		chunk = a.ShardShape[0]
	} else if len(a.ChunkShape) > 0 && a.ChunkShape[0] > 0 {
		chunk = a.ChunkShape[0]
	}
	rows := shape[0]
	cuts := []int64{0}
	for i := int64(1); i < int64(n); i++ {
		r := rows * i / int64(n)
		// The array index of slab row r, rounded to the nearest chunk
		// boundary, and back to the first slab row at or after it.
		idx := start + r*step
		b := (idx + chunk/2) / chunk * chunk
		r = max(0, (b-start+step-1)/step)
		if r > cuts[len(cuts)-1] && r < rows {
			cuts = append(cuts, r)
		}
	}
	if len(cuts) < 2 {
		return nil
	}
	return append(cuts, rows)
}

// band is sel (nil: all of shape) restricted to slab rows r0..r1-1 along
// the first dimension.
func band(sel Selection, shape []int64, r0, r1 int64) Selection {
	if sel == nil {
		sel = make(Selection, len(shape))
		for d, s := range shape {
			sel[d] = Slice{Start: 0, Stop: s, Step: 1}
		}
	} else {
		sel = slices.Clone(sel)
	}
	s := sel[0]
	step := max(s.Step, 1)
	stop := s.Start + r1*step
	if stop > s.Stop {
		stop = s.Stop
	}
	sel[0] = Slice{Start: s.Start + r0*step, Stop: stop, Step: s.Step}
	return sel
}

// readSplit is readDense as one call per band of cuts, each on its own
// connection and into its rows of the one buffer alloc returns (for the
// first header to arrive). Each band's blocks are checked against its own
// header, and its header against the slab's and the array's data type
// (as this Array knows it); the first error of any band
// cancels the others and is the read's.
func readSplit(ctx context.Context, a *Array, sel Selection, cuts []int64, alloc func(*SlabHeader) ([]byte, error)) (*SlabHeader, []byte, error) {
	shape := sel.Shape(a.Shape)
	row := product(shape[1:])
	var (
		mu       sync.Mutex
		hdr      *SlabHeader
		out      []byte
		allocErr error
	)
	g, gctx := errgroup.WithContext(ctx)
	for i := range len(cuts) - 1 {
		r0, r1 := cuts[i], cuts[i+1]
		bsel := band(sel, a.Shape, r0, r1)
		want := append([]int64{r1 - r0}, shape[1:]...)
		arrays := a.c.bands[i%len(a.c.bands)]
		g.Go(func() error {
			_, _, err := readDenseVia(gctx, a, arrays, bsel, func(h *SlabHeader) ([]byte, error) {
				mu.Lock()
				defer mu.Unlock()
				if hdr == nil {
					hdr = &SlabHeader{Shape: shape, DataType: h.DataType, ElementSize: h.ElementSize}
					out, allocErr = alloc(hdr)
				}
				if allocErr != nil {
					return nil, allocErr
				}
				// Every band as the first: of the array's type, the same
				// element size, the band's shape.
				if h.DataType != a.DataType || h.DataType != hdr.DataType || h.ElementSize != hdr.ElementSize || !slices.Equal(h.Shape, want) {
					return nil, errs.New(errs.DataLoss, "read %q: rows %d..%d: the server sends a slab of shape %v of %s (%d-byte elements), not %v of %s (%d)",
						a.Path, r0, r1, h.Shape, h.DataType, h.ElementSize, want, hdr.DataType, hdr.ElementSize)
				}
				es := int64(h.ElementSize)
				return out[r0*row*es : r1*row*es], nil
			}, nil)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, nil, err
	}
	return hdr, out, nil
}
