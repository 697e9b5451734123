package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"slices"
	"sort"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/zarrgate/zarrgate/errs"
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
// wrong byte length or overlapping another is InvalidArgument naming it, as
// is a stream that ends before the selection is covered.
//
// Chunks (or shards) the selection covers whole are encoded and written
// without a read. Partly covered ones are read, merged and written back
// conditioned on the generation read, and retried on conflict, so that
// concurrent writers of disjoint regions of one chunk or shard, through
// this gateway or others on the same store, lose nothing.
//
// While the decoded data held stays under Config.WriteBufferBytes, nothing
// is written before the whole stream has arrived and been checked: a bad
// stream writes nothing. A larger write streams: each chunk is written as
// soon as its part of the selection is complete (or, if memory runs short,
// merged into the store early), so a bad block late in such a stream leaves
// the chunks completed before it written, each of them atomically.
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
	w := &slabWriter{g: g, l: l, proj: proj, objects: make(map[string]*pendingObject), path: path}
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(g.cfg.Parallelism)
	w.flushGroup, w.ctx = eg, ectx
	err = w.run(next)
	if err != nil {
		eg.Wait()
		g.dropCaches(l)
		return w.stats(), err
	}
	err = eg.Wait()
	g.dropCaches(l)
	if err != nil {
		return w.stats(), fmt.Errorf("write %q: %w", path, err)
	}
	return w.stats(), nil
}

func (g *Gateway) dropCaches(l *layout) { g.index.drop(l.prefix) }

// slabWriter holds the state of one WriteSlab.
type slabWriter struct {
	g       *Gateway
	l       *layout
	proj    *zarr.Projection
	path    string
	objects map[string]*pendingObject
	held    int64 // decoded bytes held in unit buffers
	covered int64 // elements received
	// streaming is set once the write no longer fits the buffer: complete
	// objects are then flushed at once.
	streaming  bool
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

// pendingObject is a chunk or shard some blocks have written into.
type pendingObject struct {
	key    string
	coords []int64
	dims   []zarr.DimProjection // the selection's projection onto it
	// units are the decode units the selection touches, by their index in
	// the object (0 for an unsharded chunk), with their projections.
	units map[int]*pendingUnit
	// inner is the projection onto a shard's units (nil when unsharded).
	inner *zarr.Projection
	need  int64 // selected elements in the object
	got   int64 // elements received
	done  bool  // flushed complete
	// partlyFlushed is set once some of its elements were merged into the
	// store early; later flushes must merge too.
	partlyFlushed bool
}

// pendingUnit holds the received elements of one unit.
type pendingUnit struct {
	dims []zarr.DimProjection
	// seen marks every element received, to catch overlaps; dirty the ones
	// not yet stored.
	seen, dirty []uint64
	data        []byte   // fixed size: the unit, fill where not dirty
	vals        [][]byte // variable length: element values
}

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
		if w.held > w.g.cfg.WriteBufferBytes {
			w.streaming = true
			if err := w.relieve(); err != nil {
				return err
			}
		}
	}
	if w.covered != total {
		return errs.New(errs.InvalidArgument, "write %q: the blocks cover %d of the %d selected elements; nothing more was written", w.path, w.covered, total)
	}
	for _, o := range w.sortedObjects() {
		if !o.done {
			w.flush(o, true)
		}
	}
	return nil
}

