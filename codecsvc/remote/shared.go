package remote

import (
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"unsafe"

	codecv1 "github.com/zarrgate/zarrgate/gen/zarrgate/codec/v1"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/internal/membudget"
	"github.com/zarrgate/zarrgate/internal/shm"
)

// Shared memory for codec workers on this host. Moving a 256 KiB chunk
// over a gRPC stream costs 126–198 µs of CPU each way even over loopback
// (docs/benchmarks.md, "The floor, and a third step"); a worker on the
// same host can instead read the encoded chunk from, and write its answer
// into, a memory file of the gateway's. Each Process stream to a worker
// reached over a unix socket or a loopback address is offered a segment
// of its own (SetSharedMemory's size, reserved against the memory budget
// off Go's heap); a worker that maps it and finds its token says so, and
// from then on each decode batch carries its encoded chunks as one region
// of the segment and, per chunk, an output region as large as the answer
// the gateway expects (the decoded chunk, or its selection). The worker
// answers with the length it wrote there; the chunk is lent to the caller
// in the segment (codec.Chunk.Release frees its region). What does not fit
// (the ring is full, variable-length data, an answer larger than its
// region) goes as bytes on the stream, as does everything on a stream
// whose worker declined the offer (another host behind a loopback proxy,
// another user, another PID namespace, shared memory off).
//
// Lifetimes: a batch's regions are freed only once its answer arrived
// (its result, its error, or its answer after a cancel: the worker writes
// into them until it answers), the output regions lent on with their
// chunks when those are released. A stream that ends with batches
// unanswered leaves their regions in use for good: the segment takes no
// more batches and is unmapped, and its memory released to the budget,
// once the last chunk lent from it is released (the worker's mapping may
// keep the pages until the worker's side of the stream ends too). A new
// stream gets a new segment.

// DefaultSharedMemoryBytes is the default size of one stream's segment:
// room for the batches a stream has in flight at once (growAt, 2, before
// another stream opens; each up to 16 MiB decoded, maxBatchBytes) for
// chunks that compress well, and for four batches of 16 chunks of 256 KiB
// with their encoded bytes; what does not fit goes on the stream.
const DefaultSharedMemoryBytes = 32 << 20

// SetSharedMemory has the client offer each Process stream to a worker on
// this host a shared-memory segment of size bytes (0: none, the default),
// reserved against b (nil: nothing counted). A stream whose segment
// cannot be reserved or made uses bytes. Call it before the first batch.
func (c *Client) SetSharedMemory(size int64, b *membudget.Budget) {
	c.sharedBytes = (size + 4095) &^ 4095
	c.sharedBudget = b
}

// StagedChunks is how many encoded chunks batches sent where Stage put
// them, without a copy.
func (c *Client) StagedChunks() uint64 { return c.stagedSent.Load() }

// SharedStreams is how many streams have a shared-memory segment their
// worker attached, and how many chunks were answered through one.
func (c *Client) SharedStreams() (streams, chunks uint64) {
	return c.sharedAttached.Load(), c.sharedChunks.Load()
}

// allShared reports whether the client has streams open and every one
// that takes batches has a segment its worker attached: then the next
// batch goes through shared memory (if its chunks fit), which the cost
// model prices lower (Auto).
func (c *Client) allShared() bool {
	if c.sharedBytes == 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, w := range c.workers {
		for _, s := range w.streams {
			if !s.usable() {
				continue
			}
			if s.shared.Load() == nil {
				return false
			}
			n++
		}
	}
	return n > 0
}

// sameHost reports whether a stream's peer is on this host: a unix
// socket, or a loopback address. (A loopback address may also be a proxy
// to another host: its worker then fails to open the segment and says
// so.)
func sameHost(a net.Addr) bool {
	switch a := a.(type) {
	case *net.UnixAddr:
		return true
	case *net.TCPAddr:
		return a.IP.IsLoopback()
	}
	return false
}

// sharedWarned limits the warning about segments that cannot be made to
// one per process.
var sharedWarned atomic.Bool

