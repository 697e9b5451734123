package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strconv"
	"sync"

	"go.opentelemetry.io/otel/attribute"

	"golang.org/x/sync/errgroup"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/bufpool"
	"github.com/zarrgate/zarrgate/internal/membudget"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/zarr"
)

// SlabInfo describes a slab: the output shape and element type, and the
// byte order of the blocks' elements.
type SlabInfo struct {
	Shape     []int64
	DataType  zarr.DataType
	ByteOrder ByteOrder
}

// ByteOrder is the byte order of multi-byte elements in blocks.
type ByteOrder int

// Byte orders. Blocks are always little-endian (whatever the array's
// codecs store); the type says so in the engine's API, as the wire's
// SlabHeader does.
const (
	LittleEndian ByteOrder = iota + 1
)

// Block is a box of a slab: its origin in slab coordinates, its shape, and
// its elements in C order (little-endian), or for variable-length types the
// concatenated element bytes and n+1 offsets. Blocks handed to a caller are
// read-only: they may share memory with cached fill values.
type Block struct {
	Origin, Shape []int64
	Data          []byte
	Offsets       []int64

	// release, if set, recycles Data's buffer: callers of ReadSlabTo call
	// it (Free) once done with the data, a transport once it has written
	// the block out; ReadSlab drops it.
	release func()
	// held, if set, gives back the block's share of the memory reserved
	// for the batch it came from (see readMem): called with release, or
	// by ReadSlab once emit has returned.
	held func()

	// Placed says a BlockSink has put the block's data in memory of its
	// own, at Placement, instead of in Data (which is then nil). A value,
	// not a pointer: placing a block allocates nothing.
	Placed    bool
	Placement Placement
}

// Placement is where a BlockSink put a block's data: Length bytes at
// Offset of the sink's memory, its Seq-th allocation there (counted from
// 0), so that blocks can be passed on in the order their memory is freed
// in.
type Placement struct {
	Offset, Length int64
	Seq            uint64
}

// Free recycles the block's buffer and gives back its reservation, for
// callers of ReadSlabTo, which own the blocks they are given: once they
// are done with the data (a transport, once it has written it). Only
// whoever holds the block last may call it, once; the block must not be
// used after.
func (b Block) Free() { b.free() }

// free is Free.
func (b Block) free() {
	if b.release != nil {
		b.release()
	}
	if b.held != nil {
		b.held()
	}
}

// readMem is one read call's memory: every batch reserves what it will
// fetch and decode from the budget before fetching, and gives it back
// once the blocks made from it are freed. Whatever is still held when the
// call ends (blocks dropped on an error path) is given back then, so no
// path leaks budget.
type readMem struct {
	b    *membudget.Budget
	path string
	mu   sync.Mutex
	next uint64
	held map[uint64]membudget.Reservation
}

func (g *Gateway) newReadMem(path string) *readMem {
	return &readMem{b: g.cfg.Budget, path: path, held: map[uint64]membudget.Reservation{}}
}

// reserve reserves n bytes and returns the holds on them: one for the
// caller, which drops it with Release when it has emitted everything; each
// emitted block takes another (hold).
//
// what describes the memory for an error message; it is formatted only
// when the budget has no room at once (not on every batch of a read).
func (m *readMem) reserve(ctx context.Context, n int64, what func() string) (*bufpool.Refs, error) {
	r, ok := m.b.TryAcquire(n)
	if !ok {
		var err error
		if r, err = m.b.Acquire(ctx, n, fmt.Sprintf("reading %s of %q", what(), m.path)); err != nil {
			return nil, err
		}
	}
	m.mu.Lock()
	id := m.next
	m.next++
	m.held[id] = r
	m.mu.Unlock()
	return bufpool.NewRefs(1, func() {
		r.Release()
		m.mu.Lock()
		delete(m.held, id)
		m.mu.Unlock()
	}), nil
}

// hold wraps out so that every block it passes on holds refs.
func hold(refs *bufpool.Refs, out func(Block) error) func(Block) error {
	return func(b Block) error {
		refs.Hold()
		b.held = refs.Release
		return out(b)
	}
}

// done gives back everything still held.
func (m *readMem) done() {
	m.mu.Lock()
	left := m.held
	m.held = map[uint64]membudget.Reservation{}
	m.mu.Unlock()
	for _, r := range left {
		r.Release()
	}
}

// maxBatchBytes bounds the encoded bytes one store request fetches.
const maxBatchBytes = 8 << 20

// maxPlainBatch is how many unsharded chunks one worker fetches and decodes
// together.
const maxPlainBatch = 8

// readTask is one stored object (chunk or shard) a read touches, with the
// selection's projection onto it.
type readTask struct {
	coords []int64
	dims   []zarr.DimProjection
}

// ReadSlab reads the hyperslab sel (nil: the whole array) of the array at
// path. It calls start once with the slab's shape, then emit for each block,
// from the calling goroutine, in no particular order; the blocks tile the
// slab exactly. A block's data is valid until emit returns: emit copies
// what it keeps. Chunks are fetched and decoded in parallel, at most
// Config.Parallelism at once, and a slow emit holds the workers back rather
// than letting blocks pile up: memory stays bounded whatever the slab's
// size. Cancelling ctx, or an error from emit, stops all work.
func (g *Gateway) ReadSlab(ctx context.Context, path string, sel []zarr.Range, start func(SlabInfo) error, emit func(Block) error) error {
	return g.ReadSlabTo(ctx, path, sel, start, nil, func(b Block) error {
		// The data is emit's until it returns; then its buffer is given
		// back (a decoded chunk lent from a codec worker's shared memory,
		// whose room the segment needs again; a pooled buffer) with the
		// memory it stands for.
		release := b.release
		b.release = nil
		err := emit(b)
		if release != nil {
			release()
		}
		if b.held != nil {
			b.held()
		}
		return err
	})
}

