package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"sort"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"golang.org/x/sync/errgroup"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/bufpool"
	"github.com/zarrgate/zarrgate/internal/membudget"
	"github.com/zarrgate/zarrgate/zarr"
)

// WriteStats reports what a WriteSlab stored.
type WriteStats struct {
	// Objects is the number of chunks or shards written (or erased because
	// they came to hold only the fill value).
	Objects int64
	// Bytes is the number of encoded bytes written.
	Bytes int64
}

// WithRelease returns b with release set, for a block given to WriteSlab
// in a buffer its transport recycles: WriteSlab calls release once it has
// copied the block's elements out, before it asks for the next block; or,
// for a block that is exactly one whole chunk (or inner chunk of a shard)
// the selection covers, keeps the buffer as that chunk's, encodes from it
// (no copy) and calls release once the chunk is stored. It never calls it
// for a variable-length data type (the values stay in the block's memory
// until the call ends), for a block it refuses, nor after a failure; those
// buffers are left to the garbage collector.
func (b Block) WithRelease(release func()) Block {
	b.release = release
	return b
}

// WriteSlab writes the hyperslab sel (nil: the whole array) of the array at
// path from the blocks next returns (io.EOF ends them). The blocks, in slab
// coordinates, must tile the selection exactly: a block outside it, with the
// wrong byte length, with a string that is not UTF-8 or overlapping another
// is InvalidArgument naming it, as is a stream that ends before the
// selection is covered.
//
// Every chunk (or shard) the selection touches is written exactly once,
// with its final content, atomically: whole, without a read, if the
// selection covers it, else by one read-modify-write conditioned on the
// generation read, retried on conflict, so that concurrent writers of
// disjoint regions of one chunk or shard, through this gateway or others on
// the same store, lose nothing. After a crash at any point every chunk is
// entirely old or entirely new.
//
// While the data received fits Config.WriteBufferBytes, nothing is written
// before the whole stream has arrived and been checked: a bad stream writes
// nothing. A larger write streams: each chunk is written as soon as its part
// of the selection is complete, and the partial chunks that do not fit in
// memory are spilled to a log on local disk (Config.SpillDir) and read back
// when they complete; a bad block late in such a stream leaves the chunks
// completed before it written, each of them whole.
//
// Every buffer the call holds is reserved from Config.Budget first; a
// reservation that fails ends the call with ResourceExhausted.
func (g *Gateway) WriteSlab(ctx context.Context, path string, sel []zarr.Range, next func() (Block, error)) (WriteStats, error) {
	// A write of more than one chunk or shard encodes them in parallel:
	// its encodes take slots of its share (fair.go).
	call := g.sched.begin(false)
	defer call.end()
	ctx = withCall(ctx, call)
	n, err := g.array(ctx, path)
	if err != nil {
		return WriteStats{}, err
	}
	l, err := g.layout(n)
	if err != nil {
		return WriteStats{}, err
	}
	a := n.array
	if sel == nil {
		sel = zarr.FullSelection(a.Shape)
	}
	proj, err := zarr.Project(a.Shape, l.objectShape(), sel)
	if err != nil {
		return WriteStats{}, fmt.Errorf("write %q: %w", path, err)
	}
	if err := g.checkSlabSize(path, a, proj.Shape); err != nil {
		return WriteStats{}, err
	}
	if proj.NumChunks() > 1 {
		call.useSlots()
	}
	if nc := proj.NumChunks(); nc > g.cfg.MaxSlabChunks {
		what := "chunks"
		if l.shard != nil {
			what = "shards"
		}
		return WriteStats{}, errs.New(errs.ResourceExhausted, "write %q: the selection touches %d %s, more than this server's limit of %d per call (--max-slab-chunks); write it in parts", path, nc, what, g.cfg.MaxSlabChunks)
	}
	w := &slabWriter{g: g, l: l, proj: proj, path: path, objects: make(map[int64]*pendingObject),
		mem: &callMem{b: g.cfg.Budget}, freed: make(chan struct{}, 1)}
	nd := len(proj.Dims)
	w.stride = make([]int64, nd)
	for d, s := nd-1, int64(1); d >= 0; d-- {
		w.stride[d] = s
		s *= proj.Dims[d].Len()
	}
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(max(g.cfg.Parallelism, flushDepth))
	w.flushGroup, w.ctx = eg, ectx
	err = w.reserveSpill(true)
	if err == nil {
		err = w.run(next)
	}
	// Flushes in flight finish (they write complete chunks whole) before
	// the spill log they read is removed.
	werr := eg.Wait()
	w.close()
	g.dropCaches(l)
	if err != nil {
		if werr != nil && ctx.Err() == nil && errors.Is(err, context.Canceled) {
			// The stream stopped because a flush failed: report that.
			err = fmt.Errorf("write %q: %w", path, werr)
		}
		return w.stats(), err
	}
	if werr != nil {
		return w.stats(), fmt.Errorf("write %q: %w", path, werr)
	}
	return w.stats(), nil
}