// sharedSeg is one stream's segment and the allocations in it.
type sharedSeg struct {
	seg  *shm.Segment
	res  membudget.Reservation
	ring *shm.Ring

	mu sync.Mutex
	// users are the stream (until it ends), placements under way and
	// lent chunks: the segment is unmapped when none is left.
	users int
	ended bool
	live  map[int64]uint64 // allocation offset → its sequence number
	done  map[uint64]bool  // freed, waiting for older allocations
	next  uint64           // allocations released to the ring so far
	// staged are the allocations lent to callers for encoded chunks
	// (Client.Stage), by offset.
	staged map[int64]*stagedBuf
}

// stagedBuf is an encoded chunk's allocation lent by Client.Stage: freed
// once its caller released it and every batch that sent it was answered.
type stagedBuf struct {
	off  int64
	refs atomic.Int32
	// abandoned: sent in a batch never answered (its stream broke), so
	// the worker may still read it: never freed (see regions.finish).
	abandoned atomic.Bool
}

// newSharedSeg makes a segment of size bytes reserved against b, or nil.
func newSharedSeg(size int64, b *membudget.Budget) *sharedSeg {
	if !shm.Supported || size <= shm.DataOffset {
		return nil
	}
	var res membudget.Reservation
	if b != nil {
		var ok bool
		if res, ok = b.TryAcquireOffHeap(size); !ok {
			return nil
		}
	}
	seg, err := shm.CreateSealed(size)
	if err != nil {
		res.Release()
		if !sharedWarned.Swap(true) {
			slog.Warn("shared memory for codec workers unavailable, sending chunks on the streams", "err", err)
		}
		return nil
	}
	return &sharedSeg{seg: seg, res: res, ring: shm.NewRing(shm.DataOffset, size), users: 1,
		live: make(map[int64]uint64), done: make(map[uint64]bool), staged: make(map[int64]*stagedBuf)}
}

// hold counts a user, unless the segment's stream ended.
func (s *sharedSeg) hold() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return false
	}
	s.users++
	return true
}

// drop ends a user; the last unmaps the segment and releases its memory.
func (s *sharedSeg) drop() {
	s.mu.Lock()
	s.users--
	last := s.users == 0
	s.mu.Unlock()
	if last {
		s.seg.Close()
		s.res.Release()
	}
}

// end is the stream's end: no more allocations; the stream's use ends.
func (s *sharedSeg) end() {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended = true
	s.mu.Unlock()
	s.ring.Fail(errSegmentEnded)
	s.drop()
}

var errSegmentEnded = &net.OpError{Op: "shared memory", Err: net.ErrClosed}

// alloc allocates n bytes (rounded up to a cache line), or returns -1.
func (s *sharedSeg) alloc(n int64) int64 {
	if n <= 0 {
		return -1
	}
	off, seq, ok := s.ring.TryAlloc((n + 63) &^ 63)
	if !ok {
		return -1
	}
	s.mu.Lock()
	s.live[off] = seq
	s.mu.Unlock()
	return off
}

// free frees the allocation at off; the ring gets back the oldest
// allocations once every one before them is free too.
func (s *sharedSeg) free(off int64) {
	if off < 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	seq, ok := s.live[off]
	if !ok {
		return
	}
	delete(s.live, off)
	s.done[seq] = true
	k := uint64(0)
	for s.done[s.next] {
		delete(s.done, s.next)
		s.next++
		k++
	}
	if k > 0 {
		s.ring.Release(k)
	}
}

var _ codec.Stager = (*Client)(nil)