// BlockSink is where a read's workers put block data when it does not go
// to emit as is: a shared-memory segment a reader on this host maps (see
// SharedSegment), for one. Its methods run in the workers, in parallel;
// ctx is the read's.
type BlockSink interface {
	// Place passes b on through push, or pieces of it, put in place
	// (Placed set), or keeps it (a Destination, which has written it
	// where it goes); b's buffer is then the sink's to free.
	Place(ctx context.Context, b Block, push func(Block) error) error
	// Alloc returns n bytes of the destination for a whole chunk stored
	// raw (its stored bytes are its elements) to be read into, and tag,
	// which marks a block of those bytes as already in place; or nil if
	// the sink takes no direct reads.
	Alloc(ctx context.Context, n int64) (buf []byte, tag func(*Block), err error)
}

// ReadSlabTo is ReadSlab for callers that hold block data past emit (a
// transport that writes it out by reference) or place it elsewhere: emit
// owns every block it is given, and calls its Free once done with the
// data, which recycles the buffer; blocks it never frees are given back
// to the memory budget when the read ends, and their buffers to the
// garbage collector. If sink is set, the workers put blocks into it
// before emit sees them.
func (g *Gateway) ReadSlabTo(ctx context.Context, path string, sel []zarr.Range, start func(SlabInfo) error, sink BlockSink, emit func(Block) error) error {
	// The call counts as sharing the gateway from its start: a small read
	// is mostly this planning and one batch.
	call := g.sched.begin(false)
	defer call.end()
	ctx = withCall(ctx, call)
	l, a, proj, err := g.planRead(ctx, path, sel)
	if err != nil {
		return err
	}
	emit = tracedEmit(ctx, emit)
	if err := start(SlabInfo{Shape: proj.Shape, DataType: a.DataType, ByteOrder: LittleEndian}); err != nil {
		return err
	}
	mem := g.newReadMem(path)
	defer mem.done()

	if small := proj.NumChunks() <= maxPlainBatch && l.shard == nil || proj.NumChunks() == 1; small {
		// One batch: no workers, no channels, no goroutine handoffs, which
		// are most of a small read's cost.
		var batch []readTask
		proj.Each(func(coords []int64, dims []zarr.DimProjection) bool {
			batch = append(batch, readTask{coords: clone(coords), dims: clone(dims)})
			return true
		})
		if len(batch) == 0 {
			return nil
		}
		if err := g.readSmall(ctx, l, mem, batch, sink, emit); err != nil {
			return fmt.Errorf("read %q: %w", path, err)
		}
		return nil
	}

	// With workers, the call's decodes take slots of its share.
	call.useSlots()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	tasks := make(chan []readTask)
	blocks := make(chan Block, g.cfg.Parallelism)
	eg, ectx := errgroup.WithContext(ctx)
	eg.Go(func() error {
		defer close(tasks)
		batch := make([]readTask, 0, maxPlainBatch)
		var err error
		proj.Each(func(coords []int64, dims []zarr.DimProjection) bool {
			batch = append(batch, readTask{coords: clone(coords), dims: clone(dims)})
			if l.shard != nil || len(batch) == maxPlainBatch {
				select {
				case tasks <- batch:
				case <-ectx.Done():
					err = ectx.Err()
					return false
				}
				batch = make([]readTask, 0, maxPlainBatch)
			}
			return true
		})
		if err == nil && len(batch) > 0 {
			select {
			case tasks <- batch:
			case <-ectx.Done():
				err = ectx.Err()
			}
		}
		return err
	})
	queue := func(b Block) error {
		select {
		case blocks <- b:
			return nil
		case <-ectx.Done():
			return ectx.Err()
		}
	}
	out := queue
	if sink != nil {
		out = func(b Block) error { return sink.Place(ectx, b, queue) }
	}
	// Sharing the gateway, a worker's decodes run on a thread of lower
	// priority (lowerPriority), which ends with the worker, while fewer
	// than maxLowered workers are; alone again, the worker hands the
	// call's next batches to a new worker, at the process's priority,
	// and ends. worker starts with batch (nil: the next task); tried
	// says its priority was set already, lowered or not.
	var worker func(batch []readTask, tried, lowered bool) error
	worker = func(batch []readTask, tried, lowered bool) error {
		defer func() {
			if lowered {
				g.lowered.Add(-1)
			}
		}()
		tried = tried || g.cfg.BackgroundNice <= 0 || !g.inProcess
		for {
			if batch == nil {
				var ok bool
				if batch, ok = <-tasks; !ok {
					return nil
				}
			}
			if !tried && call.shared() {
				if g.lowered.Add(1) > g.maxLowered() {
					// maxLowered workers are lowered: this
					// one keeps its priority for this batch.
					g.lowered.Add(-1)
				} else {
					var onMain bool
					lowered, onMain = lowerPriority(g.cfg.BackgroundNice)
					if onMain {
						// This goroutine holds the main
						// thread: a worker started now runs
						// on another, whose priority it
						// lowers (counted already) before
						// this one lets the main thread go.
						set := make(chan struct{})
						eg.Go(func() error {
							lowered, onMain := lowerPriority(g.cfg.BackgroundNice)
							if onMain { // not while the main thread is held
								runtime.UnlockOSThread()
							}
							if !lowered {
								g.lowered.Add(-1)
							}
							close(set)
							return worker(batch, true, lowered)
						})
						<-set
						runtime.UnlockOSThread()
						return nil
					}
					if !lowered {
						g.lowered.Add(-1)
					}
					tried = true
				}
			}
			if err := g.readBatch(ectx, l, mem, batch, sink, out); err != nil {
				return err
			}
			batch = nil
			if lowered && !call.shared() {
				eg.Go(func() error { return worker(nil, false, false) })
				return nil
			}
		}
	}
	for range g.cfg.Parallelism {
		eg.Go(func() error { return worker(nil, false, false) })
	}
	done := make(chan error, 1)
	go func() { done <- eg.Wait(); close(blocks) }()
	for b := range blocks {
		if err := emit(b); err != nil {
			cancel()
			for b := range blocks { // let the workers finish
				b.free()
			}
			<-done
			return err
		}
	}
	if err := <-done; err != nil {
		return fmt.Errorf("read %q: %w", path, err)
	}
	return nil
}