// flushDepth is how many objects a WriteSlab flushes at once, at least:
// more than the processors, because a flush mostly waits for the store (a
// file store's fsyncs, which the file system batches when many are in
// flight; a remote store's round trips). Their codec work still takes the
// call's slots (fair.go), and their memory counts against the write
// buffer (flush), so the depth costs neither processors nor memory.
const flushDepth = 32

// dropCaches drops the cached indexes of the array's shards, which a write
// may have changed (the array's other entries stay).
func (g *Gateway) dropCaches(l *layout) { g.cache.dropIndexes(l.path()) }

// Bookkeeping a WriteSlab charges to the budget per pending object and
// unit (maps, projections, bitmaps' headers): not data, but not free.
const (
	objectOverhead = 512
	unitOverhead   = 128
)

// slabWriter holds the state of one WriteSlab. Only the call's goroutine
// (run) touches objects, units in memory and the spill log's writer; flush
// workers own the objects handed to them.
type slabWriter struct {
	g       *Gateway
	l       *layout
	proj    *zarr.Projection
	path    string
	objects map[int64]*pendingObject // by index in the projection
	stride  []int64                  // of the projection's object index
	// done marks the objects flushed, by index: they are dropped from
	// objects, and a block reaching into one overlaps (it received all
	// its elements). One bit per object: at most MaxSlabChunks/8 bytes.
	done    []uint64
	covered int64 // elements received
	// streaming is set once the write no longer fits the buffer: complete
	// objects are then flushed at once.
	streaming bool
	// held is the data the call holds in memory (unit buffers, their
	// bitmaps, variable-length values), including that of objects handed
	// to flushes until they finish: at most WriteBufferBytes.
	held     atomic.Int64
	inflight atomic.Int64  // flushes running
	freed    chan struct{} // a flush finished
	mem      *callMem
	spill    *spill   // nil until the first spill
	scratch  []uint64 // gathers a piece for the spill log
	scratchR membudget.Reservation
	spillRes membudget.Reservation // the spill log's buffers, until it opens

	flushGroup *errgroup.Group
	ctx        context.Context
	// kept says place kept the block's buffer as a unit's (adopted).
	kept bool

	mu       sync.Mutex
	nObjects int64
	nBytes   int64
}

func (w *slabWriter) stats() WriteStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return WriteStats{Objects: w.nObjects, Bytes: w.nBytes}
}

func (w *slabWriter) count(objects, bytes int64) {
	w.mu.Lock()
	w.nObjects += objects
	w.nBytes += bytes
	w.mu.Unlock()
}

// close removes the spill log and gives back every reservation; flushes
// must have finished.
func (w *slabWriter) close() {
	w.spill.close()
	w.spillRes.Release()
	w.scratchR.Release()
	w.mem.close()
}