// Stage implements codec.Stager: room for a batch's encoded chunks in the
// segment of one stream, the one with a segment and the fewest batches in
// flight (then the fewest allocations), for chunks its caller reads
// straight into it (a store in the gateway's process), which a batch on
// that stream then sends as regions instead of copying them in (place;
// do sends the batch on that stream while it takes batches). nil where
// no stream has a segment or its ring has no room.
func (c *Client) Stage(sizes []int64) ([][]byte, []func()) {
	if c.sharedBytes == 0 || len(sizes) == 0 {
		return nil, nil
	}
	var best *procStream
	least, fewest := 0, 0
	c.mu.Lock()
	for _, k := range c.order {
		for _, s := range c.workers[k].streams {
			seg := s.shared.Load()
			if seg == nil || !s.usable() {
				continue
			}
			k := s.inflight()
			seg.mu.Lock()
			n := len(seg.live)
			seg.mu.Unlock()
			if best == nil || k < least || (k == least && n < fewest) {
				best, least, fewest = s, k, n
			}
		}
	}
	c.mu.Unlock()
	if best == nil {
		return nil, nil
	}
	seg := best.shared.Load()
	bufs, release := make([][]byte, len(sizes)), make([]func(), len(sizes))
	for i, n := range sizes {
		if n <= 0 || !seg.hold() {
			continue
		}
		off := seg.alloc(n)
		if off < 0 {
			seg.drop()
			continue
		}
		b := &stagedBuf{off: off}
		b.refs.Store(1)
		seg.mu.Lock()
		seg.staged[off] = b
		seg.mu.Unlock()
		bufs[i], release[i] = seg.seg.Data[off:off+n:off+n], func() { seg.unstage(b) }
	}
	return bufs, release
}

// unstage ends one use of a staged allocation; the last frees it.
func (s *sharedSeg) unstage(b *stagedBuf) {
	if b.refs.Add(-1) != 0 {
		return
	}
	s.mu.Lock()
	delete(s.staged, b.off)
	s.mu.Unlock()
	if !b.abandoned.Load() {
		s.free(b.off)
	}
	s.drop()
}

// testHookStagedAt, if set (by tests only), runs in stagedAt between
// reading a staged allocation's count of uses and adding the batch's.
var testHookStagedAt func(*stagedBuf)

// stagedAt returns the staged allocation e starts, holding it for a
// batch, or nil if e is not one of this segment's.
func (s *sharedSeg) stagedAt(e []byte) *stagedBuf {
	if len(e) == 0 {
		return nil
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(s.seg.Data)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(e)))
	if p < base || p-base >= uintptr(len(s.seg.Data)) || int(p-base)+len(e) > len(s.seg.Data) {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.staged[int64(p-base)]
	if b == nil {
		return nil
	}
	// Its caller may release it meanwhile (unstage does not take s.mu
	// to count down): a use is added only while one is left, never to
	// an allocation on its way to be freed.
	for {
		n := b.refs.Load()
		if n <= 0 {
			return nil
		}
		if testHookStagedAt != nil {
			testHookStagedAt(b)
		}
		if b.refs.CompareAndSwap(n, n+1) {
			return b
		}
	}
}

// stagedStream returns the stream whose segment holds the first staged
// encoded chunk of d, if any.
func (c *Client) stagedStream(d *codecv1.DecodeRequest) *procStream {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range d.GetEncoded() {
		if len(e) == 0 {
			continue
		}
		p := uintptr(unsafe.Pointer(unsafe.SliceData(e)))
		for _, w := range c.workers {
			for _, s := range w.streams {
				seg := s.shared.Load()
				if seg == nil {
					continue
				}
				base := uintptr(unsafe.Pointer(unsafe.SliceData(seg.seg.Data)))
				if p >= base && p-base < uintptr(len(seg.seg.Data)) {
					return s
				}
			}
		}
	}
	return nil
}

// regions are a batch's allocations in its stream's segment. They hold
// the segment mapped until finish: from place until the batch's answer
// is dealt with, or the batch is abandoned with its stream.
type regions struct {
	s       *sharedSeg
	in      int64        // the encoded chunks' span, -1: sent as bytes
	staged  []*stagedBuf // staged encoded chunks the batch sends in place
	outs    []int64      // per chunk, -1: none
	lens    []int64      // per chunk, the output region's length
	encoded [][]byte     // the request's encoded chunks before place
	// mu orders the answer's receive (freeIn) and the stream's failure
	// (finish), which a caller waiting on both may run at once.
	mu       sync.Mutex
	finished bool
}