// planRead finds the array, its layout and the selection's projection on
// its grid, and checks the slab against the limits.
func (g *Gateway) planRead(ctx context.Context, path string, sel []zarr.Range) (_ *layout, _ *zarr.Array, _ *zarr.Projection, err error) {
	ctx, span := startSpan(ctx, "gateway.plan", -1)
	defer func() { endSpan(span, err) }()
	n, err := g.array(ctx, path)
	if err != nil {
		return nil, nil, nil, err
	}
	l, err := g.layout(n)
	if err != nil {
		return nil, nil, nil, err
	}
	a := n.array
	if sel == nil {
		sel = zarr.FullSelection(a.Shape)
	}
	proj, err := zarr.Project(a.Shape, l.objectShape(), sel)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("read %q: %w", path, err)
	}
	if err := g.checkSlabSize(path, a, proj.Shape); err != nil {
		return nil, nil, nil, err
	}
	if err := g.checkSlabChunks(path, proj); err != nil {
		return nil, nil, nil, err
	}
	if span.IsRecording() {
		span.SetAttributes(attribute.Int64("zarrgate.chunks", proj.NumChunks()))
	}
	return l, a, proj, nil
}

func (g *Gateway) checkSlabSize(path string, a *zarr.Array, shape []int64) error {
	elem := int64(a.DataType.Size)
	if elem == 0 {
		elem = 16 // variable length: count offsets and some payload
	}
	n := elem
	for _, s := range shape {
		if s > 0 && n > g.cfg.MaxSlabBytes/s {
			n = g.cfg.MaxSlabBytes + 1
			break
		}
		n *= s
	}
	if n > g.cfg.MaxSlabBytes {
		return errs.New(errs.ResourceExhausted, "slab of %q with shape %v is larger than the gateway's limit of %d bytes; read it in parts", path, shape, g.cfg.MaxSlabBytes)
	}
	return nil
}

// checkSlabChunks bounds the chunks (or shards) one call touches, and so
// its store calls.
func (g *Gateway) checkSlabChunks(path string, proj *zarr.Projection) error {
	if n := proj.NumChunks(); n > g.cfg.MaxSlabChunks {
		return errs.New(errs.ResourceExhausted, "slab of %q touches %s chunks, more than this server's limit of %d per call (--max-slab-chunks); read it in parts", path, chunkCount(n), g.cfg.MaxSlabChunks)
	}
	return nil
}

func chunkCount(n int64) string {
	if n == math.MaxInt64 {
		return "more than 2^63"
	}
	return strconv.FormatInt(n, 10)
}

func clone[T any](s []T) []T { return append([]T(nil), s...) }