// pendingObject is a chunk or shard some blocks have written into.
type pendingObject struct {
	idx    int64 // index in the projection
	key    string
	coords []int64
	dims   []zarr.DimProjection // the selection's projection onto it
	// units are the decode units the selection touches, by their index in
	// the object (0 for an unsharded chunk).
	units map[int]*pendingUnit
	// inner is the projection onto a shard's units (nil when unsharded).
	inner    *zarr.Projection
	need     int64 // selected elements in the object
	got      int64 // elements received
	inMemory int   // units held in memory
	spilled  bool  // some unit has records in the spill log
	book     int64 // bookkeeping bytes charged
	// flushCost is what its flush allocates (counted in held, reserved
	// by the flush itself as it allocates).
	flushCost int64
	// storeFailed says a store call of its flush failed: its buffers are
	// not recycled (set).
	storeFailed bool
	// mem is the memory its flush reserved, and took beyond (reserveFlush).
	mem flushMem
}

// pendingUnit holds the received elements of one unit: in memory (seen
// is set) or in the spill log (image or pieces is set), never both. Once
// spilled a unit stays spilled: later pieces go to the log.
type pendingUnit struct {
	// seen marks every element received, to catch overlaps; data holds
	// them (fixed size: the unit, fill where not seen), or vals
	// (variable length: the values, aliasing the blocks').
	seen  []uint64
	data  []byte
	vals  [][]byte
	bytes int64 // held in memory (and reserved)
	// pooled says data is a buffer from internal/bufpool, not zeroed nor
	// filled: the selection covers every element of the unit, so blocks
	// overwrite all of it before it is flushed. The flush hands it back
	// once the object is stored.
	pooled bool
	// adopted, if set, releases data: a received block that was exactly
	// this unit, kept as its buffer (WithRelease); called, like a pooled
	// buffer's Put, once the object is stored.
	adopted func()
	// image is the spill offset of the unit's in-memory state when it was
	// spilled, pieces that of its last piece spilled since; -1 if none.
	image, pieces int64
}

func (u *pendingUnit) inMemory() bool { return u.seen != nil }

func (w *slabWriter) run(next func() (Block, error)) error {
	total := product(w.proj.Shape)
	for {
		b, err := next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if err := w.ctx.Err(); err != nil {
			return err
		}
		if err := w.checkBlock(b); err != nil {
			return err
		}
		w.kept = false
		if err := w.place(b); err != nil {
			return err
		}
		if w.l.elem > 0 && !w.kept {
			// Every element is copied out (into a unit, or the spill
			// log): the block's buffer can be recycled. Variable-length
			// values stay where they are, in the block's memory.
			b.free()
		}
	}
	if w.covered != total {
		return errs.New(errs.InvalidArgument, "write %q: the blocks cover %d of the %d selected elements; nothing more was written", w.path, w.covered, total)
	}
	for _, o := range w.sortedObjects() {
		if err := w.flush(o); err != nil {
			return err
		}
	}
	return nil
}

func (w *slabWriter) sortedObjects() []*pendingObject {
	out := make([]*pendingObject, 0, len(w.objects))
	for _, o := range w.objects {
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].idx < out[j].idx })
	return out
}

