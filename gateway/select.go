package gateway

import (
	"context"
	"errors"
	"fmt"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/zarr"
)

// Selection-only decoding: a codec engine whose batches run elsewhere
// (codec.SelectDecoder: the remote engine) is sent, with each unit read in
// part, the unit's selection, and answers with only the selected elements
// packed in C order, so that a partial read moves that part back instead
// of the whole decoded unit. The gateway places the answer as the unit's
// block as it is; units read whole are decoded whole as before.

// selection is the chunk-local box dims selects of a unit, or the zero
// Selection when it covers the unit whole.
func selection(l *layout, dims []zarr.DimProjection) codec.Selection {
	if wholeUnit(l, dims) {
		return codec.Selection{}
	}
	s := codec.Selection{Start: make([]int64, len(dims)), Step: make([]int64, len(dims)), Count: make([]int64, len(dims))}
	for d, dp := range dims {
		s.Start[d], s.Step[d], s.Count[d] = dp.Start, dp.Step, dp.Count
	}
	return s
}

// selector is the engine's codec.SelectDecoder when units of l are to be
// decoded with their selections: fixed-size elements, an engine that
// offers it; nil otherwise.
func (l *layout) selector() codec.SelectDecoder {
	ec, ok := l.codec.(engineCodec)
	if !ok || l.elem == 0 {
		return nil
	}
	sd, _ := ec.c.(codec.SelectDecoder)
	return sd
}

// decodeUnits decodes a batch of units, the i-th to be read through
// dims[i]: with their selections when the engine takes them and some unit
// is read in part (selected says so), whole otherwise.
func decodeUnits(ctx context.Context, l *layout, encoded [][]byte, dims [][]zarr.DimProjection) (_ []chunk, selected bool, _ error) {
	sd := l.selector()
	var sel []codec.Selection
	if sd != nil {
		for i, d := range dims {
			if s := selection(l, d); !s.Whole() {
				if sel == nil {
					sel = make([]codec.Selection, len(dims))
				}
				sel[i] = s
			}
		}
	}
	if sel == nil {
		out, err := l.codec.decode(ctx, encoded)
		return out, false, err
	}
	ec := l.codec.(engineCodec)
	ctx, span := startSpan(ctx, "gateway.decode", len(encoded))
	// Codecs are pure: a batch lost with its worker is safe to run again.
	out, err := retry(ctx, ec.retries, func() ([]Chunk, error) { return sd.DecodeSelected(ctx, ec.spec, encoded, sel) })
	endSpan(span, err)
	if err != nil {
		return nil, false, err
	}
	return fromEngine(out), true, nil
}

// place returns the block of unit u read through dims: u as the engine
// answered it when it was decoded with its selection (its data must be
// exactly the selected elements: DataLoss otherwise), else gathered from
// the whole unit.
func place(l *layout, u chunk, dims []zarr.DimProjection, selected bool) (Block, error) {
	if !selected || wholeUnit(l, dims) {
		return gather(l, u, dims), nil
	}
	b := Block{Origin: make([]int64, len(dims)), Shape: make([]int64, len(dims))}
	for d, dp := range dims {
		b.Origin[d], b.Shape[d] = dp.OutStart, dp.Count
	}
	if want := product(b.Shape) * int64(l.elem); int64(len(u.data)) != want || u.offsets != nil {
		if u.release != nil {
			u.release()
		}
		return Block{}, errs.New(errs.DataLoss, "codec engine answered a selection of %v with %d bytes, want %d", b.Shape, len(u.data), want)
	}
	b.Data, b.release = u.data, u.release
	return b, nil
}

// workerFetch is the engine's codec.FetchDecoder when the chunks of l are
// to be read by the codec workers themselves (Config.WorkerFetch; arrays
// of fixed-size elements), nil otherwise.
func (g *Gateway) workerFetch(l *layout) codec.FetchDecoder {
	if !g.cfg.WorkerFetch || l.shard != nil {
		return nil
	}
	if l.selector() == nil {
		return nil
	}
	fd, _ := l.codec.(engineCodec).c.(codec.FetchDecoder)
	return fd
}

// readFetched reads a batch of unsharded chunks through codec workers
// that fetch them from the store tier: the keys go out (the caller's
// read of this array was authorized; the keys are the array's own), the
// selected elements come back, and missing chunks become fill.
func (g *Gateway) readFetched(ctx context.Context, l *layout, fd codec.FetchDecoder, batch []readTask, out func(Block) error) error {
	refs := make([]codec.Ref, len(batch))
	sel := make([]codec.Selection, len(batch))
	for i, t := range batch {
		refs[i] = codec.Ref{Key: l.key(t.coords)}
		sel[i] = selection(l, t.dims)
	}
	ec := l.codec.(engineCodec)
	ctx, span := startSpan(ctx, "gateway.decode", len(refs))
	type answer struct {
		chunks []Chunk
		found  []bool
	}
	// Codecs are pure and reads idempotent: a batch lost with its worker
	// is safe to run again.
	a, err := retry(ctx, ec.retries, func() (answer, error) {
		c, f, err := fd.DecodeFetched(ctx, ec.spec, refs, sel)
		return answer{c, f}, err
	})
	endSpan(span, err)
	if err != nil {
		var ie *codec.ItemError
		if errors.As(err, &ie) && ie.Index < len(refs) {
			return fmt.Errorf("chunk %q: %w", refs[ie.Index].Key, ie.Err)
		}
		return err
	}
	if len(a.chunks) != len(batch) || len(a.found) != len(batch) {
		return errs.New(errs.DataLoss, "codec engine answered %d chunks for %d", len(a.chunks), len(batch))
	}
	decoded := fromEngine(a.chunks)
	for i, t := range batch {
		if !a.found[i] {
			if err := emitFill(l, t.dims, out); err != nil {
				return err
			}
			continue
		}
		b, err := place(l, decoded[i], t.dims, true)
		if err != nil {
			return fmt.Errorf("chunk %q: %w", refs[i].Key, err)
		}
		if err := out(b); err != nil {
			return err
		}
	}
	return nil
}