// readSmall reads the one batch of a small read. Chunks decoded in this
// process are each read and decoded on a goroutine of their own, as many
// at once as there are processors (the caller's among them): a box
// across two or four chunks then waits for the slowest chunk rather than
// the sum, and a helper's start (on an idle processor, the wake-up of a
// thread: 0.1–0.25 ms on a VM) overlaps the caller's own chunk, file
// read included, instead of following the whole batch's fetch. The
// batch's memory is reserved at once, as readBatch reserves it (no read
// holds part of the budget while it waits for more); blocks reach emit
// one at a time, as from the workers of a larger read.
func (g *Gateway) readSmall(ctx context.Context, l *layout, mem *readMem, batch []readTask, sink BlockSink, emit func(Block) error) error {
	cost := l.readCost()
	if len(batch) < 2 || runtime.GOMAXPROCS(0) < 2 || l.shard != nil || l.raw || !l.codec.inProcess() || int64(len(batch))*cost > mem.b.Limit() {
		out := emit
		if sink != nil {
			out = func(b Block) error { return sink.Place(ctx, b, emit) }
		}
		return g.readBatch(ctx, l, mem, batch, sink, out)
	}
	refs, err := mem.reserve(ctx, int64(len(batch))*cost, func() string { return fmt.Sprintf("%d chunks", len(batch)) })
	if err != nil {
		return err
	}
	defer refs.Release()
	var mu sync.Mutex
	one := func(b Block) error {
		mu.Lock()
		defer mu.Unlock()
		return emit(b)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := one
	if sink != nil {
		out = func(b Block) error { return sink.Place(ctx, b, one) }
	}
	out = hold(refs, out)
	// The first error is the read's (the others' may be its cancellation).
	var once sync.Once
	var first error
	spread(len(batch), func(i int) {
		err := ctx.Err() // after a failure, or the call's end: the rest is not read
		if err == nil {
			err = g.readChunks(ctx, l, batch[i:i+1], out)
		}
		if err != nil {
			once.Do(func() { first = err; cancel() })
		}
	})
	return first
}

// readBatch reads one task batch: a shard (batches of sharded arrays hold
// one), or up to maxPlainBatch chunks.
func (g *Gateway) readBatch(ctx context.Context, l *layout, mem *readMem, batch []readTask, sink BlockSink, out func(Block) error) error {
	if l.shard != nil {
		return g.readShard(ctx, l, mem, batch[0], out)
	}
	if sink != nil && l.raw {
		var err error
		if batch, err = g.readDirect(ctx, l, batch, sink, out); err != nil || len(batch) == 0 {
			return err
		}
	}
	if parts, rest := g.rawParts(l, batch); parts != nil {
		if err := g.readRawParts(ctx, l, mem, parts, out); err != nil {
			return err
		}
		batch = rest
	}
	// As many chunks per store request as the budget can ever hold at
	// once (at least one: a chunk larger than the budget is refused).
	cost := l.readCost()
	per := max(1, min(int64(len(batch)), mem.b.Limit()/max(cost, 1)))
	for len(batch) > 0 {
		part := batch[:min(per, int64(len(batch)))]
		batch = batch[len(part):]
		refs, err := mem.reserve(ctx, int64(len(part))*cost, func() string { return fmt.Sprintf("%d chunks", len(part)) })
		if err != nil {
			return err
		}
		err = g.readChunks(ctx, l, part, hold(refs, out))
		refs.Release()
		if err != nil {
			return err
		}
	}
	return nil
}

// readDirect reads the chunks of a batch that the selection covers whole
// straight into the sink's memory: chunks stored raw need no decoding, so
// their stored bytes are the block. It returns the tasks left for
// readChunks.
func (g *Gateway) readDirect(ctx context.Context, l *layout, batch []readTask, sink BlockSink, out func(Block) error) ([]readTask, error) {
	n := l.unitElems() * int64(l.elem)
	rs, _ := sink.(RowSink)
	var rest []readTask
	for i, t := range batch {
		if !wholeUnit(l, t.dims) {
			rest = append(rest, t)
			continue
		}
		if rs != nil {
			if ok, err := g.readRows(ctx, l, t, rs); err != nil {
				return nil, err
			} else if ok {
				continue
			}
		}
		buf, tag, err := sink.Alloc(ctx, n)
		if err != nil {
			return nil, err
		}
		if buf == nil { // the sink takes no direct reads
			return append(rest, batch[i:]...), nil
		}
		key := l.key(t.coords)
		done, _, err := g.fetchSlot(ctx)
		if err != nil {
			return nil, err
		}
		_, err = retry(ctx, g.cfg.StoreRetries, func() (struct{}, error) { return struct{}{}, g.readWhole(ctx, key, buf) })
		done()
		switch {
		case errors.Is(err, storesvc.ErrNotFound):
			l.fill.fillBuf(buf)
		case err != nil:
			return nil, fmt.Errorf("chunk %q: %w", key, err)
		}
		b := Block{Origin: make([]int64, len(t.dims)), Shape: make([]int64, len(t.dims)), Data: buf}
		for d, dp := range t.dims {
			b.Origin[d], b.Shape[d] = dp.OutStart, dp.Count
		}
		tag(&b)
		if err := out(b); err != nil {
			return nil, err
		}
	}
	return rest, nil
}

// readRows reads the whole raw chunk of t straight into the places of its
// rows in a RowSink (the fill value where the chunk is missing); false if
// the sink takes no rows.
func (g *Gateway) readRows(ctx context.Context, l *layout, t readTask, rs RowSink) (bool, error) {
	origin, shape := make([]int64, len(t.dims)), make([]int64, len(t.dims))
	for d, dp := range t.dims {
		origin[d], shape[d] = dp.OutStart, dp.Count
	}
	list := rowLists.Get().(*[][]byte)
	defer func() {
		clear(*list) // no references into the sink's memory kept
		rowLists.Put(list)
	}()
	vecs, done, err := rs.Rows(origin, shape, (*list)[:0])
	if err != nil || len(vecs) == 0 {
		return false, err
	}
	*list = vecs
	key := l.key(t.coords)
	slotDone, _, err := g.fetchSlot(ctx)
	if err != nil {
		return false, err
	}
	_, err = retry(ctx, g.cfg.StoreRetries, func() (struct{}, error) { return struct{}{}, g.readWholeVec(ctx, key, vecs) })
	slotDone()
	switch {
	case errors.Is(err, storesvc.ErrNotFound):
		for _, v := range vecs {
			l.fill.fillBuf(v)
		}
	case err != nil:
		return false, fmt.Errorf("chunk %q: %w", key, err)
	}
	done()
	return true, nil
}

// readWholeVec reads the value at key into vecs, in order, which it must
// fill exactly: with one system call per 1024 of them where the store can
// (storesvc.VecReader), otherwise one read each.
func (g *Gateway) readWholeVec(ctx context.Context, key string, vecs [][]byte) (err error) {
	ctx, span := startSpan(ctx, "gateway.fetch", 1)
	defer func() { endSpan(span, err) }()
	obj, err := g.store.Get(ctx, key, storesvc.ByteRange{})
	if err != nil {
		return err
	}
	defer obj.Close()
	var n int64
	for _, v := range vecs {
		n += int64(len(v))
	}
	if obj.Length != n {
		return errs.New(errs.DataLoss, "bytes codec: chunk has %d bytes, want %d", obj.Length, n)
	}
	if vr, ok := obj.ReadCloser.(storesvc.VecReader); ok {
		err = vr.ReadFullVec(vecs)
	} else {
		for _, v := range vecs {
			if _, err = io.ReadFull(obj, v); err != nil {
				break
			}
		}
	}
	if err != nil {
		return errs.Wrap(errs.DataLoss, err, "read %d bytes", n)
	}
	return nil
}

// readWhole reads the value at key into buf, which it must fill exactly.
func (g *Gateway) readWhole(ctx context.Context, key string, buf []byte) error {
	return g.readWholeVec(ctx, key, [][]byte{buf})
}

// wholeUnit reports whether a projection covers its unit whole, in order.
func wholeUnit(l *layout, dims []zarr.DimProjection) bool {
	for d, dp := range dims {
		if dp.Start != 0 || dp.Step != 1 || dp.Count != l.unit[d] {
			return false
		}
	}
	return true
}

// readChunks reads a batch of unsharded chunks with one store request and
// one codec batch.
func (g *Gateway) readChunks(ctx context.Context, l *layout, batch []readTask, out func(Block) error) error {
	if g.workerFetch(l) != nil {
		dims := make([][]zarr.DimProjection, len(batch))
		for i, t := range batch {
			dims[i] = t.dims
		}
		if fd := g.fetchFor(l, -1, dims); fd != nil {
			return g.readFetched(ctx, l, fd, batch, out)
		}
	}
	// Sharing the gateway, with the store's reads and the codecs both on
	// this process's processors: a chunk at a time, its fetch, decode and
	// placement all under one slot of the call's share (fair.go), so that
	// the call's fetches do not keep more of its goroutines busy than its
	// share either. The worker keeps its slot from chunk to chunk of the
	// batch unless others need it (call.next).
	if c := g.fetchCall(ctx); c != nil {
		release, err := c.acquire(ctx)
		if err != nil {
			return err
		}
		for i := range batch {
			if i > 0 {
				if release, err = c.next(ctx); err != nil {
					return err
				}
			}
			if err := g.readChunksHeld(ctx, l, batch[i:i+1], out, true); err != nil {
				release()
				return err
			}
		}
		release()
		return nil
	}
	return g.readChunksHeld(ctx, l, batch, out, false)
}

// readChunksHeld is readChunks past the choice of a path; held says the
// caller holds a slot for the batch's decode.
func (g *Gateway) readChunksHeld(ctx context.Context, l *layout, batch []readTask, out func(Block) error, held bool) error {
	reqs := make([]storesvc.KeyRange, len(batch))
	for i, t := range batch {
		reqs[i] = storesvc.KeyRange{Key: l.key(t.coords)}
	}
	fctx, span := startSpan(ctx, "gateway.fetch", len(reqs))
	st := g.stager(l)
	var staged []func() // with st: per value, what frees its buffer
	vals, err := retry(fctx, g.cfg.StoreRetries, func() ([]storesvc.PartialValue, error) {
		if st != nil {
			var vals []storesvc.PartialValue
			var err error
			vals, staged, err = g.readStaged(fctx, reqs, g.maxEncodedUnit(l), st)
			return vals, err
		}
		return g.store.GetPartialValuesMax(fctx, reqs, g.maxEncodedUnit(l))
	})
	endSpan(span, err)
	if err != nil {
		return err
	}
	if staged != nil {
		// The buffers are freed once the batch is done with them (a
		// decoded chunk that aliases its buffer frees it when released).
		defer func() {
			for _, release := range staged {
				if release != nil {
					release()
				}
			}
		}()
	}
	var encoded [][]byte
	var dims [][]zarr.DimProjection
	for i, v := range vals {
		if v.Found {
			encoded = append(encoded, v.Data)
			dims = append(dims, batch[i].dims)
		}
	}
	// Decoding, placing and sending the blocks is the batch's work on
	// this process's processors: it takes a slot of the call's share, for
	// the whole batch, or, while other calls share the gateway, for each
	// chunk, so that the call's slots turn over often (fair.go); codec
	// workers get whole batches always (their slot is free).
	step := len(encoded)
	if l.codec.inProcess() && callOf(ctx).shared() {
		step = 1
	}
	i, k := 0, 0 // the next task, the next encoded chunk
	for i < len(batch) {
		hi := min(k+step, len(encoded))
		err := func() error {
			var decoded []chunk
			selected := false
			if hi > k {
				if !held {
					done, err := l.codec.slot(ctx)
					if err != nil {
						return err
					}
					defer done()
				}
				var err error
				decoded, selected, err = decodeUnits(ctx, l, encoded[k:hi], dims[k:hi])
				if err != nil {
					return g.blameChunk(shiftItem(err, k), reqs, vals)
				}
				if len(decoded) != hi-k {
					for _, u := range decoded {
						if u.release != nil {
							u.release()
						}
					}
					return errs.New(errs.DataLoss, "codec engine answered %d chunks for %d", len(decoded), hi-k)
				}
			}
			for d := 0; i < len(batch); i++ {
				t := batch[i]
				if !vals[i].Found {
					if err := emitFill(l, t.dims, out); err != nil {
						return err
					}
					continue
				}
				if d == len(decoded) {
					break
				}
				u := decoded[d]
				d++
				if staged != nil && staged[i] != nil && bufpool.Overlaps(u.data, vals[i].Data) {
					release, prev := staged[i], u.release
					staged[i] = nil
					u.release = func() {
						if prev != nil {
							prev()
						}
						release()
					}
				}
				recycle(vals[i], []*chunk{&u})
				b, err := place(l, u, t.dims, selected)
				if err != nil {
					return fmt.Errorf("chunk %q: %w", reqs[i].Key, err)
				}
				if err := out(b); err != nil {
					return err
				}
			}
			return nil
		}()
		if err != nil {
			return err
		}
		k = hi
	}
	return nil
}

// shiftItem moves the batch item a codec error blames by k: for a decode
// of part of a batch, from k on.
func shiftItem(err error, k int) error {
	var ie *codec.ItemError
	if k == 0 || !errors.As(err, &ie) {
		return err
	}
	return &codec.ItemError{Index: ie.Index + k, Err: ie.Err}
}

// recycle hands the pooled buffer of a value read from the store back once
// decoding is done with it: at once, or, where decoded chunks alias it (a
// codec chain that decodes in place), when the last of them is released.
func recycle(v storesvc.PartialValue, decoded []*chunk) {
	if !v.Pooled() {
		return
	}
	var users []*chunk
	for _, c := range decoded {
		if bufpool.Overlaps(c.data, v.Data) {
			users = append(users, c)
		}
	}
	if len(users) == 0 {
		v.Release()
		return
	}
	// v.Release once the last user is done: a pooled value's buffer is
	// bufpool's, put back by the count itself (one allocation, not three:
	// the value moved to the heap, a method value, the count).
	refs := bufpool.NewBufRefs(len(users), v.Data)
	for _, c := range users {
		c.release = refs.Release
	}
}

// blameChunk names the chunk a batch decode failed on, when the codec
// error says which batch item it was.
func (g *Gateway) blameChunk(err error, reqs []storesvc.KeyRange, vals []storesvc.PartialValue) error {
	var ie *codec.ItemError
	if errors.As(err, &ie) {
		k := 0
		for i, v := range vals {
			if !v.Found {
				continue
			}
			if k == ie.Index {
				return fmt.Errorf("chunk %q: %w", reqs[i].Key, ie.Err)
			}
			k++
		}
	}
	return err
}

// readShard reads the inner chunks of one shard that the selection
// touches: the index (cached, checked against the generation of every
// chunk read with it), then the chunks in batches of ranges.
func (g *Gateway) readShard(ctx context.Context, l *layout, mem *readMem, t readTask, out func(Block) error) error {
	key := l.key(t.coords)
	local := make([]zarr.Range, len(t.dims))
	for d, dp := range t.dims {
		local[d] = zarr.Range{Start: dp.Start, Stop: dp.Stop, Step: dp.Step}
	}
	inner, err := zarr.Project(l.shard.shape, l.unit, local)
	if err != nil {
		return err
	}
	// The inner chunks are taken from the projection as they are needed,
	// never listed whole: a shard may hold millions.
	it := inner.Iterate()
	nextWant := func() (want, bool) {
		coords, dims, ok := it.Next()
		if !ok {
			return want{}, false
		}
		w := want{dims: clone(dims)}
		for d := range coords {
			w.entry = w.entry*int(l.shard.per[d]) + int(coords[d])
			w.dims[d].OutStart += t.dims[d].OutStart
		}
		return w, true
	}
	var retried []want // to take before the projection's next ones
	take := func() (want, bool) {
		if len(retried) > 0 {
			w := retried[0]
			retried = retried[1:]
			return w, true
		}
		return nextWant()
	}
	stale := 0
	for {
		idx, err := g.shardIndex(ctx, l, key, false)
		if err != nil {
			return err
		}
		// One batch: up to maxBatchBytes of encoded chunks.
		var reqs []storesvc.KeyRange
		var batch []want
		var bytes int64
		for {
			w, ok := take()
			if !ok {
				break
			}
			e := codec.EmptyEntry
			if idx.found {
				e = idx.entries[w.entry]
			}
			if e.Empty() {
				if err := emitFill(l, w.dims, out); err != nil {
					return err
				}
				continue
			}
			if len(batch) > 0 && (bytes+int64(e.NBytes) > maxBatchBytes || bytes+int64(e.NBytes)+int64(len(batch)+1)*l.unitBytes() > mem.b.Limit()) {
				retried = append([]want{w}, retried...) // first of the next batch
				break
			}
			reqs = append(reqs, storesvc.KeyRange{Key: key, Range: storesvc.Bounded(int64(e.Offset), int64(e.NBytes))})
			batch = append(batch, w)
			bytes += int64(e.NBytes)
		}
		if len(batch) == 0 {
			return nil
		}
		err = g.readShardBatch(ctx, l, mem, key, idx, reqs, batch, bytes, out)
		if !errors.Is(err, errStaleIndex) {
			if err != nil {
				return err
			}
			stale = 0
			continue
		}
		// The shard changed since its index was read: read the index
		// again and fetch this batch anew, a bounded number of times.
		if stale++; stale > maxStaleReads {
			return errs.New(errs.Aborted, "shard %q changed under %d reads in a row; try again", key, maxStaleReads)
		}
		if _, err := g.shardIndex(ctx, l, key, true); err != nil {
			return err
		}
		retried = append(batch, retried...)
	}
}

// want is an inner chunk of a shard to read: its index entry and the
// projection onto it, in slab coordinates.
type want struct {
	entry int
	dims  []zarr.DimProjection
}

// maxStaleReads bounds how often in a row one shard's chunks are fetched
// again because the shard changed since its index was read. A shard that
// changes this often is being rewritten without pause; a corrupt index
// never gets here (readShardIndex refuses it).
const maxStaleReads = 8

// errStaleIndex says a shard changed since its index was read.
var errStaleIndex = errors.New("stale shard index")

// readShardBatch fetches, decodes and emits one batch of a shard's inner
// chunks, with memory reserved for the encoded bytes and the decoded
// units; errStaleIndex if the shard changed since idx was read.
func (g *Gateway) readShardBatch(ctx context.Context, l *layout, mem *readMem, key string, idx *shardIdx, reqs []storesvc.KeyRange, batch []want, encBytes int64, out func(Block) error) error {
	var fd codec.FetchDecoder
	if g.workerFetch(l) != nil {
		dims := make([][]zarr.DimProjection, len(batch))
		for i, w := range batch {
			dims[i] = w.dims
		}
		if fd = g.fetchFor(l, encBytes, dims); fd != nil {
			encBytes = 0 // the codec workers fetch them: only the decoded units come here
		}
	}
	refs, err := mem.reserve(ctx, encBytes+int64(len(batch))*l.unitBytes(), func() string {
		return fmt.Sprintf("%d inner chunks of shard %q", len(batch), key)
	})
	if err != nil {
		return err
	}
	defer refs.Release()
	out = hold(refs, out)
	if fd != nil {
		return g.readShardFetched(ctx, l, fd, key, idx, reqs, batch, out)
	}
	// Sharing, with the store read in this process, the batch's fetch is
	// made under its slot too (readChunks).
	release, held, err := g.fetchSlot(ctx)
	if err != nil {
		return err
	}
	defer release()
	runs, parts := coalesce(reqs)
	fctx, span := startSpan(ctx, "gateway.fetch", len(reqs))
	runVals, err := retry(fctx, g.cfg.StoreRetries, func() ([]storesvc.PartialValue, error) { return g.store.GetPartialValues(fctx, runs) })
	endSpan(span, err)
	if err != nil && !errors.Is(err, errs.OutOfRange) {
		return err
	}
	if err != nil {
		return errStaleIndex // the index was checked against the shard's size: it shrank since
	}
	for _, v := range runVals {
		if !v.Found || (v.Generation != "" && v.Generation != idx.generation) {
			return errStaleIndex
		}
	}
	vals, err := uncoalesce(key, runVals, parts)
	if err != nil {
		return err
	}
	encoded := make([][]byte, len(vals))
	dims := make([][]zarr.DimProjection, len(vals))
	for i, v := range vals {
		encoded[i], dims[i] = v.Data, batch[i].dims
	}
	if !held {
		done, err := l.codec.slot(ctx) // as in readChunks
		if err != nil {
			return err
		}
		defer done()
	}
	decoded, selected, err := decodeUnits(ctx, l, encoded, dims)
	if err != nil {
		var ie *codec.ItemError
		if errors.As(err, &ie) && ie.Index < len(batch) {
			return fmt.Errorf("shard %q inner chunk %d: %w", key, batch[ie.Index].entry, ie.Err)
		}
		return fmt.Errorf("shard %q: %w", key, err)
	}
	users := make([]*chunk, len(decoded))
	for i := range decoded {
		users[i] = &decoded[i]
	}
	for _, v := range runVals {
		recycle(v, users)
	}
	for i, w := range batch {
		b, err := place(l, decoded[i], w.dims, selected)
		if err != nil {
			return fmt.Errorf("shard %q inner chunk %d: %w", key, w.entry, err)
		}
		if err := out(b); err != nil {
			return err
		}
	}
	return nil
}

// coalesce merges bounded byte ranges of one key that follow each other
// into single reads (inner chunks written in order lie back to back in
// their shard): one store read per run instead of one per chunk, up to
// maxBatchBytes a run. piece i says where range i lies in which run.
func coalesce(reqs []storesvc.KeyRange) (runs []storesvc.KeyRange, pieces []piece) {
	var start, end int64
	for i, r := range reqs {
		off, n := r.Range.Parts()
		if i > 0 && r.Key == reqs[i-1].Key && off == end && n >= 0 && end-start+n <= maxBatchBytes {
			end += n
			runs[len(runs)-1].Range = storesvc.Bounded(start, end-start)
		} else {
			runs = append(runs, r)
			start, end = off, off+n
		}
		pieces = append(pieces, piece{run: len(runs) - 1, off: off - start, n: n})
	}
	return runs, pieces
}

// piece locates a requested range in the value of a coalesced run.
type piece struct {
	run    int
	off, n int64
}

// uncoalesce cuts the values of coalesced runs back into the requested
// ranges.
func uncoalesce(key string, runVals []storesvc.PartialValue, pieces []piece) ([]storesvc.PartialValue, error) {
	out := make([]storesvc.PartialValue, len(pieces))
	for i, p := range pieces {
		v := runVals[p.run]
		if p.off+p.n > int64(len(v.Data)) {
			return nil, errs.New(errs.DataLoss, "shard %q: read %d bytes where %d were asked for", key, len(v.Data), p.off+p.n)
		}
		out[i] = storesvc.PartialValue{Data: v.Data[p.off : p.off+p.n : p.off+p.n], Found: v.Found, Generation: v.Generation}
	}
	return out, nil
}

// shardIdx is a shard's decoded index with the generation it was read at.
type shardIdx struct {
	found      bool
	generation string
	entries    codec.ShardIndex
}

// shardIndex returns the index of the shard at key, from the cache unless
// refresh is set.
func (g *Gateway) shardIndex(ctx context.Context, l *layout, key string, refresh bool) (*shardIdx, error) {
	if !refresh {
		if idx, ok := g.cache.index(key); ok {
			g.stats.IndexHits.Add(1)
			return idx, nil
		}
		g.stats.IndexMisses.Add(1)
	}
	// Sharing, a read from a store read in this process is the call's
	// work on the processors (fair.go).
	release, _, err := g.fetchSlot(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	ctx, span := startSpan(ctx, "gateway.fetch_index", -1)
	idx, err := retry(ctx, g.cfg.StoreRetries, func() (*shardIdx, error) { return g.readShardIndex(ctx, l, key) })
	endSpan(span, err)
	return idx, err
}

func (g *Gateway) readShardIndex(ctx context.Context, l *layout, key string) (*shardIdx, error) {
	size := l.shard.index.IndexSize()
	r := storesvc.Suffix(size)
	if l.shard.index.IndexAtStart() {
		r = storesvc.Bounded(0, size)
	}
	obj, err := g.store.Get(ctx, key, r)
	if errors.Is(err, errs.NotFound) {
		idx := &shardIdx{}
		g.cache.putIndex(l.path(), key, idx)
		return idx, nil
	}
	if errors.Is(err, errs.OutOfRange) {
		return nil, errs.New(errs.DataLoss, "shard %q is shorter than its %d-byte index", key, size)
	}
	if err != nil {
		return nil, err
	}
	defer obj.Close()
	// The raw index, its decoded entries (as large) and checkIndex's
	// sorted spans (1.5 times): an index of millions of entries costs that
	// much while it is read.
	res, err := g.cfg.Budget.Acquire(ctx, 4*obj.Length, fmt.Sprintf("the index of shard %q", key))
	if err != nil {
		return nil, err
	}
	defer res.Release()
	raw := make([]byte, obj.Length)
	if _, err := io.ReadFull(obj, raw); err != nil {
		return nil, fmt.Errorf("shard %q index: %w", key, err)
	}
	entries, err := l.shard.index.DecodeIndex(raw)
	if err != nil {
		return nil, fmt.Errorf("shard %q index: %w", key, err)
	}
	if len(entries) != l.shard.n {
		return nil, errs.New(errs.DataLoss, "shard %q index has %d entries, want %d", key, len(entries), l.shard.n)
	}
	if err := checkIndex(key, entries, obj.Size, size, l.shard.index.IndexAtStart(), g.maxEncodedUnit(l)); err != nil {
		return nil, err
	}
	idx := &shardIdx{found: true, generation: obj.Generation, entries: entries}
	g.cache.putIndex(l.path(), key, idx)
	return idx, nil
}

// emitFill emits the slab's part that projection dims of a unit holding
// only the fill value covers.
func emitFill(l *layout, dims []zarr.DimProjection, out func(Block) error) error {
	origin, shape := make([]int64, len(dims)), make([]int64, len(dims))
	for d, dp := range dims {
		origin[d], shape[d] = dp.OutStart, dp.Count
	}
	return l.fill.blocks(origin, shape, out)
}

// checkIndex refuses a shard index that cannot describe the shard it was
// read from (DataLoss naming the inner chunk): an entry past the shard's
// end or inside the index, one whose offset and length overflow, one
// larger than any encoding of an inner chunk, or two that overlap. Such an
// index would otherwise send reads past the end, which look like a shard
// that changed since its index was read.
func checkIndex(key string, entries codec.ShardIndex, size, indexSize int64, indexAtStart bool, maxChunk int64) error {
	lo, hi := int64(0), size-indexSize // where chunks may lie
	if indexAtStart {
		lo, hi = indexSize, size
	}
	type span struct {
		off, end int64
		i        int
	}
	spans := make([]span, 0, len(entries))
	for i, e := range entries {
		if e.Empty() {
			continue
		}
		if e.Offset > math.MaxInt64 || e.NBytes > math.MaxInt64 {
			return errs.New(errs.DataLoss, "shard %q: index entry %d (offset %d, %d bytes) overflows", key, i, e.Offset, e.NBytes)
		}
		end, ok := zarr.AddChecked(int64(e.Offset), int64(e.NBytes))
		switch {
		case !ok:
			return errs.New(errs.DataLoss, "shard %q: index entry %d (offset %d, %d bytes) overflows", key, i, e.Offset, e.NBytes)
		case int64(e.Offset) < lo || end > hi:
			return errs.New(errs.DataLoss, "shard %q: inner chunk %d at bytes [%d, %d) lies outside the shard's %d data bytes [%d, %d)", key, i, e.Offset, end, hi-lo, lo, hi)
		case int64(e.NBytes) > maxChunk:
			return errs.New(errs.DataLoss, "shard %q: inner chunk %d claims %d bytes, more than any encoding of it (%d)", key, i, e.NBytes, maxChunk)
		}
		spans = append(spans, span{int64(e.Offset), end, i})
	}
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.off, b.off) })
	for k := 1; k < len(spans); k++ {
		p, c := spans[k-1], spans[k]
		if c.off < p.end && (c.off != p.off || c.end != p.end) { // identical ranges may be shared
			return errs.New(errs.DataLoss, "shard %q: inner chunks %d [%d, %d) and %d [%d, %d) overlap", key, p.i, p.off, p.end, c.i, c.off, c.end)
		}
	}
	return nil
}