// checkBlock validates a block's geometry, byte length and, for string
// arrays, text, before anything is allocated for it.
func (w *slabWriter) checkBlock(b Block) error {
	nd := len(w.proj.Shape)
	if len(b.Origin) != nd || len(b.Shape) != nd {
		return errs.New(errs.InvalidArgument, "write %q: block at %v has %d/%d origin/shape dimensions, the selection %d", w.path, b.Origin, len(b.Origin), len(b.Shape), nd)
	}
	for d := range nd {
		end, ok := zarr.AddChecked(b.Origin[d], b.Shape[d])
		if b.Origin[d] < 0 || b.Shape[d] < 0 || !ok || end > w.proj.Shape[d] {
			return errs.New(errs.InvalidArgument, "write %q: block at %v with shape %v lies outside the selection's shape %v (dimension %d)", w.path, b.Origin, b.Shape, w.proj.Shape, d)
		}
	}
	// Inside the selection, a block has no more elements than it.
	n, ok := zarr.ProductChecked(b.Shape)
	if !ok {
		return errs.New(errs.InvalidArgument, "write %q: block shape %v has more than 2^63 elements", w.path, b.Shape)
	}
	if w.l.elem > 0 {
		want, ok := zarr.MulChecked(n, int64(w.l.elem))
		if !ok || int64(len(b.Data)) != want {
			return errs.New(errs.InvalidArgument, "write %q: block at %v with shape %v has %d bytes, want %d elements of %d bytes", w.path, b.Origin, b.Shape, len(b.Data), n, w.l.elem)
		}
		return nil
	}
	if int64(len(b.Offsets)) != n+1 || b.Offsets[0] != 0 || b.Offsets[n] != int64(len(b.Data)) {
		return errs.New(errs.InvalidArgument, "write %q: block at %v with shape %v needs %d offsets from 0 to the data length %d", w.path, b.Origin, b.Shape, n+1, len(b.Data))
	}
	for i := int64(1); i <= n; i++ {
		if b.Offsets[i] < b.Offsets[i-1] {
			return errs.New(errs.InvalidArgument, "write %q: block at %v: offsets decrease at %d", w.path, b.Origin, i)
		}
	}
	if w.l.a.DataType.Kind == zarr.KindString {
		// zarr-python and every other reader decode string elements as
		// UTF-8: one invalid value makes the whole chunk unreadable.
		for i := range n {
			if !utf8.Valid(b.Data[b.Offsets[i]:b.Offsets[i+1]]) {
				return errs.New(errs.InvalidArgument, "write %q: block at %v: element %d (slab position %v) is not valid UTF-8; string arrays hold UTF-8 text (use a bytes array for binary values)", w.path, b.Origin, i, unravel(i, b.Origin, b.Shape))
			}
		}
	}
	return nil
}

// unravel is the slab position of element i (C order) of a block.
func unravel(i int64, origin, shape []int64) []int64 {
	pos := make([]int64, len(shape))
	for d := len(shape) - 1; d >= 0; d-- {
		pos[d] = origin[d] + i%shape[d]
		i /= shape[d]
	}
	return pos
}

// overlapping returns the projections of dps (ordered by OutStart,
// disjoint) that intersect [lo, hi) in slab coordinates.
func overlapping(dps zarr.DimProjections, lo, hi int64) zarr.DimProjections {
	if hi <= lo {
		return dps.Slice(0, 0)
	}
	return dps.Slice(dps.Search(lo), min(dps.Search(hi-1)+1, dps.Len()))
}

// place copies a block into the units it covers.
func (w *slabWriter) place(b Block) error {
	nd := len(b.Shape)
	if product(b.Shape) == 0 {
		return nil
	}
	per := make([]zarr.DimProjections, nd)
	for d := range nd {
		per[d] = overlapping(w.proj.Dims[d], b.Origin[d], b.Origin[d]+b.Shape[d])
	}
	var err error
	zarr.EachCombination(per, func(_ []int64, dims []zarr.DimProjection) bool {
		var o *pendingObject
		if o, err = w.object(dims, b); err != nil {
			return false
		}
		if err = w.placeInObject(o, b); err != nil {
			return false
		}
		if o.got > o.need {
			err = w.overlapErr(b)
			return false
		}
		if o.got == o.need && w.streaming {
			err = w.flush(o)
		}
		return err == nil
	})
	return err
}

func (w *slabWriter) overlapErr(b Block) error {
	return errs.New(errs.InvalidArgument, "write %q: block at %v with shape %v overlaps elements already written by another block", w.path, b.Origin, b.Shape)
}

