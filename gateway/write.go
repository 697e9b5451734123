package gateway

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"golang.org/x/sync/errgroup"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/membudget"
	"github.com/zarrgate/zarrgate/storesvc"
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
	eg.SetLimit(g.cfg.Parallelism)
	w.flushGroup, w.ctx = eg, ectx
	err = w.run(next)
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

	flushGroup *errgroup.Group
	ctx        context.Context

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
		if err := w.place(b); err != nil {
			return err
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
			if l.elem > 0 {
				u.data = l.fill.newUnit(n * int64(l.elem))
			} else {
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
		if l.elem > 0 {
			copyBox(u.data, dst, b.Data, src, count, l.elem)
		} else {
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

// room makes room in the buffer for n more bytes and reserves them from
// the budget, spilling units held in memory (and, once the write has
// outgrown the buffer, flushing complete objects) as needed. It reports
// false when n does not fit the buffer at all: the caller keeps its data
// in the spill log instead.
func (w *slabWriter) room(n int64) (bool, error) {
	buf := w.g.cfg.WriteBufferBytes
	if n > buf {
		return false, w.startStreaming()
	}
	for w.held.Load()+n > buf {
		if !w.streaming {
			if err := w.startStreaming(); err != nil {
				return false, err
			}
			continue
		}
		// Spill down to half the buffer, so that the next spill is not
		// one block away.
		spilled, err := w.spillUntil(buf/2 - n)
		if err != nil {
			return false, err
		}
		if spilled {
			continue
		}
		// All that is left is the data of flushes in flight: wait for one.
		if w.inflight.Load() == 0 {
			break // nothing held at all: n fits
		}
		select {
		case <-w.freed:
		case <-w.ctx.Done():
			return false, w.ctx.Err()
		}
	}
	if err := w.acquire(n, "write buffer"); err != nil {
		return false, err
	}
	w.held.Add(n)
	return true, nil
}

// unhold gives back n bytes of the buffer.
func (w *slabWriter) unhold(n int64) {
	w.held.Add(-n)
	w.mem.release(n)
}

// acquire reserves n bytes from the budget for the call's main loop.
//
// Deadlock: a call must not wait for memory while holding memory it could
// give back, or two calls each holding half the budget and waiting for
// more would wait on each other until the budget's MaxWait. So when the
// budget has no room now, the call first spills every unit it holds in
// memory (giving their reservations back), and only then waits, holding
// just what it cannot give back: bookkeeping, the spill log's buffers and
// the objects its flushes are writing. Flush workers do wait holding the
// units they write, but each waits for a bounded amount (a unit or a
// batch), FIFO, for at most the budget's MaxWait: the worst case is
// ResourceExhausted, never a hang.
func (w *slabWriter) acquire(n int64, what string) error {
	if w.mem.try(n) {
		return nil
	}
	if _, err := w.spillUntil(0); err != nil {
		return err
	}
	return w.mem.acquire(w.ctx, n, fmt.Sprintf("write %q: a %s", w.path, what))
}

// startStreaming switches to streaming: the write no longer fits the
// buffer, so complete objects are written as soon as they are.
func (w *slabWriter) startStreaming() error {
	if w.streaming {
		return nil
	}
	w.streaming = true
	for _, o := range w.sortedObjects() {
		if o.got == o.need {
			if err := w.flush(o); err != nil {
				return err
			}
		}
	}
	return nil
}

// spillUntil spills units held in memory, those of the least complete
// objects first (the others will complete soonest), until the data held
// is at most target; it reports whether it spilled any.
func (w *slabWriter) spillUntil(target int64) (bool, error) {
	if w.held.Load() <= target {
		return false, nil
	}
	var objs []*pendingObject
	for _, o := range w.objects {
		if o.inMemory > 0 {
			objs = append(objs, o)
		}
	}
	sort.Slice(objs, func(i, j int) bool {
		fi, fj := float64(objs[i].got)/float64(objs[i].need), float64(objs[j].got)/float64(objs[j].need)
		if fi != fj {
			return fi < fj
		}
		return objs[i].idx < objs[j].idx
	})
	spilled := false
	for _, o := range objs {
		if w.held.Load() <= target {
			break
		}
		idxs := make([]int, 0, len(o.units))
		for i, u := range o.units {
			if u.inMemory() {
				idxs = append(idxs, i)
			}
		}
		slices.Sort(idxs)
		for _, i := range idxs {
			if err := w.spillUnit(o, o.units[i]); err != nil {
				return spilled, err
			}
			spilled = true
			if w.held.Load() <= target {
				break
			}
		}
	}
	return spilled, nil
}

// openSpill creates the call's spill log on first use, with its write
// buffer and the scratch buffer pieces are gathered in.
func (w *slabWriter) openSpill() error {
	if w.spill != nil {
		return nil
	}
	words := max(spillRecordBytes, w.l.elem+7) / 8
	// The spill's own buffers are reserved waiting (they are small and
	// taken once per call): spilling is what frees memory.
	res, err := w.g.cfg.Budget.Acquire(w.ctx, spillBufBytes+int64(words)*8, fmt.Sprintf("write %q: the spill buffers", w.path))
	if err != nil {
		return err
	}
	limit := w.g.cfg.MaxSlabBytes
	s, err := openSpill(w.g.cfg.SpillDir, limit, res)
	if err != nil {
		res.Release()
		return err
	}
	w.spill = s
	w.scratch = make([]uint64, words)
	return nil
}

// spillUnit writes a unit held in memory to the spill log as an image
// (its bitmap and the elements received, packed) and drops its buffers.
func (w *slabWriter) spillUnit(o *pendingObject, u *pendingUnit) error {
	if err := w.openSpill(); err != nil {
		return err
	}
	s := w.spill
	e := int64(w.l.elem)
	var k, vbytes int64
	for _, word := range u.seen {
		k += int64(bits.OnesCount64(word))
	}
	size := int64(len(u.seen)) * 8
	if e > 0 {
		size += k * e
	} else {
		eachSet(u.seen, func(i, j int64) {
			for ; i < j; i++ {
				vbytes += int64(len(u.vals[i]))
			}
		})
		size += (k+1)*8 + vbytes
	}
	off, err := s.begin(-1, recImage, size)
	if err != nil {
		return err
	}
	if err := s.write(asBytes(u.seen)); err != nil {
		return err
	}
	if e > 0 {
		err = eachSetErr(u.seen, func(i, j int64) error { return s.write(u.data[i*e : j*e]) })
	} else {
		offs := asInt64s(asBytes(w.scratch))
		offs[0] = 0
		n, pos := 1, int64(0)
		err = eachSetErr(u.seen, func(i, j int64) error {
			for ; i < j; i++ {
				pos += int64(len(u.vals[i]))
				offs[n] = pos
				if n++; n == len(offs) {
					if err := s.writeInt64s(offs); err != nil {
						return err
					}
					n = 0
				}
			}
			return nil
		})
		if err == nil {
			err = s.writeInt64s(offs[:n])
		}
		if err == nil {
			err = eachSetErr(u.seen, func(i, j int64) error {
				for ; i < j; i++ {
					if err := s.write(u.vals[i]); err != nil {
						return err
					}
				}
				return nil
			})
		}
	}
	if err != nil {
		return err
	}
	u.image = off
	o.spilled = true
	o.inMemory--
	w.unhold(u.bytes)
	u.bytes, u.seen, u.data, u.vals = 0, nil, nil, nil
	return nil
}

// logPiece appends the part of block b inside a spilled unit (the box
// count at src in the block, dst in the unit) to the spill log, cut into
// records a small scratch buffer can read back.
func (w *slabWriter) logPiece(o *pendingObject, u *pendingUnit, dst, src view, count []int64, b Block) error {
	if err := w.openSpill(); err != nil {
		return err
	}
	s := w.spill
	e := int64(w.l.elem)
	nd := len(count)
	maxElems := int64(spillVarElems)
	if e > 0 {
		maxElems = int64(len(w.scratch)*8) / e
	}
	hdr := make([]int64, 3*nd)
	d2 := view{shape: dst.shape, start: make([]int64, nd), step: dst.step}
	s2 := view{shape: src.shape, start: make([]int64, nd), step: src.step}
	return splitBox(count, maxElems, func(at, cnt []int64) error {
		for d := range nd {
			d2.start[d] = dst.start[d] + at[d]*dst.step[d]
			s2.start[d] = src.start[d] + at[d]*src.step[d]
			hdr[3*d], hdr[3*d+1], hdr[3*d+2] = d2.start[d], d2.step[d], cnt[d]
		}
		n := product(cnt)
		var off int64
		var err error
		if e > 0 {
			data := asBytes(w.scratch)[:n*e]
			copyBox(data, dense(cnt, make([]int64, nd)), b.Data, s2, cnt, int(e))
			if off, err = s.begin(u.pieces, recPiece, int64(24*nd)+n*e); err != nil {
				return err
			}
			if err := s.writeInt64s(hdr); err != nil {
				return err
			}
			if err := s.write(data); err != nil {
				return err
			}
		} else {
			offs := asInt64s(asBytes(w.scratch))[:n+1]
			k := 0
			offs[0] = 0
			eachIndex(s2, cnt, func(i int64) {
				offs[k+1] = offs[k] + b.Offsets[i+1] - b.Offsets[i]
				k++
			})
			if off, err = s.begin(u.pieces, recPiece, int64(24*nd)+(n+1)*8+offs[n]); err != nil {
				return err
			}
			if err := s.writeInt64s(hdr); err != nil {
				return err
			}
			if err := s.writeInt64s(offs); err != nil {
				return err
			}
			eachIndex(s2, cnt, func(i int64) {
				if err == nil {
					err = s.write(b.Data[b.Offsets[i]:b.Offsets[i+1]])
				}
			})
			if err != nil {
				return err
			}
		}
		u.pieces = off
		o.spilled = true
		return nil
	})
}

// splitBox cuts a box of the given count into boxes of at most maxElems
// elements (at least one), cut along the outer dimensions first, and calls
// fn with each one's offset and count (reused between calls).
func splitBox(count []int64, maxElems int64, fn func(at, cnt []int64) error) error {
	nd := len(count)
	at, cnt := make([]int64, nd), clone(count)
	if product(count) <= maxElems {
		return fn(at, cnt)
	}
	// d: the outermost dimension whose inner slices fit; it is cut into
	// k slices at a time, the dimensions before it one at a time.
	d, inner := nd-1, int64(1)
	for d >= 0 && inner*count[d] <= maxElems {
		inner *= count[d]
		d--
	}
	k := max(1, maxElems/inner)
	for i := range d {
		cnt[i] = 1
	}
	for {
		for j := int64(0); j < count[d]; j += k {
			at[d], cnt[d] = j, min(k, count[d]-j)
			if err := fn(at, cnt); err != nil {
				return err
			}
		}
		i := d - 1
		for ; i >= 0; i-- {
			at[i]++
			if at[i] < count[i] {
				break
			}
			at[i] = 0
		}
		if i < 0 {
			return nil
		}
	}
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

// flush hands a complete object to a flush worker, which writes it once,
// and drops it from the pending objects.
func (w *slabWriter) flush(o *pendingObject) error {
	if w.objects[o.idx] != o {
		return nil // flushed already
	}
	// What the worker will allocate counts against the buffer too, so that
	// the call's memory is the buffer however many flushes run: wait for
	// flushes in flight until it fits (it runs alone if it never does).
	cost := w.flushCost(o)
	for w.held.Load()+cost > w.g.cfg.WriteBufferBytes && w.inflight.Load() > 0 {
		select {
		case <-w.freed:
		case <-w.ctx.Done():
			return w.ctx.Err()
		}
	}
	w.held.Add(cost)
	o.flushCost = cost
	delete(w.objects, o.idx)
	if w.done == nil {
		words := (w.proj.NumChunks() + 63) / 64
		if err := w.acquire(words*8, "write bookkeeping"); err != nil {
			return err
		}
		o.book += words * 8 // released with this object; the map stays
		w.done = make([]uint64, words)
	}
	w.done[o.idx/64] |= 1 << (o.idx % 64)
	if o.spilled {
		// The worker reads the object's records back.
		if err := w.spill.sync(); err != nil {
			return err
		}
	}
	w.inflight.Add(1)
	w.flushGroup.Go(func() error {
		defer w.finished(o)
		if w.coversObject(o) {
			err := w.writeWhole(o)
			if !transient(err) {
				return err
			}
			// The write may or may not have landed: only a write
			// conditioned on what is stored now is safe to repeat.
		}
		return w.mergeInto(o)
	})
	return nil
}

// flushCost estimates what flushing o allocates: its units read back
// from the spill log (a shard's in batches), the encoded output (and for
// a shard its assembly), and for a merge the stored object, the decoded
// stored unit and the merged copy.
func (w *slabWriter) flushCost(o *pendingObject) int64 {
	data := w.l.unitElems() * int64(max(w.l.elem, varElemBytes))
	var spilled int64
	for _, u := range o.units {
		if !u.inMemory() {
			spilled++
		}
	}
	n := int64(len(o.units))
	cost := min(spilled*w.unitBytes(), shardBatchBytes+w.unitBytes()) + n*data
	if w.l.shard != nil {
		cost += n * data // the assembled shard
	}
	if !w.coversObject(o) {
		cost += min(n, 2)*data + n*data // decoded and merged units, the stored object
	}
	return cost
}

// finished gives back the memory of a flushed object.
func (w *slabWriter) finished(o *pendingObject) {
	var n int64
	for _, u := range o.units {
		n += u.bytes
		u.bytes, u.seen, u.data, u.vals = 0, nil, nil, nil
	}
	w.held.Add(-n - o.flushCost)
	w.mem.release(n + o.book)
	w.inflight.Add(-1)
	select {
	case w.freed <- struct{}{}:
	default:
	}
}

// coversObject reports whether the selection covers every element of the
// object that lies inside the array.
func (w *slabWriter) coversObject(o *pendingObject) bool {
	shape := w.l.objectShape()
	for d, dp := range o.dims {
		inArray := min(shape[d], w.l.a.Shape[d]-o.coords[d]*shape[d])
		if dp.Start != 0 || (dp.Step != 1 && dp.Count > 1) || dp.Count != inArray {
			return false
		}
	}
	return true
}

func noop() {}

// materialize returns unit u of object o with every element received in
// memory: u itself if it is held, else read back from the spill log into
// new buffers, reserved (release gives them back). Overlaps among the
// pieces spilled are found here, before anything is written.
func (w *slabWriter) materialize(o *pendingObject, u *pendingUnit) (m *pendingUnit, release func(), err error) {
	if u.image < 0 && u.pieces < 0 {
		return u, noop, nil
	}
	l, s := w.l, w.spill
	n := l.unitElems()
	e := int64(l.elem)
	reserved := w.unitBytes()
	if err := w.mem.acquire(w.ctx, reserved, fmt.Sprintf("write %q: a chunk read back from the spill log", w.path)); err != nil {
		return nil, nil, err
	}
	giveBack := func() { w.mem.release(reserved) }
	defer func() {
		if err != nil {
			giveBack()
		}
	}()
	// Read buffers, given back when the unit is read.
	var tmp int64
	defer func() { w.mem.release(tmp) }()
	temp := func(k int64) error {
		if err := w.mem.acquire(w.ctx, k, fmt.Sprintf("write %q: a chunk read back from the spill log", w.path)); err != nil {
			return err
		}
		tmp += k
		return nil
	}
	more := func(k int64) error { // reserve k more bytes, kept until release
		if err := w.mem.acquire(w.ctx, k, fmt.Sprintf("write %q: a chunk read back from the spill log", w.path)); err != nil {
			return err
		}
		reserved += k
		return nil
	}
	m = &pendingUnit{seen: make([]uint64, (n+63)/64), image: -1, pieces: -1}
	if e > 0 {
		m.data = l.fill.newUnit(n * e)
	} else {
		m.vals = make([][]byte, n)
	}
	if u.image >= 0 {
		_, _, size, err := s.header(u.image)
		if err != nil {
			return nil, nil, err
		}
		pos := u.image + recHeader
		bm := int64(len(m.seen)) * 8
		if err := s.readAt(asBytes(m.seen), pos); err != nil {
			return nil, nil, err
		}
		rest := io.NewSectionReader(s.f, pos+bm, size-bm)
		if e > 0 {
			// Scatter the packed elements through a small buffer.
			rb := min(spillRecordBytes, max(16, size-bm))
			if err := temp(rb); err != nil {
				return nil, nil, err
			}
			br := bufio.NewReaderSize(rest, int(rb))
			err = eachSetErr(m.seen, func(i, j int64) error {
				_, err := io.ReadFull(br, m.data[i*e:j*e])
				return err
			})
		} else {
			if err := more(size - bm); err != nil {
				return nil, nil, err
			}
			buf := asBytes(make([]uint64, (size-bm+7)/8))[:size-bm] // aligned for the offsets
			if _, err = io.ReadFull(rest, buf); err == nil {
				var k int64
				for _, word := range m.seen {
					k += int64(bits.OnesCount64(word))
				}
				offs, vals := asInt64s(buf[:(k+1)*8]), buf[(k+1)*8:]
				c := 0
				eachSet(m.seen, func(i, j int64) {
					for ; i < j; i++ {
						m.vals[i] = vals[offs[c]:offs[c+1]:offs[c+1]]
						c++
					}
				})
			}
		}
		if err != nil {
			return nil, nil, spillErr("read the spill log", err)
		}
	}
	nd := len(l.unit)
	var scratch []uint64
	for off := u.pieces; off >= 0; {
		prev, _, size, err := s.header(off)
		if err != nil {
			return nil, nil, err
		}
		var payload []byte
		if e > 0 {
			if int64(len(scratch))*8 < size {
				if err := temp(size); err != nil {
					return nil, nil, err
				}
				scratch = make([]uint64, (size+7)/8)
			}
			payload = asBytes(scratch)[:size]
		} else {
			// Values stay in their payload: a buffer of its own.
			if err := more(size + 8); err != nil {
				return nil, nil, err
			}
			payload = asBytes(make([]uint64, (size+7)/8))[:size]
		}
		if err := s.readAt(payload, off+recHeader); err != nil {
			return nil, nil, err
		}
		hdr := asInt64s(payload[:24*nd])
		dst := view{shape: l.unit, start: make([]int64, nd), step: make([]int64, nd)}
		cnt := make([]int64, nd)
		for d := range nd {
			dst.start[d], dst.step[d], cnt[d] = hdr[3*d], hdr[3*d+1], hdr[3*d+2]
		}
		if markBox(m.seen, dst, cnt) > 0 {
			return nil, nil, errs.New(errs.InvalidArgument, "write %q: blocks overlap in chunk %q", w.path, o.key)
		}
		data := payload[24*nd:]
		if e > 0 {
			copyBox(m.data, dst, data, dense(cnt, make([]int64, nd)), cnt, int(e))
		} else {
			k := product(cnt)
			offs, vals := asInt64s(data[:(k+1)*8]), data[(k+1)*8:]
			c := 0
			eachIndex(dst, cnt, func(i int64) {
				m.vals[i] = vals[offs[c]:offs[c+1]:offs[c+1]]
				c++
			})
		}
		off = prev
	}
	return m, giveBack, nil
}

// unitChunk turns a pending unit into a decoded unit, merged over base
// (the stored unit, or fill) where the pending unit has no element. A
// buffer it allocates is reserved; release gives it back.
func (w *slabWriter) unitChunk(u *pendingUnit, base *chunk) (c chunk, release func(), err error) {
	l := w.l
	what := fmt.Sprintf("write %q: a merged chunk", w.path)
	if l.elem > 0 {
		if base == nil {
			return chunk{data: u.data}, noop, nil
		}
		size := int64(len(base.data))
		if err := w.mem.acquire(w.ctx, size, what); err != nil {
			return chunk{}, nil, err
		}
		out := slices.Clone(base.data)
		e := l.elem
		for wi, word := range u.seen {
			for word != 0 {
				i := wi*64 + bits.TrailingZeros64(word)
				copy(out[i*e:(i+1)*e], u.data[i*e:(i+1)*e])
				word &= word - 1
			}
		}
		return chunk{data: out}, func() { w.mem.release(size) }, nil
	}
	n := l.unitElems()
	has := func(i int64) bool { return u.seen[i/64]&(1<<(i%64)) != 0 }
	size := (n + 1) * 8
	for i := range n {
		switch {
		case has(i):
			size += int64(len(u.vals[i]))
		case base != nil:
			size += base.offsets[i+1] - base.offsets[i]
		default:
			size += int64(len(l.a.FillValue))
		}
	}
	if err := w.mem.acquire(w.ctx, size, what); err != nil {
		return chunk{}, nil, err
	}
	offs := make([]int64, n+1)
	data := make([]byte, 0, size-(n+1)*8)
	for i := range n {
		switch {
		case has(i):
			data = append(data, u.vals[i]...)
		case base != nil:
			data = append(data, base.data[base.offsets[i]:base.offsets[i+1]]...)
		default:
			data = append(data, l.a.FillValue...)
		}
		offs[i+1] = int64(len(data))
	}
	return chunk{data: data, offsets: offs}, func() { w.mem.release(size) }, nil
}

func (w *slabWriter) isFill(c chunk) bool {
	return w.l.fill.isFill(c, w.l.unitElems())
}

// encode encodes chunks, the outputs reserved (at a bound: the input and
// some codec overhead, then shrunk to what they are); release gives them
// back.
func (w *slabWriter) encode(o *pendingObject, chunks []chunk) ([][]byte, func(), error) {
	var in int64
	for _, c := range chunks {
		in += int64(len(c.data)) + int64(len(c.offsets))*8
	}
	bound := in + in/64 + 4096*int64(len(chunks))
	if err := w.mem.acquire(w.ctx, bound, fmt.Sprintf("write %q: encoded chunks", w.path)); err != nil {
		return nil, nil, err
	}
	enc, err := w.l.codec.encode(w.ctx, chunks)
	if err != nil {
		w.mem.release(bound)
		return nil, nil, fmt.Errorf("chunk %q: %w", o.key, err)
	}
	var out int64
	for _, b := range enc {
		out += int64(len(b))
	}
	kept := min(out, bound)
	w.mem.release(bound - kept)
	return enc, func() { w.mem.release(kept) }, nil
}

// decode decodes a stored unit, its output reserved (fixed size: the
// unit's size, before; variable length: what it came to, after).
func (w *slabWriter) decode(o *pendingObject, i int, stored []byte) (*chunk, func(), error) {
	what := fmt.Sprintf("write %q: a stored chunk decoded for a merge", w.path)
	var size int64
	if w.l.elem > 0 {
		size = w.l.unitElems() * int64(w.l.elem)
		if err := w.mem.acquire(w.ctx, size, what); err != nil {
			return nil, nil, err
		}
	}
	dec, err := w.l.codec.decode(w.ctx, [][]byte{stored})
	if err != nil {
		w.mem.release(size)
		if w.l.shard != nil {
			return nil, nil, fmt.Errorf("shard %q inner chunk %d: %w", o.key, i, err)
		}
		return nil, nil, fmt.Errorf("chunk %q: %w", o.key, err)
	}
	c := &dec[0]
	if w.l.elem == 0 {
		size = int64(len(c.data)) + int64(len(c.offsets))*8
		if err := w.mem.acquire(w.ctx, size, what); err != nil {
			return nil, nil, err
		}
	}
	return c, func() {
		if c.release != nil {
			c.release()
		}
		w.mem.release(size)
	}, nil
}

// writeWhole stores an object the selection covers whole, without reading
// it. A chunk of nothing but fill value is erased instead, as zarr-python
// does; so is a shard whose units all are.
func (w *slabWriter) writeWhole(o *pendingObject) error {
	ctx := w.ctx
	if w.l.shard == nil {
		m, release, err := w.materialize(o, o.units[0])
		if err != nil {
			return err
		}
		defer release()
		c, crelease, err := w.unitChunk(m, nil)
		if err != nil {
			return err
		}
		defer crelease()
		if w.isFill(c) {
			w.count(1, 0)
			return w.g.store.Erase(ctx, o.key, storesvc.Condition{})
		}
		enc, erelease, err := w.encode(o, []chunk{c})
		if err != nil {
			return err
		}
		defer erelease()
		if _, err := w.g.store.Set(ctx, o.key, bytes.NewReader(enc[0]), storesvc.Condition{}); err != nil {
			return err
		}
		w.count(1, int64(len(enc[0])))
		return nil
	}
	encoded := make([][]byte, w.l.shard.n)
	return w.storeShard(o, encoded, storesvc.Condition{})
}

// shardBatchBytes bounds the decoded units a shard's write encodes in one
// batch (units read back from the spill log are held only that long).
const shardBatchBytes = 16 << 20

// storeShard encodes the object's units into a shard whose other units
// are already encoded in encoded (nil: empty), and stores it under cond.
func (w *slabWriter) storeShard(o *pendingObject, encoded [][]byte, cond storesvc.Condition) error {
	ctx := w.ctx
	idxs := make([]int, 0, len(o.units))
	for i := range o.units {
		idxs = append(idxs, i)
	}
	slices.Sort(idxs)
	var keep []func() // encoded outputs, until the shard is stored
	defer func() {
		for _, f := range keep {
			f()
		}
	}()
	var batch []chunk
	var batchIdx []int
	var batchRel []func()
	var batchBytes int64
	encodeBatch := func() error {
		defer func() {
			for _, f := range batchRel {
				f()
			}
			batch, batchIdx, batchRel, batchBytes = batch[:0], batchIdx[:0], batchRel[:0], 0
		}()
		if len(batch) == 0 {
			return nil
		}
		enc, release, err := w.encode(o, batch)
		if err != nil {
			return fmt.Errorf("shard %q: %w", o.key, err)
		}
		keep = append(keep, release)
		for k, i := range batchIdx {
			encoded[i] = enc[k]
		}
		return nil
	}
	for _, i := range idxs {
		m, release, err := w.materialize(o, o.units[i])
		if err != nil {
			return err
		}
		var c chunk
		var crelease func()
		if encoded[i] != nil {
			// Merge over the stored unit.
			old, orelease, err := w.decode(o, i, encoded[i])
			if err != nil {
				release()
				return err
			}
			c, crelease, err = w.unitChunk(m, old)
			orelease()
			if err != nil {
				release()
				return err
			}
		} else if c, crelease, err = w.unitChunk(m, nil); err != nil {
			release()
			return err
		}
		if w.isFill(c) {
			encoded[i] = nil
			crelease()
			release()
			continue
		}
		batch, batchIdx = append(batch, c), append(batchIdx, i)
		batchRel = append(batchRel, crelease, release)
		batchBytes += int64(len(c.data))
		if batchBytes >= shardBatchBytes {
			if err := encodeBatch(); err != nil {
				return err
			}
		}
	}
	if err := encodeBatch(); err != nil {
		return err
	}
	if !slices.ContainsFunc(encoded, func(e []byte) bool { return e != nil }) {
		if cond.IfAbsent {
			return nil // nothing stored, nothing to store
		}
		w.count(1, 0)
		return w.g.store.Erase(ctx, o.key, storesvc.Condition{IfGenerationMatch: cond.IfGenerationMatch})
	}
	size := int64(64 + 16*len(encoded))
	for _, e := range encoded {
		size += int64(len(e))
	}
	if err := w.mem.acquire(ctx, size, fmt.Sprintf("write %q: a shard", w.path)); err != nil {
		return err
	}
	defer w.mem.release(size)
	shard, err := codec.Assemble(w.l.shard.index, encoded)
	if err != nil {
		return fmt.Errorf("shard %q: %w", o.key, err)
	}
	if _, err := w.g.store.Set(ctx, o.key, bytes.NewReader(shard), cond); err != nil {
		return err
	}
	w.count(1, int64(len(shard)))
	return nil
}

// readStored reads the stored object, its bytes reserved before they are
// read.
func (w *slabWriter) readStored(key string) (data []byte, gen string, release func(), err error) {
	obj, err := w.g.store.Get(w.ctx, key, storesvc.ByteRange{})
	if err != nil {
		return nil, "", nil, err
	}
	defer obj.Close()
	if err := w.mem.acquire(w.ctx, obj.Length, fmt.Sprintf("write %q: the stored %q read for a merge", w.path, key)); err != nil {
		return nil, "", nil, err
	}
	release = func() { w.mem.release(obj.Length) }
	data = make([]byte, obj.Length)
	if _, err := io.ReadFull(obj, data); err != nil {
		release()
		return nil, "", nil, fmt.Errorf("read %q: %w", key, err)
	}
	return data, obj.Generation, release, nil
}

// mergeInto read-modify-writes an object: it reads the stored chunk or
// shard with its generation, merges the received elements in, and writes
// it back only if the generation is unchanged, retrying otherwise (each
// attempt writes the same final content over what it read).
func (w *slabWriter) mergeInto(o *pendingObject) error {
	ctx := w.ctx
	for range w.g.cfg.MaxWriteAttempts {
		type read struct {
			data    []byte
			gen     string
			release func()
		}
		r, err := retry(ctx, func() (read, error) {
			data, gen, release, err := w.readStored(o.key)
			return read{data, gen, release}, err
		})
		data, gen := r.data, r.gen
		cond := storesvc.Condition{IfGenerationMatch: gen}
		if errors.Is(err, errs.NotFound) {
			data, cond = nil, storesvc.Condition{IfAbsent: true}
		} else if err != nil {
			return err
		}
		if w.l.shard == nil {
			err = w.mergeChunk(o, data, cond)
		} else {
			err = w.mergeShard(o, data, cond)
		}
		if r.release != nil {
			r.release()
		}
		// A conflict, or a write lost with its worker: read again and
		// merge again; the generation check makes the repeat safe.
		if !errors.Is(err, errs.FailedPrecondition) && !transient(err) {
			return err
		}
	}
	return errs.New(errs.Aborted, "write %q: %q kept changing under concurrent writers; gave up after %d attempts", w.path, o.key, w.g.cfg.MaxWriteAttempts)
}

func (w *slabWriter) mergeChunk(o *pendingObject, stored []byte, cond storesvc.Condition) error {
	ctx := w.ctx
	m, release, err := w.materialize(o, o.units[0])
	if err != nil {
		return err
	}
	defer release()
	// Without a stored chunk the unit's own buffer holds fill where no
	// block wrote.
	var base *chunk
	if stored != nil {
		dec, drelease, err := w.decode(o, 0, stored)
		if err != nil {
			return err
		}
		defer drelease()
		base = dec
	}
	c, crelease, err := w.unitChunk(m, base)
	if err != nil {
		return err
	}
	defer crelease()
	if w.isFill(c) {
		if cond.IfAbsent {
			return nil // nothing stored, nothing to store
		}
		w.count(1, 0)
		return w.g.store.Erase(ctx, o.key, cond)
	}
	enc, erelease, err := w.encode(o, []chunk{c})
	if err != nil {
		return err
	}
	defer erelease()
	if _, err := w.g.store.Set(ctx, o.key, bytes.NewReader(enc[0]), cond); err != nil {
		return err
	}
	w.count(1, int64(len(enc[0])))
	return nil
}

func (w *slabWriter) mergeShard(o *pendingObject, stored []byte, cond storesvc.Condition) error {
	encoded := make([][]byte, w.l.shard.n)
	if stored != nil {
		var err error
		if encoded, err = codec.Split(w.l.shard.index, stored); err != nil {
			return fmt.Errorf("shard %q: %w", o.key, err)
		}
	}
	return w.storeShard(o, encoded, cond)
}

// callMem is what one call has reserved from the budget: reservations
// are taken in granules and given back when well beyond use, so that the
// many small buffers of a write do not each cost a trip to the budget.
// Safe for concurrent use (the call's goroutine and its flush workers).
type callMem struct {
	b              *membudget.Budget
	mu             sync.Mutex
	rs             []membudget.Reservation
	reserved, used int64
}

const memGranule = 256 << 10

// try reserves n bytes if the call has them or the budget has them free
// now, without waiting.
func (m *callMem) try(n int64) bool {
	if n <= 0 {
		return true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.reserved-m.used >= n {
		m.used += n
		return true
	}
	short := n - (m.reserved - m.used)
	r, ok := m.b.TryAcquire(max(short, memGranule))
	if !ok {
		if r, ok = m.b.TryAcquire(short); !ok {
			return false
		}
	}
	m.rs = append(m.rs, r)
	m.reserved += r.Bytes()
	m.used += n
	return true
}

// acquire reserves n bytes, waiting as the budget allows.
func (m *callMem) acquire(ctx context.Context, n int64, what string) error {
	if m.try(n) {
		return nil
	}
	m.mu.Lock()
	short := n - (m.reserved - m.used)
	m.mu.Unlock()
	// Wait without the lock: releases by the call's other goroutines go on.
	r, err := m.b.Acquire(ctx, short, what)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.rs = append(m.rs, r)
	m.reserved += r.Bytes()
	m.used += n
	m.mu.Unlock()
	return nil
}

// release gives back n bytes reserved earlier.
func (m *callMem) release(n int64) {
	if n <= 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.used -= n
	for len(m.rs) > 0 && m.reserved-m.used > 2*memGranule {
		last := m.rs[len(m.rs)-1]
		excess := m.reserved - m.used - memGranule
		if last.Bytes() <= excess {
			last.Release()
			m.reserved -= last.Bytes()
			m.rs = m.rs[:len(m.rs)-1]
			continue
		}
		m.rs[len(m.rs)-1] = last.Shrink(last.Bytes() - excess)
		m.reserved -= excess
	}
}

// close gives everything back.
func (m *callMem) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.rs {
		r.Release()
	}
	m.rs, m.reserved, m.used = nil, 0, 0
}