// maxEncodedUnit bounds the stored size of one decode unit: its decoded
// size plus generous codec overhead (no codec grows data by more); for
// variable-length types, the element bytes allowed and a 4-byte length
// for each element.
func (g *Gateway) maxEncodedUnit(l *layout) int64 {
	n := l.unitBytes()
	if l.elem == 0 {
		n = g.cfg.MaxVariableBytes + 4*l.unitElems() + 4
	}
	return n + n/8 + 1<<16
}

// gather returns the block of the slab that the projection dims of one
// unit covers: the unit itself when it is selected whole (the block takes
// over its buffer), otherwise a copy of the selected elements in a pooled
// buffer (and the unit's buffer is released).
func gather(l *layout, u chunk, dims []zarr.DimProjection) Block {
	nd := len(dims)
	b := Block{Origin: make([]int64, nd), Shape: make([]int64, nd)}
	for d, dp := range dims {
		b.Origin[d], b.Shape[d] = dp.OutStart, dp.Count
	}
	if wholeUnit(l, dims) {
		b.Data, b.Offsets, b.release = u.data, u.offsets, u.release
		return b
	}
	src := view{shape: l.unit, start: make([]int64, nd), step: make([]int64, nd)}
	for d, dp := range dims {
		src.start[d], src.step[d] = dp.Start, dp.Step
	}
	if l.elem == 0 {
		b.Data, b.Offsets = gatherVar(u, src, b.Shape)
	} else {
		// copyBox writes every element of the dense box: the pooled
		// buffer's old contents never show.
		buf := bufpool.Get(int(product(b.Shape)) * l.elem)
		copyBox(buf, dense(b.Shape, make([]int64, nd)), u.data, src, b.Shape, l.elem)
		b.Data, b.release = buf, func() { bufpool.Put(buf) }
	}
	if u.release != nil {
		u.release()
	}
	return b
}

// gatherVar collects the selected variable-length elements of a unit.
func gatherVar(u chunk, src view, count []int64) ([]byte, []int64) {
	n := product(count)
	offs := make([]int64, 1, n+1)
	var data []byte
	eachIndex(src, count, func(i int64) {
		data = append(data, u.data[u.offsets[i]:u.offsets[i+1]]...)
		offs = append(offs, int64(len(data)))
	})
	return data, offs
}

// eachIndex calls fn with the linear index of every element of the box, in
// C order.
func eachIndex(v view, count []int64, fn func(int64)) {
	nd := len(count)
	total := product(count)
	k := make([]int64, nd)
	for n := int64(0); n < total; n++ {
		var idx int64
		for d := range nd {
			idx = idx*v.shape[d] + v.start[d] + k[d]*v.step[d]
		}
		fn(idx)
		for d := nd - 1; d >= 0; d-- {
			k[d]++
			if k[d] < count[d] {
				break
			}
			k[d] = 0
		}
	}
}