func (w *slabWriter) sortedObjects() []*pendingObject {
	out := make([]*pendingObject, 0, len(w.objects))
	for _, o := range w.objects {
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out
}

// checkBlock validates a block's geometry and byte length.
func (w *slabWriter) checkBlock(b Block) error {
	nd := len(w.proj.Shape)
	if len(b.Origin) != nd || len(b.Shape) != nd {
		return errs.New(errs.InvalidArgument, "write %q: block at %v has %d/%d origin/shape dimensions, the selection %d", w.path, b.Origin, len(b.Origin), len(b.Shape), nd)
	}
	for d := range nd {
		if b.Origin[d] < 0 || b.Shape[d] < 0 || b.Origin[d]+b.Shape[d] > w.proj.Shape[d] {
			return errs.New(errs.InvalidArgument, "write %q: block at %v with shape %v lies outside the selection's shape %v (dimension %d)", w.path, b.Origin, b.Shape, w.proj.Shape, d)
		}
	}
	n := product(b.Shape)
	if w.l.elem > 0 {
		if int64(len(b.Data)) != n*int64(w.l.elem) {
			return errs.New(errs.InvalidArgument, "write %q: block at %v with shape %v has %d bytes, want %d (%d elements of %d bytes)", w.path, b.Origin, b.Shape, len(b.Data), n*int64(w.l.elem), n, w.l.elem)
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
	return nil
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
		o := w.object(dims)
		err = w.placeInObject(o, b)
		if err == nil && o.got == o.need && w.streaming {
			w.flush(o, true)
		}
		return err == nil
	})
	return err
}

// object returns the pending object the projections dims belong to.
func (w *slabWriter) object(dims []zarr.DimProjection) *pendingObject {
	coords := make([]int64, len(dims))
	for d, dp := range dims {
		coords[d] = dp.Chunk
	}
	key := w.l.key(coords)
	if o, ok := w.objects[key]; ok {
		return o
	}
	o := &pendingObject{key: key, coords: coords, dims: clone(dims), units: make(map[int]*pendingUnit), need: 1}
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
	w.objects[key] = o
	return o
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

// placeInUnit copies the intersection of block b and unit projection dims.
func (w *slabWriter) placeInUnit(o *pendingObject, idx int, dims []zarr.DimProjection, b Block) error {
	l := w.l
	u := o.units[idx]
	if u == nil {
		u = &pendingUnit{dims: clone(dims)}
		o.units[idx] = u
		words := (l.unitElems() + 63) / 64
		u.seen = make([]uint64, words)
	}
	if u.dirty == nil {
		u.dirty = make([]uint64, len(u.seen))
		if l.elem > 0 {
			u.data = l.fill.newUnit(l.unitElems() * int64(l.elem))
			w.held += int64(len(u.data))
		} else {
			u.vals = make([][]byte, l.unitElems())
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
	if ov := markBox(u.seen, dst, count); ov > 0 {
		return errs.New(errs.InvalidArgument, "write %q: block at %v with shape %v overlaps elements already written by another block", w.path, b.Origin, b.Shape)
	}
	markBox(u.dirty, dst, count)
	if l.elem > 0 {
		copyBox(u.data, dst, b.Data, src, count, l.elem)
	} else {
		var dstIdx []int64
		eachIndex(dst, count, func(i int64) { dstIdx = append(dstIdx, i) })
		k := 0
		eachIndex(src, count, func(i int64) {
			v := b.Data[b.Offsets[i]:b.Offsets[i+1]]
			u.vals[dstIdx[k]] = v
			w.held += int64(len(v)) + 24
			k++
		})
	}
	n := product(count)
	o.got += n
	w.covered += n
	return nil
}

// relieve brings the held memory under the limit: complete objects first,
// then the largest incomplete ones, merged into the store early.
func (w *slabWriter) relieve() error {
	objs := w.sortedObjects()
	for _, o := range objs {
		if !o.done && o.got == o.need {
			w.flush(o, true)
		}
	}
	if w.held <= w.g.cfg.WriteBufferBytes/2 {
		return nil
	}
	sort.Slice(objs, func(i, j int) bool { return objs[i].got > objs[j].got })
	for _, o := range objs {
		if w.held <= w.g.cfg.WriteBufferBytes/2 {
			break
		}
		if !o.done && o.got > 0 {
			w.flush(o, false)
		}
	}
	return nil
}

// flush hands an object's dirty units to a flush worker and releases them.
// complete says whether the object has received all its elements.
func (w *slabWriter) flush(o *pendingObject, complete bool) {
	units := make(map[int]*pendingUnit, len(o.units))
	for i, u := range o.units {
		if u.dirty == nil {
			continue
		}
		units[i] = &pendingUnit{dims: u.dims, dirty: u.dirty, data: u.data, vals: u.vals}
		if u.data != nil {
			w.held -= int64(len(u.data))
		}
		for _, v := range u.vals {
			if v != nil {
				w.held -= int64(len(v)) + 24
			}
		}
		u.dirty, u.data, u.vals = nil, nil, nil
	}
	if complete {
		o.done = true
	}
	if len(units) == 0 {
		return // everything was merged into the store already
	}
	whole := complete && !o.partlyFlushed && w.coversObject(o)
	o.partlyFlushed = o.partlyFlushed || !complete
	w.flushGroup.Go(func() error {
		if whole {
			err := w.writeWhole(o, units)
			if !transient(err) {
				return err
			}
			// The write may or may not have landed: only a write
			// conditioned on what is stored now is safe to repeat.
		}
		return w.mergeInto(o, units)
	})
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

// unitChunk turns a pending unit into a decoded unit, merged over base
// (the stored unit, or fill) where the pending unit is not dirty.
func (w *slabWriter) unitChunk(u *pendingUnit, base *chunk) chunk {
	l := w.l
	if l.elem > 0 {
		if base == nil {
			return chunk{data: u.data}
		}
		out := slices.Clone(base.data)
		e := l.elem
		for wi, word := range u.dirty {
			for word != 0 {
				i := wi*64 + bits.TrailingZeros64(word)
				copy(out[i*e:(i+1)*e], u.data[i*e:(i+1)*e])
				word &= word - 1
			}
		}
		return chunk{data: out}
	}
	n := l.unitElems()
	offs := make([]int64, n+1)
	var data []byte
	for i := int64(0); i < n; i++ {
		switch {
		case u.dirty[i/64]&(1<<(i%64)) != 0:
			data = append(data, u.vals[i]...)
		case base != nil:
			data = append(data, base.data[base.offsets[i]:base.offsets[i+1]]...)
		default:
			data = append(data, l.a.FillValue...)
		}
		offs[i+1] = int64(len(data))
	}
	return chunk{data: data, offsets: offs}
}

func (w *slabWriter) isFill(c chunk) bool {
	return w.l.fill.isFill(c, w.l.unitElems())
}

// writeWhole stores an object the selection covers whole, without reading
// it. A chunk of nothing but fill value is erased instead, as zarr-python
// does; so is a shard whose units all are.
func (w *slabWriter) writeWhole(o *pendingObject, units map[int]*pendingUnit) error {
	ctx := w.ctx
	if w.l.shard == nil {
		c := w.unitChunk(units[0], nil)
		if w.isFill(c) {
			w.count(1, 0)
			return w.g.store.Erase(ctx, o.key, storesvc.Condition{})
		}
		enc, err := w.l.codec.encode(ctx, []chunk{c})
		if err != nil {
			return fmt.Errorf("chunk %q: %w", o.key, err)
		}
		if _, err := w.g.store.Set(ctx, o.key, bytes.NewReader(enc[0]), storesvc.Condition{}); err != nil {
			return err
		}
		w.count(1, int64(len(enc[0])))
		return nil
	}
	encoded := make([][]byte, w.l.shard.n)
	return w.storeShard(o, units, encoded, storesvc.Condition{})
}

// storeShard encodes the given units into a shard whose other units are
// already encoded in encoded (nil: empty), and stores it under cond.
func (w *slabWriter) storeShard(o *pendingObject, units map[int]*pendingUnit, encoded [][]byte, cond storesvc.Condition) error {
	ctx := w.ctx
	var idxs []int
	var chunks []chunk
	for i, u := range units {
		c := w.unitChunk(u, nil)
		if encoded[i] != nil {
			// Merge over the stored unit.
			old, err := w.l.codec.decode(ctx, [][]byte{encoded[i]})
			if err != nil {
				return fmt.Errorf("shard %q inner chunk %d: %w", o.key, i, err)
			}
			c = w.unitChunk(u, &old[0])
		}
		if w.isFill(c) {
			encoded[i] = nil
			continue
		}
		idxs = append(idxs, i)
		chunks = append(chunks, c)
	}
	enc, err := w.l.codec.encode(ctx, chunks)
	if err != nil {
		return fmt.Errorf("shard %q: %w", o.key, err)
	}
	for k, i := range idxs {
		encoded[i] = enc[k]
	}
	shard, empty, err := w.buildShard(encoded)
	if err != nil {
		return fmt.Errorf("shard %q: %w", o.key, err)
	}
	if empty {
		if cond.IfAbsent {
			return nil // nothing stored, nothing to store
		}
		w.count(1, 0)
		return w.g.store.Erase(ctx, o.key, storesvc.Condition{IfGenerationMatch: cond.IfGenerationMatch})
	}
	if _, err := w.g.store.Set(ctx, o.key, bytes.NewReader(shard), cond); err != nil {
		return err
	}
	w.count(1, int64(len(shard)))
	return nil
}

// buildShard lays out encoded units (nil: empty) and the index; a shard
// with no units is not built (empty reports it).
func (w *slabWriter) buildShard(encoded [][]byte) (shard []byte, empty bool, err error) {
	if !slices.ContainsFunc(encoded, func(e []byte) bool { return e != nil }) {
		return nil, true, nil
	}
	shard, err = w.l.shard.index.Assemble(encoded)
	return shard, false, err
}

// mergeInto read-modify-writes an object: it reads the stored chunk or
// shard with its generation, merges the dirty elements in, and writes it
// back only if the generation is unchanged, retrying otherwise.
func (w *slabWriter) mergeInto(o *pendingObject, units map[int]*pendingUnit) error {
	ctx := w.ctx
	for range w.g.cfg.MaxWriteAttempts {
		r, err := retry(ctx, func() (read, error) {
			data, gen, err := storesvc.ReadAll(ctx, w.g.store, o.key)
			return read{data, gen}, err
		})
		data, gen := r.data, r.gen
		cond := storesvc.Condition{IfGenerationMatch: gen}
		if errors.Is(err, errs.NotFound) {
			data, cond = nil, storesvc.Condition{IfAbsent: true}
		} else if err != nil {
			return err
		}
		if w.l.shard == nil {
			err = w.mergeChunk(o, units[0], data, cond)
		} else {
			err = w.mergeShard(o, units, data, cond)
		}
		// A conflict, or a write lost with its worker: read again and
		// merge again; the generation check makes the repeat safe.
		if !errors.Is(err, errs.FailedPrecondition) && !transient(err) {
			return err
		}
	}
	return errs.New(errs.Aborted, "write %q: %q kept changing under concurrent writers; gave up after %d attempts", w.path, o.key, w.g.cfg.MaxWriteAttempts)
}

func (w *slabWriter) mergeChunk(o *pendingObject, u *pendingUnit, stored []byte, cond storesvc.Condition) error {
	ctx := w.ctx
	// Without a stored chunk the unit's own buffer holds fill where no
	// block wrote.
	var base *chunk
	if stored != nil {
		dec, err := w.l.codec.decode(ctx, [][]byte{stored})
		if err != nil {
			return fmt.Errorf("chunk %q: %w", o.key, err)
		}
		base = &dec[0]
	}
	c := w.unitChunk(u, base)
	if w.isFill(c) {
		if cond.IfAbsent {
			return nil // nothing stored, nothing to store
		}
		w.count(1, 0)
		return w.g.store.Erase(ctx, o.key, cond)
	}
	enc, err := w.l.codec.encode(ctx, []chunk{c})
	if err != nil {
		return fmt.Errorf("chunk %q: %w", o.key, err)
	}
	if _, err := w.g.store.Set(ctx, o.key, bytes.NewReader(enc[0]), cond); err != nil {
		return err
	}
	w.count(1, int64(len(enc[0])))
	return nil
}

func (w *slabWriter) mergeShard(o *pendingObject, units map[int]*pendingUnit, stored []byte, cond storesvc.Condition) error {
	encoded := make([][]byte, w.l.shard.n)
	if stored != nil {
		var err error
		if encoded, err = w.l.shard.index.Split(stored); err != nil {
			return fmt.Errorf("shard %q: %w", o.key, err)
		}
	}
	return w.storeShard(o, units, encoded, cond)
}