// object returns the pending object the projections dims belong to.
func (w *slabWriter) object(dims []zarr.DimProjection, b Block) (*pendingObject, error) {
	var idx int64
	for d, dp := range dims {
		idx += w.proj.Dims[d].Search(dp.OutStart) * w.stride[d]
	}
	if o, ok := w.objects[idx]; ok {
		return o, nil
	}
	if w.done != nil && w.done[idx/64]&(1<<(idx%64)) != 0 {
		// Flushed complete: any element more is one too many.
		return nil, w.overlapErr(b)
	}
	book := int64(objectOverhead + 64*len(dims))
	if err := w.acquire(book, "write bookkeeping"); err != nil {
		return nil, err
	}
	coords := make([]int64, len(dims))
	for d, dp := range dims {
		coords[d] = dp.Chunk
	}
	o := &pendingObject{idx: idx, key: w.l.key(coords), coords: coords, dims: clone(dims), units: make(map[int]*pendingUnit), need: 1, book: book}
	for _, dp := range dims {
		o.need *= dp.Count
	}
	if w.l.shard != nil {
		local := make([]zarr.Range, len(dims))
		for d, dp := range dims {
			local[d] = zarr.Range{Start: dp.Start, Stop: dp.Stop, Step: dp.Step}
		}
		o.inner, _ = zarr.Project(w.l.shard.shape, w.l.unit, local)
		for d := range o.inner.Dims {
			o.inner.Dims[d] = o.inner.Dims[d].Shift(dims[d].OutStart)
		}
	}
	w.objects[idx] = o
	return o, nil
}

// placeInObject copies the part of b inside object o into its units.
func (w *slabWriter) placeInObject(o *pendingObject, b Block) error {
	if o.inner == nil {
		return w.placeInUnit(o, 0, o.dims, b)
	}
	nd := len(b.Shape)
	per := make([]zarr.DimProjections, nd)
	for d := range nd {
		per[d] = overlapping(o.inner.Dims[d], b.Origin[d], b.Origin[d]+b.Shape[d])
	}
	var err error
	zarr.EachCombination(per, func(_ []int64, dims []zarr.DimProjection) bool {
		idx := 0
		for d, dp := range dims {
			idx = idx*int(w.l.shard.per[d]) + int(dp.Chunk)
		}
		err = w.placeInUnit(o, idx, dims, b)
		return err == nil
	})
	return err
}

// unitBytes is what holding a unit in memory costs: its buffer (or value
// slice headers) and its bitmap.
func (w *slabWriter) unitBytes() int64 {
	n := w.l.unitElems()
	per := int64(w.l.elem)
	if per == 0 {
		per = 24
	}
	return n*per + (n+63)/64*8
}

