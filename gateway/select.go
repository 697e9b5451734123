package gateway

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/storesvc"
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
	if len(encoded) > 1 && l.codec.inProcess() && callOf(ctx).small() && runtime.GOMAXPROCS(0) > 1 {
		return decodeSpread(ctx, l, encoded, dims)
	}
	return decodeBatch(ctx, l, encoded, dims)
}

// decodeSpread is decodeUnits for a batch of several units of a call
// without workers (a small read: issue 20, random 64×64 reads touch up to
// four chunks; a small read of plain chunks reads each on a goroutine of
// its own already, readSmall, so this is a shard's inner chunks),
// decoded in this process: its units are decoded one by one on as many
// goroutines as there are processors (the caller's among them), so that
// the read waits for the slowest unit instead of the sum. The units
// decoded with their selections (each unit read in part, when the engine
// takes selections) are placed as they are, the others gathered (place),
// as for one batch.
func decodeSpread(ctx context.Context, l *layout, encoded [][]byte, dims [][]zarr.DimProjection) ([]chunk, bool, error) {
	n := len(encoded)
	out := make([]chunk, n)
	sel := make([]bool, n)
	fails := make([]error, n)
	spread(n, func(i int) {
		u, s, err := decodeBatch(ctx, l, encoded[i:i+1], dims[i:i+1])
		if err == nil && len(u) != 1 {
			releaseUnits(u)
			err = errs.New(errs.DataLoss, "codec engine answered %d chunks for 1", len(u))
		}
		if err != nil {
			fails[i] = shiftItem(err, i)
			return
		}
		out[i], sel[i] = u[0], s
	})
	for _, err := range fails {
		if err != nil {
			releaseUnits(out)
			return nil, false, err
		}
	}
	return out, slices.Contains(sel, true), nil
}

// spread runs f for 0 to n-1 on as many goroutines as there are
// processors (the caller's among them), each taking the next index, and
// returns once every call has.
func spread(n int, f func(i int)) {
	var next atomic.Int64
	work := func() {
		for {
			i := int(next.Add(1) - 1)
			if i >= n {
				return
			}
			f(i)
		}
	}
	var wg sync.WaitGroup
	for range min(n, runtime.GOMAXPROCS(0)) - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
}

// releaseUnits hands back the buffers of decoded units.
func releaseUnits(units []chunk) {
	for _, u := range units {
		if u.release != nil {
			u.release()
		}
	}
}

