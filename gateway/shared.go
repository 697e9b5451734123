package gateway

import (
	"context"
	"log/slog"
	"sync/atomic"

	"github.com/zarrgate/zarrgate/internal/membudget"
	"github.com/zarrgate/zarrgate/internal/shm"
)

// maxIdleSegments is how many segments a gateway keeps for later calls.
const maxIdleSegments = 2

// SharedSegment is a shared-memory segment lent to one read, for a reader
// on this host that maps it: the read's BlockSink places block data in
// the segment's ring (Place, Alloc) instead of buffers of its own, the
// blocks are passed on in the order of their placements (InOrder), and
// the reader releases them in that order (Release). Which reader, and how
// offers, placements and releases travel, is the transport's business
// (ArrayService's ReadSlabShared); the segment knows none of it.
type SharedSegment struct {
	g     *Gateway
	seg   *shm.Segment
	res   membudget.Reservation // the segment's memory
	ring  *shm.Ring
	piece int64 // largest data one block puts in the ring

	// pending[i] is the block of allocation next+i if it has been placed
	// (Placed set) and waits for an earlier one. A slice, not a map:
	// Blocks are too large to be map values without an allocation each.
	pending []Block
	next    uint64 // the allocation to pass on next
}

// sharedWarned limits the warning about segments that cannot be created to
// one per process.
var sharedWarned atomic.Bool

// SharedSegment lends a segment to a call (an idle one, or a new one), or
// returns nil (blocks go inline) if shared memory is off, all segments are
// in use, or no segment can be made. The caller must Close it.
func (g *Gateway) SharedSegment() *SharedSegment {
	if !g.cfg.SharedMemory || !shm.Supported {
		return nil
	}
	select {
	case g.shared <- struct{}{}:
	default:
		return nil
	}
	// The segment used last: its client is the likeliest to have it
	// mapped still.
	var it idleSegment
	g.idleMu.Lock()
	if n := len(g.idle); n > 0 {
		it, g.idle = g.idle[n-1], g.idle[:n-1]
	}
	g.idleMu.Unlock()
	if it.seg == nil {
		// A new segment's memory comes from the budget; without it to
		// spare now, the blocks go inline (they are reserved as they come).
		size := (g.cfg.SharedMemoryBytes + 4095) &^ 4095
		res, ok := g.cfg.Budget.TryAcquireOffHeap(size)
		if !ok {
			<-g.shared
			return nil
		}
		seg, err := shm.Create(size)
		if err != nil {
			res.Release()
			<-g.shared
			if !sharedWarned.Swap(true) {
				slog.Warn("shared memory unavailable, sending blocks inline", "err", err)
			}
			return nil
		}
		it = idleSegment{seg: seg, res: res}
	}
	size := int64(len(it.seg.Data))
	return &SharedSegment{g: g, seg: it.seg, res: it.res, ring: shm.NewRing(shm.DataOffset, size), piece: (size - shm.DataOffset) / 4}
}

// Path is where the segment is, for a reader to map it (with Size and
// Token: shm.Attach).
func (o *SharedSegment) Path() string { return o.seg.Path }

// Size is the segment's size in bytes.
func (o *SharedSegment) Size() int64 { return int64(len(o.seg.Data)) }

// Token proves to a reader that the segment at Path is the one offered.
func (o *SharedSegment) Token() []byte { return o.seg.Token }

// Release frees the n oldest placements the reader is done with; more
// than are outstanding is an error.
func (o *SharedSegment) Release(n uint64) error { return o.ring.Release(n) }

// Fail ends the segment's use by this read: placements waiting for room,
// and Drained, fail with err.
func (o *SharedSegment) Fail(err error) { o.ring.Fail(err) }

// Drained waits until the reader has released every placement, so that
// the segment can serve a later call.
func (o *SharedSegment) Drained(ctx context.Context) error { return o.ring.Drained(ctx) }