// placeInUnit copies the intersection of block b and unit projection dims
// into the unit: into its buffer if it is held in memory, else into the
// spill log.
func (w *slabWriter) placeInUnit(o *pendingObject, idx int, dims []zarr.DimProjection, b Block) error {
	l := w.l
	u := o.units[idx]
	if u == nil {
		if err := w.acquire(unitOverhead, "write bookkeeping"); err != nil {
			return err
		}
		o.book += unitOverhead
		u = &pendingUnit{image: -1, pieces: -1}
		o.units[idx] = u
		// A new unit is held in memory if the buffer has room for it
		// (after spilling others); one larger than the whole buffer goes
		// to the log piece by piece.
		need := w.unitBytes()
		ok, err := w.room(need)
		if err != nil {
			return err
		}
		if ok {
			n := l.unitElems()
			u.seen = make([]uint64, (n+63)/64)
			switch {
			case l.elem > 0 && selectsAll(dims, n):
				u.data, u.pooled = unitBuffer(int(n*int64(l.elem))), true
			case l.elem > 0:
				u.data = l.fill.newUnit(n * int64(l.elem))
			default:
				u.vals = make([][]byte, n)
			}
			u.bytes = need
			o.inMemory++
		}
	}
	nd := len(dims)
	count := make([]int64, nd)
	dst := view{shape: l.unit, start: make([]int64, nd), step: make([]int64, nd)}
	src := view{shape: b.Shape, start: make([]int64, nd), step: make([]int64, nd)}
	for d, dp := range dims {
		lo := max(b.Origin[d], dp.OutStart)
		hi := min(b.Origin[d]+b.Shape[d], dp.OutStart+dp.Count)
		count[d] = hi - lo
		dst.start[d] = dp.Start + (lo-dp.OutStart)*dp.Step
		dst.step[d] = dp.Step
		src.start[d] = lo - b.Origin[d]
		src.step[d] = 1
	}
	if u.inMemory() && l.elem == 0 {
		// The values stay in the block's memory (gRPC's message buffer):
		// they count against the buffer.
		var vb int64
		eachIndex(src, count, func(i int64) { vb += b.Offsets[i+1] - b.Offsets[i] })
		ok, err := w.room(vb)
		if err != nil {
			return err
		}
		switch {
		case ok && u.inMemory():
			u.bytes += vb
		case ok: // room was made by spilling this very unit
			w.unhold(vb)
		case u.inMemory(): // more than the whole buffer: to the log
			if err := w.spillUnit(o, u); err != nil {
				return err
			}
		}
	}
	if u.inMemory() {
		if ov := markBox(u.seen, dst, count); ov > 0 {
			return w.overlapErr(b)
		}
		switch {
		case u.pooled && b.release != nil && isWholeUnit(b, count, dst, l.unit):
			// The block is the unit, its elements in the unit's order:
			// keep its buffer (the transport's, handed over with
			// WithRelease) instead of copying it into one of ours.
			bufpool.Put(u.data)
			u.data, u.pooled, u.adopted, w.kept = b.Data, false, b.release, true
		case l.elem > 0:
			copyBox(u.data, dst, b.Data, src, count, l.elem)
		default:
			var dstIdx []int64
			eachIndex(dst, count, func(i int64) { dstIdx = append(dstIdx, i) })
			k := 0
			eachIndex(src, count, func(i int64) {
				u.vals[dstIdx[k]] = b.Data[b.Offsets[i]:b.Offsets[i+1]]
				k++
			})
		}
	} else if err := w.logPiece(o, u, dst, src, count, b); err != nil {
		return err
	}
	n := product(count)
	o.got += n
	w.covered += n
	return nil
}

// isWholeUnit reports whether block b is exactly one whole unit of shape
// unit: count (b's part in the unit) is all of b and all of the unit, at
// the unit's origin, with step 1 (dst), so that b's elements lie in the
// unit's C order.
func isWholeUnit(b Block, count []int64, dst view, unit []int64) bool {
	for d := range count {
		if count[d] != unit[d] || b.Shape[d] != count[d] || dst.start[d] != 0 || (dst.step[d] != 1 && count[d] > 1) {
			return false
		}
	}
	return true
}

// unitBuffer returns the buffer of a unit the selection covers whole: not
// zeroed (a variable, for tests that hand out dirty buffers).
var unitBuffer = bufpool.Get

// recycleBuffer hands a flushed unit's pooled buffer, or an encoded
// chunk, back to the pool (a variable, for tests that watch what goes
// back).
var recycleBuffer = bufpool.Put

// selectsAll reports whether the projections dims onto a unit of n
// elements select every one of them.
func selectsAll(dims []zarr.DimProjection, n int64) bool {
	k := int64(1)
	for _, dp := range dims {
		k *= dp.Count
	}
	return k == n
}

// eachSet calls fn for every maximal run [i, j) of set bits.
func eachSet(bm []uint64, fn func(i, j int64)) {
	eachSetErr(bm, func(i, j int64) error { fn(i, j); return nil })
}

func eachSetErr(bm []uint64, fn func(i, j int64) error) error {
	n := int64(len(bm)) * 64
	i := int64(0)
	for i < n {
		// Skip clear bits a word at a time.
		w := bm[i/64] >> (i % 64)
		if w == 0 {
			i = (i/64 + 1) * 64
			continue
		}
		i += int64(bits.TrailingZeros64(w))
		j := i
		for j < n {
			w := ^bm[j/64] >> (j % 64)
			if w == 0 {
				j = (j/64 + 1) * 64
				continue
			}
			j += int64(bits.TrailingZeros64(w))
			break
		}
		j = min(j, n)
		if err := fn(i, j); err != nil {
			return err
		}
		i = j
	}
	return nil
}
