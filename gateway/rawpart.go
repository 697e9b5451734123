package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/bufpool"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/zarr"
)

// Chunks stored raw (layout.raw: their stored bytes are their elements)
// that a read selects only a small part of are read in part: one ranged
// read of the bytes between the selection's first and last rows, instead
// of the whole chunk. A random 64×64 read of a 256×256 chunk of float32
// reads 64 KiB, not 256 KiB (issue 20: most of such a read's time on the
// gateway was the pread of the whole chunk).

// rawSpan is the part of a raw unit that holds the elements dims select:
// off and n, in elements, and the view of the selection within those n
// elements. The leading dimensions where the selection takes one index
// fix the offset; the next dimension's selected rows (first to last, with
// whatever lies between) and the dimensions inside them whole make the
// span. ok is false when the span is more than half of the unit: the
// whole chunk is read then, with the batch's other chunks.
func rawSpan(l *layout, dims []zarr.DimProjection) (off, n int64, sv view, ok bool) {
	nd := len(dims)
	if nd == 0 {
		return 0, 0, view{}, false
	}
	stride := make([]int64, nd)
	s := int64(1)
	for d := nd - 1; d >= 0; d-- {
		stride[d] = s
		s *= l.unit[d]
	}
	k := 0
	for k < nd-1 && dims[k].Count == 1 {
		k++
	}
	sv = view{shape: make([]int64, nd), start: make([]int64, nd), step: make([]int64, nd)}
	for d, dp := range dims {
		if dp.Count <= 0 || dp.Step <= 0 {
			return 0, 0, view{}, false
		}
		switch {
		case d < k:
			off += dp.Start * stride[d]
			sv.shape[d], sv.step[d] = 1, 1
		case d == k:
			off += dp.Start * stride[d]
			rows := (dp.Count-1)*dp.Step + 1
			n = rows * stride[d]
			sv.shape[d], sv.step[d] = rows, dp.Step
		default:
			sv.shape[d], sv.start[d], sv.step[d] = l.unit[d], dp.Start, dp.Step
		}
	}
	return off, n, sv, 2*n <= l.unitElems()
}

// rawParts splits off the tasks of a batch that are read in part
// (rawSpan), for an array whose chunks are stored raw and read by this
// process.
func (g *Gateway) rawParts(l *layout, batch []readTask) (parts, rest []readTask) {
	if !l.raw || l.elem == 0 {
		return nil, batch
	}
	if fd := g.workerFetch(l); fd != nil {
		if _, ok := fd.(codec.FetchChooser); !ok {
			return nil, batch // every batch goes to the workers
		}
		// Choosing per batch: a raw chunk read in part is read here, as
		// embedded (its span, at most half the chunk, and no decode).
	}
	for _, t := range batch {
		if _, _, _, ok := rawSpan(l, t.dims); ok {
			parts = append(parts, t)
		} else {
			rest = append(rest, t)
		}
	}
	if len(parts) == 0 {
		return nil, batch
	}
	return parts, rest
}

// readRawParts reads each task's span with a ranged read (the memory for
// the span and the block reserved first) and emits the selected elements,
// or fill for a chunk never written.
func (g *Gateway) readRawParts(ctx context.Context, l *layout, mem *readMem, parts []readTask, out func(Block) error) error {
	e := int64(l.elem)
	for _, t := range parts {
		off, n, sv, _ := rawSpan(l, t.dims)
		b := Block{Origin: make([]int64, len(t.dims)), Shape: make([]int64, len(t.dims))}
		for d, dp := range t.dims {
			b.Origin[d], b.Shape[d] = dp.OutStart, dp.Count
		}
		blockBytes := product(b.Shape) * e
		refs, err := mem.reserve(ctx, n*e+blockBytes, func() string { return "part of a chunk" })
		if err != nil {
			return err
		}
		err = g.readRawPart(ctx, l, t, off*e, n*e, sv, b, hold(refs, out))
		refs.Release()
		if err != nil {
			return err
		}
	}
	return nil
}

// readRawPart reads n bytes at off of the chunk of t, and emits b, the
// elements sv selects in them.
func (g *Gateway) readRawPart(ctx context.Context, l *layout, t readTask, off, n int64, sv view, b Block, out func(Block) error) error {
	key := l.key(t.coords)
	// Sharing, a read from a store read in this process is the call's
	// work on the processors too: under the slot of the copy (fair.go).
	release, held, err := g.fetchSlot(ctx)
	if err != nil {
		return err
	}
	defer release()
	span := bufpool.Get(int(n))
	defer bufpool.Put(span)
	_, err = retry(ctx, g.cfg.StoreRetries, func() (struct{}, error) { return struct{}{}, g.readRange(ctx, l, key, off, span) })
	switch {
	case errors.Is(err, storesvc.ErrNotFound):
		return emitFill(l, t.dims, out)
	case err != nil:
		return fmt.Errorf("chunk %q: %w", key, err)
	}
	if !held {
		done, err := l.codec.slot(ctx)
		if err != nil {
			return err
		}
		defer done()
	}
	// copyBox writes every element of the dense box: the pooled buffer's
	// old contents never show.
	data := bufpool.Get(int(product(b.Shape)) * l.elem)
	copyBox(data, dense(b.Shape, make([]int64, len(b.Shape))), span, sv, b.Shape, l.elem)
	b.Data, b.release = data, func() { bufpool.Put(data) }
	return out(b)
}

// readRange reads len(buf) bytes at off of the raw chunk at key, checking
// that the chunk has a raw chunk's size.
func (g *Gateway) readRange(ctx context.Context, l *layout, key string, off int64, buf []byte) (err error) {
	ctx, span := startSpan(ctx, "gateway.fetch", 1)
	defer func() { endSpan(span, err) }()
	obj, err := g.store.Get(ctx, key, storesvc.Bounded(off, int64(len(buf))))
	if errs.CodeOf(err) == errs.CodeOutOfRange {
		// The range lies inside any chunk of the right size.
		return errs.New(errs.DataLoss, "bytes codec: chunk is shorter than %d bytes (%v)", l.unitBytes(), err)
	}
	if err != nil {
		return err
	}
	defer obj.Close()
	if obj.Size != l.unitBytes() {
		return errs.New(errs.DataLoss, "bytes codec: chunk has %d bytes, want %d", obj.Size, l.unitBytes())
	}
	if obj.Length != int64(len(buf)) {
		return errs.New(errs.DataLoss, "bytes codec: read %d bytes of a range of %d", obj.Length, len(buf))
	}
	if _, err := io.ReadFull(obj, buf); err != nil {
		return errs.Wrap(errs.DataLoss, err, "read %d bytes", len(buf))
	}
	return nil
}