// decodeBatch is decodeUnits in one engine batch.
func decodeBatch(ctx context.Context, l *layout, encoded [][]byte, dims [][]zarr.DimProjection) (_ []chunk, selected bool, _ error) {
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

// workerFetch is the engine's codec.FetchDecoder when the units of l may
// be read by the codec workers themselves (Config.WorkerFetch; fetchFor
// decides per batch): the
// chunks of unsharded arrays by key, the inner chunks of shards by the
// ranges of the shard's index (read by the gateway, cached), for arrays
// of fixed-size and of variable-length elements; nil otherwise.
func (g *Gateway) workerFetch(l *layout) codec.FetchDecoder {
	if !g.cfg.WorkerFetch {
		return nil
	}
	ec, ok := l.codec.(engineCodec)
	if !ok {
		return nil
	}
	fd, _ := ec.c.(codec.FetchDecoder)
	return fd
}

// fetchFor is workerFetch for one batch of units read through dims,
// stored as stored bytes (-1: not known before they are read): nil also
// when the engine chooses batch by batch (codec.FetchChooser,
// --codec-choice auto) and its cost model has the gateway read and decode
// this batch itself.
func (g *Gateway) fetchFor(l *layout, stored int64, dims [][]zarr.DimProjection) codec.FetchDecoder {
	fd := g.workerFetch(l)
	ch, ok := fd.(codec.FetchChooser)
	if !ok {
		return fd
	}
	var selected int64
	for _, ds := range dims {
		n := int64(l.elem)
		for _, dp := range ds {
			n *= dp.Count
		}
		selected += n
	}
	if ch.PreferFetch(l.codec.(engineCodec).spec, len(dims), stored, selected) {
		return fd
	}
	return nil
}

// fetchUnits has the codec workers fetch the units refs names and decode
// them, the i-th to be read through dims[i]: fixed-size elements with
// their selections (only the selected elements come back: selected says
// so), variable-length ones whole. found[i] is false for a value the
// store tier does not hold.
func fetchUnits(ctx context.Context, l *layout, fd codec.FetchDecoder, refs []codec.Ref, dims [][]zarr.DimProjection) (_ []chunk, found []bool, selected bool, _ error) {
	var sel []codec.Selection
	if l.elem > 0 {
		sel = make([]codec.Selection, len(refs))
		for i := range refs {
			sel[i] = selection(l, dims[i])
		}
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
		return nil, nil, false, err
	}
	if len(a.chunks) != len(refs) || len(a.found) != len(refs) {
		for _, c := range fromEngine(a.chunks) {
			if c.release != nil {
				c.release()
			}
		}
		return nil, nil, false, errs.New(errs.DataLoss, "codec engine answered %d chunks for %d", len(a.chunks), len(refs))
	}
	return fromEngine(a.chunks), a.found, sel != nil, nil
}

// readFetched reads a batch of unsharded chunks through codec workers
// that fetch them from the store tier: the keys go out (the caller's
// read of this array was authorized; the keys are the array's own), the
// selected elements come back, and missing chunks become fill.
func (g *Gateway) readFetched(ctx context.Context, l *layout, fd codec.FetchDecoder, batch []readTask, out func(Block) error) error {
	refs := make([]codec.Ref, len(batch))
	dims := make([][]zarr.DimProjection, len(batch))
	for i, t := range batch {
		refs[i] = codec.Ref{Key: l.key(t.coords)}
		dims[i] = t.dims
	}
	decoded, found, selected, err := fetchUnits(ctx, l, fd, refs, dims)
	if err != nil {
		var ie *codec.ItemError
		if errors.As(err, &ie) && ie.Index < len(refs) {
			return fmt.Errorf("chunk %q: %w", refs[ie.Index].Key, ie.Err)
		}
		return err
	}
	defer releaseFrom(decoded, 0)
	for i, t := range batch {
		if !found[i] {
			if err := emitFill(l, t.dims, out); err != nil {
				return err
			}
			continue
		}
		b, err := place(l, decoded[i], t.dims, selected)
		decoded[i].release = nil // place handed it on
		if err != nil {
			return fmt.Errorf("chunk %q: %w", refs[i].Key, err)
		}
		if err := out(b); err != nil {
			return err
		}
	}
	return nil
}

// readShardFetched reads a batch of a shard's inner chunks through codec
// workers that fetch them from the store tier: the shard's key and the
// ranges its index gives go out, with the generation the index was read
// at, and the selected elements come back. errStaleIndex if the shard
// changed since idx was read (the worker found another generation, a
// shorter or no shard).
func (g *Gateway) readShardFetched(ctx context.Context, l *layout, fd codec.FetchDecoder, key string, idx *shardIdx, reqs []storesvc.KeyRange, batch []want, out func(Block) error) error {
	refs := make([]codec.Ref, len(batch))
	dims := make([][]zarr.DimProjection, len(batch))
	for i, w := range batch {
		off, n := reqs[i].Range.Parts()
		refs[i] = codec.Ref{Key: key, Offset: off, Length: n, Generation: idx.generation}
		dims[i] = w.dims
	}
	decoded, found, selected, err := fetchUnits(ctx, l, fd, refs, dims)
	if errors.Is(err, errs.Aborted) || errors.Is(err, errs.OutOfRange) {
		return errStaleIndex
	}
	if err != nil {
		var ie *codec.ItemError
		if errors.As(err, &ie) && ie.Index < len(batch) {
			return fmt.Errorf("shard %q inner chunk %d: %w", key, batch[ie.Index].entry, ie.Err)
		}
		return fmt.Errorf("shard %q: %w", key, err)
	}
	defer releaseFrom(decoded, 0)
	for _, f := range found {
		if !f {
			return errStaleIndex // the shard is gone since its index was read
		}
	}
	for i, w := range batch {
		b, err := place(l, decoded[i], w.dims, selected)
		decoded[i].release = nil // place handed it on
		if err != nil {
			return fmt.Errorf("shard %q inner chunk %d: %w", key, w.entry, err)
		}
		if err := out(b); err != nil {
			return err
		}
	}
	return nil
}

// releaseFrom hands back the buffers of the decoded units from i on that
// were not handed on.
func releaseFrom(units []chunk, i int) {
	for _, u := range units[i:] {
		if u.release != nil {
			u.release()
		}
	}
}