// Pending is the number of placed blocks InOrder holds back, waiting for
// an earlier one: none once a read has passed all of its blocks on.
func (o *SharedSegment) Pending() int {
	n := 0
	for _, b := range o.pending {
		if b.Placed {
			n++
		}
	}
	return n
}

// Alloc returns n bytes of the ring for a whole chunk to be read into
// (nil if n is more than one block may take), and the tag that marks its
// block as placed there.
func (o *SharedSegment) Alloc(ctx context.Context, n int64) ([]byte, func(*Block), error) {
	if n > o.piece {
		return nil, nil, nil
	}
	off, seq, err := o.ring.Alloc(ctx, n)
	if err != nil {
		return nil, nil, err
	}
	return o.seg.Data[off : off+n], func(b *Block) {
		b.Data, b.Placed = nil, true
		b.Placement = Placement{Offset: off, Length: n, Seq: seq}
	}, nil
}

// TryAlloc returns n bytes of the ring and their offset in the segment,
// or ok false if they do not fit now (nothing waits for the reader's
// releases). The caller passes allocations on to the reader in the order
// they were made, for it to release them in that order.
func (o *SharedSegment) TryAlloc(n int64) (buf []byte, off int64, ok bool) {
	if n > o.piece {
		return nil, 0, false
	}
	off, _, ok = o.ring.TryAlloc(n)
	if !ok {
		return nil, 0, false
	}
	return o.seg.Data[off : off+n], off, true
}

// Place copies b's data into the ring, in pieces of at most a quarter of
// it, and pushes each piece on with its placement; b's buffer is recycled
// at once. Workers place their blocks in parallel.
func (o *SharedSegment) Place(ctx context.Context, b Block, elem int, push func(Block) error) error {
	err := SplitBlock(b, elem, o.piece, func(p Block) error {
		// The pieces own no buffer: b's is recycled below, once, whatever
		// becomes of them (a piece may be b itself when it needs no cut).
		p.release, p.held = nil, nil
		if len(p.Data) == 0 {
			return push(p) // nothing to place: an inline empty block
		}
		off, seq, err := o.ring.Alloc(ctx, int64(len(p.Data)))
		if err != nil {
			return err
		}
		copy(o.seg.Data[off:], p.Data)
		p.Placed, p.Placement = true, Placement{Offset: off, Length: int64(len(p.Data)), Seq: seq}
		p.Data = nil
		return push(p)
	})
	b.free()
	return err
}

// InOrder passes placed blocks to send in the order of their allocations
// (the order the reader releases them in), holding back those that
// overtook an earlier one; blocks not placed go at once. Calls must not
// overlap.
func (o *SharedSegment) InOrder(b Block, send func(Block) error) error {
	if !b.Placed {
		return send(b)
	}
	i := int(b.Placement.Seq - o.next) // allocations before next are sent
	for len(o.pending) <= i {
		o.pending = append(o.pending, Block{})
	}
	o.pending[i] = b
	k := 0 // blocks sent
	var err error
	for ; k < len(o.pending) && o.pending[k].Placed && err == nil; k++ {
		o.next++
		err = send(o.pending[k])
	}
	if k > 0 {
		// Those left to the front, keeping the array for later blocks.
		n := copy(o.pending, o.pending[k:])
		clear(o.pending[n:])
		o.pending = o.pending[:n]
	}
	return err
}

// Close ends the call's use of the segment: kept for a later call if
// reusable (no reader reads it any more) and fewer than two are idle,
// otherwise unmapped (a reader's mapping stays valid).
func (o *SharedSegment) Close(reusable bool) {
	o.g.idleMu.Lock()
	if reusable && len(o.g.idle) < maxIdleSegments {
		o.g.idle = append(o.g.idle, idleSegment{seg: o.seg, res: o.res})
	} else {
		o.seg.Close()
		o.res.Release()
	}
	o.g.idleMu.Unlock()
	<-o.g.shared
}