// place gives a decode batch its regions: output regions of outSizes
// (0: none) and, if every encoded chunk fits, the encoded chunks copied
// into one span. nil if no output region could be placed (or the stream
// ended): the batch goes as bytes.
func (s *sharedSeg) place(req *codecv1.DecodeRequest, outSizes []int64) *regions {
	if !s.hold() {
		return nil
	}
	r := &regions{s: s, in: -1, outs: make([]int64, len(outSizes)), lens: outSizes, encoded: req.GetEncoded()}
	placed := false
	for i, n := range outSizes {
		r.outs[i] = s.alloc(n)
		placed = placed || r.outs[i] >= 0
	}
	if !placed {
		s.drop()
		return nil
	}
	if enc := req.GetEncoded(); len(enc) > 0 && len(req.GetRefs()) == 0 {
		// Chunks staged in this segment (Client.Stage) go where they
		// are; the others are copied into one span.
		shared := make([]*codecv1.SharedRegion, len(enc))
		var total int64
		for i, e := range enc {
			if b := s.stagedAt(e); b != nil {
				r.staged = append(r.staged, b)
				shared[i] = &codecv1.SharedRegion{Offset: uint64(b.off), Length: uint64(len(e))}
				continue
			}
			total += int64(len(e))
		}
		ok := true
		if total > 0 {
			if r.in = s.alloc(total); r.in >= 0 {
				off := r.in
				for i, e := range enc {
					if shared[i] != nil {
						continue
					}
					copy(s.seg.Data[off:], e)
					shared[i] = &codecv1.SharedRegion{Offset: uint64(off), Length: uint64(len(e))}
					off += int64(len(e))
				}
			} else {
				ok = false
			}
		}
		if ok {
			req.Encoded, req.SharedEncoded = nil, shared
		} else {
			// The rest does not fit: every chunk goes as bytes.
			r.unstage()
		}
	}
	req.Outputs = make([]*codecv1.SharedRegion, len(outSizes))
	for i, off := range r.outs {
		req.Outputs[i] = &codecv1.SharedRegion{}
		if off >= 0 {
			req.Outputs[i].Offset, req.Outputs[i].Length = uint64(off), uint64(outSizes[i])
		}
	}
	return r
}

// freeIn frees the encoded chunks' span, and ends the batch's use of
// the staged chunks it sent: the batch was answered.
func (r *regions) freeIn() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.freeInLocked()
}

func (r *regions) freeInLocked() {
	r.s.free(r.in)
	r.in = -1
	r.unstageLocked()
}

// unstage ends the batch's use of the staged chunks it sent.
func (r *regions) unstage() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unstageLocked()
}

func (r *regions) unstageLocked() {
	for _, b := range r.staged {
		r.s.unstage(b)
	}
	r.staged = nil
}

// inPlace reports whether the batch's encoded chunks are all in the
// segment (a span copied in, or staged).
func (r *regions) inPlace() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.in >= 0 || len(r.staged) > 0
}

// done frees a batch's regions not lent on, its answer dealt with, and
// ends its hold on the segment.
func (r *regions) done() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.freeInLocked()
	for i, off := range r.outs {
		r.s.free(off)
		r.outs[i] = -1
	}
	r.finishLocked()
}

// finish ends the regions' hold on the segment without freeing them (an
// abandoned batch: the worker may still write into them); at most once.
func (r *regions) finish() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.finishLocked()
}

func (r *regions) finishLocked() {
	if !r.finished {
		r.finished = true
		for _, b := range r.staged {
			b.abandoned.Store(true)
			r.s.unstage(b)
		}
		r.staged = nil
		r.s.drop()
	}
}

// lend returns chunk i of the answer, n bytes in its output region, lent
// to the caller: its Release frees the region. ok is false if the batch
// had no region for it or n does not fit (the worker's answer is wrong).
// Only before done or finish.
func (r *regions) lend(i int, n uint64) (codec.Chunk, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.finished || i >= len(r.outs) || r.outs[i] < 0 || n > uint64(r.lens[i]) {
		return codec.Chunk{}, false
	}
	off, s := r.outs[i], r.s
	r.outs[i] = -1
	s.mu.Lock()
	s.users++ // the regions' hold keeps the segment mapped now
	s.mu.Unlock()
	data := s.seg.Data[off : off+int64(n) : off+int64(n)]
	return codec.Lend(data, nil, nil, func([]byte) { s.free(off); s.drop() }), true
}
