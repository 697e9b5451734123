package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"slices"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/bufpool"
	"github.com/zarrgate/zarrgate/storesvc"
)

// Flushing a WriteSlab's complete objects: each chunk or shard written
// once, whole or read-modify-written under its generation.

// flush hands a complete object to a flush worker, which writes it once,
// and drops it from the pending objects.
func (w *slabWriter) flush(o *pendingObject) error {
	if w.objects[o.idx] != o {
		return nil // flushed already
	}
	if w.done == nil {
		words := (w.proj.NumChunks() + 63) / 64
		if err := w.acquire(words*8, "write bookkeeping"); err != nil {
			return err
		}
		o.book += words * 8 // released with this object; the map stays
		w.done = make([]uint64, words)
	}
	// The flush's memory is reserved here, all at once, so that the flush
	// never waits for the budget holding the object's units (see acquire),
	// and last, so that the call waits for nothing holding it.
	if err := w.reserveFlush(o); err != nil {
		return err
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
	w.done[o.idx/64] |= 1 << (o.idx % 64)
	if o.spilled {
		// The worker reads the object's records back.
		if err := w.spill.sync(); err != nil {
			return err
		}
	}
	w.inflight.Add(1)
	w.flushGroup.Go(func() (err error) {
		defer func() { w.finished(o, err == nil && !o.storeFailed) }()
		if w.coversObject(o) {
			err := w.writeWhole(o)
			if !transient(err) {
				return err
			}
			// The write may or may not have landed: only a write
			// conditioned on what is stored now is safe to repeat, and
			// that repeat is a retry like any other (budget, backoff).
			if err := again(w.ctx, w.g.cfg.StoreRetries, 1, err); err != nil {
				return err
			}
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

// reserveFlush reserves what flushing o takes at most (flushReserve):
// at once if the budget has it, else once the call's flushes in flight
// have finished (they give their memory back without waiting for any),
// else after spilling every unit held in memory, o's own included (the
// bound is computed again: a spilled unit is read back), and giving back
// the call's slack; only then it waits, holding no unit it could spill.
func (w *slabWriter) reserveFlush(o *pendingObject) error {
	for {
		need := w.flushReserve(o)
		if w.mem.try(need) {
			o.mem = flushMem{size: need, left: need}
			return nil
		}
		if ok, err := w.awaitFlush(); err != nil {
			return err
		} else if ok {
			continue
		}
		spilled, err := w.spillUntil(0)
		if err != nil {
			return err
		}
		if spilled {
			continue
		}
		w.mem.trim()
		if err := w.mem.acquire(w.ctx, need, fmt.Sprintf("write %q: the flush of %q", w.path, o.key)); err != nil {
			return err
		}
		o.mem = flushMem{size: need, left: need}
		return nil
	}
}

// flushReserve bounds what flushing o allocates: units read back from the
// spill log (a shard's in batches) and their read buffers, merged and
// decoded units, the encoded outputs (at encode's bound), a shard's
// assembly, and for a merge the stored object, at the bound of what this
// array's codecs write for it. Exact bounds for fixed-size types; for
// variable-length ones the values are estimated (varElemBytes each), and
// a flush that needs more takes it as it goes (flushMem).
func (w *slabWriter) flushReserve(o *pendingObject) int64 {
	l := w.l
	data := l.unitElems() * int64(l.elem) // a unit decoded
	if l.elem == 0 {
		data = l.unitElems() * varElemBytes
	}
	enc := data + data/64 + 4096 // encode's bound for one unit
	spilled := false
	for _, u := range o.units {
		spilled = spilled || !u.inMemory()
	}
	n := int64(len(o.units))
	merge := !w.coversObject(o)
	read := w.unitBytes() // a unit read back
	if l.elem == 0 {
		read += data // its values
	}
	// materialize's read buffers: an image's, and a piece's (a record
	// holds at most a unit's data, and a piece at most a scratch buffer's).
	rec := min(int64(spillScratchWords(l))*8, w.unitBytes()) + 8
	temp := 2*rec + 24*int64(len(l.unit)) + 16
	var chunk int64 // a merged unit (or a variable-length one assembled)
	if merge || l.elem == 0 {
		chunk = data
	}
	var decoded, stored int64 // for a merge: the stored unit decoded, the stored object
	if merge {
		decoded, stored = data, enc
	}
	if !spilled {
		read, temp = 0, 0
	}
	// The steps' peak: what is held throughout (the stored object, the
	// unit read back), and then either the read buffers (given back once
	// the unit is read) or the decoded, merged and encoded unit.
	if l.shard == nil {
		return stored + read + max(temp, decoded+chunk+enc)
	}
	all := int64(l.shard.n)
	index := 64 + 16*all
	if merge {
		stored = all*enc + index
	}
	// A shard's units go in batches: each unit of a batch is held read
	// back and merged until the batch is encoded, and the unit at hand
	// has its read buffers or its decoded stored unit besides; the encoded
	// outputs are kept until the shard is assembled, which copies them and
	// the stored units kept.
	batch := min(n, shardBatchBytes/max(data, 1)+1)
	units := batch*(read+chunk) + max(temp, decoded)
	return stored + n*enc + max(units, index+stored+n*enc)
}

// finished gives back the memory of a flushed object, and its pooled unit
// buffers once it is stored (stored: nothing uses them any more; after a
// failure a codec or store call abandoned on its context might, and they
// are left to the garbage collector).
func (w *slabWriter) finished(o *pendingObject, stored bool) {
	var n int64
	for _, u := range o.units {
		n += u.bytes
		switch {
		case u.pooled && stored:
			recycleBuffer(u.data)
		case u.adopted != nil && stored:
			u.adopted()
		}
		u.bytes, u.seen, u.data, u.vals, u.pooled, u.adopted = 0, nil, nil, nil, false, nil
	}
	w.held.Add(-n - o.flushCost)
	w.mem.release(n + o.book + o.mem.size + o.mem.extra)
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
	what := fmt.Sprintf("write %q: a chunk read back from the spill log", w.path)
	reserved := w.unitBytes()
	if err := w.take(o, reserved, what); err != nil {
		return nil, nil, err
	}
	giveBack := func() { w.give(o, reserved) }
	defer func() {
		if err != nil {
			giveBack()
		}
	}()
	// Read buffers, given back when the unit is read.
	var tmp int64
	defer func() { w.give(o, tmp) }()
	temp := func(k int64) error {
		if err := w.take(o, k, what); err != nil {
			return err
		}
		tmp += k
		return nil
	}
	more := func(k int64) error { // reserve k more bytes, kept until release
		if err := w.take(o, k, what); err != nil {
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
				// The smaller scratch buffer is dropped.
				w.give(o, int64(len(scratch))*8)
				tmp -= int64(len(scratch)) * 8
				if err := temp((size + 7) / 8 * 8); err != nil {
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
func (w *slabWriter) unitChunk(o *pendingObject, u *pendingUnit, base *chunk) (c chunk, release func(), err error) {
	l := w.l
	what := fmt.Sprintf("write %q: a merged chunk", w.path)
	if l.elem > 0 {
		if base == nil {
			return chunk{data: u.data}, noop, nil
		}
		size := int64(len(base.data))
		if err := w.take(o, size, what); err != nil {
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
		return chunk{data: out}, func() { w.give(o, size) }, nil
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
	if err := w.take(o, size, what); err != nil {
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
	return chunk{data: data, offsets: offs}, func() { w.give(o, size) }, nil
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
	if err := w.take(o, bound, fmt.Sprintf("write %q: encoded chunks", w.path)); err != nil {
		return nil, nil, err
	}
	enc, err := w.l.codec.encode(w.ctx, chunks)
	if err != nil {
		w.give(o, bound)
		return nil, nil, fmt.Errorf("chunk %q: %w", o.key, err)
	}
	var out int64
	for _, b := range enc {
		out += int64(len(b))
	}
	kept := min(out, bound)
	w.give(o, bound-kept)
	return enc, func() { w.give(o, kept) }, nil
}

// set stores an object's value under cond. A store call that fails may
// still be reading the value (an HTTP transport abandoned on its context
// goes on sending the body): then none of the object's buffers is
// recycled (storeFailed), not even after a later attempt succeeds.
func (w *slabWriter) set(o *pendingObject, value []byte, cond storesvc.Condition) error {
	_, err := w.g.store.Set(w.ctx, o.key, bytes.NewReader(value), cond)
	if err != nil {
		o.storeFailed = true
	}
	return err
}

// recycle hands an encoded chunk back to internal/bufpool once it is
// stored, when the engine says its results are the caller's own
// (codecsvc.Local.EncodesOwned) and enc is not the input c itself (a chain
// without compression returns it). Only after a store call that succeeded:
// one that failed may still be reading the value (an HTTP transport
// abandoned on its context).
func (w *slabWriter) recycle(enc []byte, c chunk) {
	if w.l.codec.ownsEncodes() && !bufpool.Overlaps(enc, c.data) {
		recycleBuffer(enc)
	}
}

// decode decodes a stored unit, its output reserved (fixed size: the
// unit's size, before; variable length: what it came to, after).
func (w *slabWriter) decode(o *pendingObject, i int, stored []byte) (*chunk, func(), error) {
	what := fmt.Sprintf("write %q: a stored chunk decoded for a merge", w.path)
	var size int64
	if w.l.elem > 0 {
		size = w.l.unitElems() * int64(w.l.elem)
		if err := w.take(o, size, what); err != nil {
			return nil, nil, err
		}
	}
	dec, err := w.l.codec.decode(w.ctx, [][]byte{stored})
	if err != nil {
		w.give(o, size)
		if w.l.shard != nil {
			return nil, nil, fmt.Errorf("shard %q inner chunk %d: %w", o.key, i, err)
		}
		return nil, nil, fmt.Errorf("chunk %q: %w", o.key, err)
	}
	c := &dec[0]
	if w.l.elem == 0 {
		size = int64(len(c.data)) + int64(len(c.offsets))*8
		if err := w.take(o, size, what); err != nil {
			return nil, nil, err
		}
	}
	return c, func() {
		if c.release != nil {
			c.release()
		}
		w.give(o, size)
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
		c, crelease, err := w.unitChunk(o, m, nil)
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
		w.g.cfg.StoreRetries.Request()
		if err := w.set(o, enc[0], storesvc.Condition{}); err != nil {
			return err
		}
		w.count(1, int64(len(enc[0])))
		w.recycle(enc[0], c)
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
	type made struct {
		enc []byte
		in  chunk
	}
	var mine []made // encoded here, recycled once the shard is stored
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
			mine = append(mine, made{enc[k], batch[k]})
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
			c, crelease, err = w.unitChunk(o, m, old)
			orelease()
			if err != nil {
				release()
				return err
			}
		} else if c, crelease, err = w.unitChunk(o, m, nil); err != nil {
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
	if err := w.take(o, size, fmt.Sprintf("write %q: a shard", w.path)); err != nil {
		return err
	}
	defer w.give(o, size)
	shard, err := codec.Assemble(w.l.shard.index, encoded)
	if err != nil {
		return fmt.Errorf("shard %q: %w", o.key, err)
	}
	if err := w.set(o, shard, cond); err != nil {
		return err
	}
	w.count(1, int64(len(shard)))
	for _, m := range mine {
		w.recycle(m.enc, m.in)
	}
	return nil
}

// readStored reads the stored object, its bytes reserved before they are
// read.
func (w *slabWriter) readStored(o *pendingObject) (data []byte, gen string, release func(), err error) {
	key := o.key
	obj, err := w.g.store.Get(w.ctx, key, storesvc.ByteRange{})
	if err != nil {
		return nil, "", nil, err
	}
	defer obj.Close()
	if err := w.take(o, obj.Length, fmt.Sprintf("write %q: the stored %q read for a merge", w.path, key)); err != nil {
		return nil, "", nil, err
	}
	release = func() { w.give(o, obj.Length) }
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
	// Conflicts with other writers are not failures: they are retried up
	// to MaxWriteAttempts without a budget. A write lost with its worker
	// is a failure: its repeat is a retry of the store tier (budget,
	// backoff, attempts), so the two kinds never multiply.
	lost := 0
	for range w.g.cfg.MaxWriteAttempts {
		type read struct {
			data    []byte
			gen     string
			release func()
		}
		r, err := retry(ctx, w.g.cfg.StoreRetries, func() (read, error) {
			data, gen, release, err := w.readStored(o)
			return read{data, gen, release}, err
		})
		data, gen := r.data, r.gen
		cond := storesvc.Condition{IfGenerationMatch: gen}
		if errors.Is(err, errs.NotFound) {
			data, cond = nil, storesvc.Condition{IfAbsent: true}
		} else if err != nil {
			return err
		}
		w.g.cfg.StoreRetries.Request() // the conditional write
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
		if errors.Is(err, errs.FailedPrecondition) {
			w.g.stats.WriteConflicts.Add(1)
			continue
		}
		if !transient(err) {
			return err
		}
		lost++
		if err := again(ctx, w.g.cfg.StoreRetries, lost, err); err != nil {
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
	c, crelease, err := w.unitChunk(o, m, base)
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
	if err := w.set(o, enc[0], cond); err != nil {
		return err
	}
	w.count(1, int64(len(enc[0])))
	w.recycle(enc[0], c)
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
