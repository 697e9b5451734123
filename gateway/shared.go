package gateway

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/grpcerr"
	"github.com/zarrgate/zarrgate/internal/membudget"
	"github.com/zarrgate/zarrgate/internal/shm"
	"github.com/zarrgate/zarrgate/internal/wire"
)

// maxIdleSegments is how many segments a gateway keeps for later calls.
const maxIdleSegments = 2

// drainWait bounds how long a call waits, after its last block, for the
// client to release the segment; a segment not released in time is
// dropped rather than lent to a later call.
const drainWait = 10 * time.Second

// ReadSlabShared implements gatewayv1.ArrayServiceServer: ReadSlab with
// block data in a shared-memory segment for clients on this host.
func (s *Server) ReadSlabShared(stream grpc.BidiStreamingServer[gatewayv1.ReadSlabSharedRequest, gatewayv1.ReadSlabSharedResponse]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	req := first.GetRead()
	if req == nil {
		return grpcerr.ToStatus(errs.New(errs.InvalidArgument, "read_slab_shared: the first message must be the read (path and selection)"))
	}
	sel, err := SelectionFromProto(req.GetSelection())
	if err != nil {
		return grpcerr.ToStatus(err)
	}
	ctx, cancel := context.WithCancelCause(stream.Context())
	defer cancel(nil)
	var elem int
	sink := &sharedSink{} // its segment set once the client has attached it
	reusable := false
	defer func() {
		if sink.o != nil {
			sink.o.close(reusable)
		}
	}()
	send := func(pb *gatewayv1.Block) error {
		return stream.Send(&gatewayv1.ReadSlabSharedResponse{Message: &gatewayv1.ReadSlabSharedResponse_Block{Block: pb}})
	}
	err = s.g.readSlab(ctx, req.GetPath(), sel, func(info SlabInfo) error {
		elem = info.DataType.Size
		h := slabHeader(info)
		seg := s.g.sharedSegment()
		if seg != nil {
			h.SharedSegment = &gatewayv1.SharedSegment{Path: seg.seg.Path, Size: uint64(len(seg.seg.Data)), Token: seg.seg.Token}
		}
		if err := stream.Send(&gatewayv1.ReadSlabSharedResponse{Message: &gatewayv1.ReadSlabSharedResponse_Header{Header: h}}); err != nil || seg == nil {
			if seg != nil {
				seg.close(true)
			}
			return err
		}
		msg, err := stream.Recv()
		switch {
		case err != nil:
			seg.close(false)
			return err
		case msg.GetAttach() == nil:
			seg.close(false)
			return errs.New(errs.InvalidArgument, "read_slab_shared %q: the second message must answer the segment offer (attach)", req.GetPath())
		case !msg.GetAttach().GetAttached():
			seg.close(true) // not used: blocks go inline
			return nil
		}
		seg.pending = map[uint64]Block{}
		sink.o, sink.elem = seg, elem
		go seg.receive(stream, cancel)
		return nil
	}, sink, func(b Block) error {
		if sink.o == nil {
			return sendInline(b, elem, func(pb *gatewayv1.Block, done func()) error {
				return wire.Send(stream, &gatewayv1.ReadSlabSharedResponse{Message: &gatewayv1.ReadSlabSharedResponse_Block{Block: pb}}, done)
			})
		}
		return sink.o.send(b, send)
	})
	if out := sink.o; err == nil && out != nil && len(out.pending) > 0 {
		err = errs.New(errs.Internal, "read_slab_shared %q: %d placed blocks were never sent", req.GetPath(), len(out.pending))
	}
	if out := sink.o; err == nil && out != nil {
		// All blocks are sent: once the client has released them, the
		// segment can serve a later call.
		if err = stream.Send(&gatewayv1.ReadSlabSharedResponse{Message: &gatewayv1.ReadSlabSharedResponse_End{End: &gatewayv1.SlabEnd{}}}); err == nil {
			dctx, dcancel := context.WithTimeout(ctx, drainWait)
			reusable = out.ring.Drained(dctx) == nil
			dcancel()
		}
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		err = cause // the client broke the protocol: say how
	}
	return grpcerr.ToStatus(err)
}

// sharedOut is the gateway's side of one ReadSlabShared call's segment.
type sharedOut struct {
	g     *Gateway
	seg   *shm.Segment
	res   membudget.Reservation // the segment's memory
	ring  *shm.Ring
	piece int64 // largest data one block puts in the ring

	pending map[uint64]Block // placed, waiting for an earlier allocation
	next    uint64           // the allocation to send next
}

// sharedWarned limits the warning about segments that cannot be created to
// one per process.
var sharedWarned atomic.Bool

// sharedSegment lends a segment to a call (an idle one, or a new one), or
// returns nil (blocks go inline) if shared memory is off, all segments are
// in use, or no segment can be made.
func (g *Gateway) sharedSegment() *sharedOut {
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
	return &sharedOut{g: g, seg: it.seg, res: it.res, ring: shm.NewRing(shm.DataOffset, size), piece: (size - shm.DataOffset) / 4}
}

// receive takes the client's releases until the call ends. A release of
// more blocks than are outstanding, or another kind of message, ends the
// call with InvalidArgument.
func (o *sharedOut) receive(stream grpc.BidiStreamingServer[gatewayv1.ReadSlabSharedRequest, gatewayv1.ReadSlabSharedResponse], cancel context.CancelCauseFunc) {
	for {
		msg, err := stream.Recv()
		if err != nil {
			if err == io.EOF {
				err = errs.New(errs.FailedPrecondition, "read_slab_shared: the client closed its side before the read ended; shared blocks can no longer be released")
			}
			o.ring.Fail(err)
			return
		}
		rel := msg.GetRelease()
		if rel == nil {
			err = errs.New(errs.InvalidArgument, "read_slab_shared: after the attach answer only releases may follow")
		} else if e := o.ring.Release(rel.GetBlocks()); e != nil {
			err = errs.Wrap(errs.InvalidArgument, e, "read_slab_shared")
		}
		if err != nil {
			o.ring.Fail(err)
			cancel(err)
			return
		}
	}
}

// sharedSink is ReadSlabShared's blockSink: the segment once the client
// has attached it (o set), a pass-through before or without.
type sharedSink struct {
	o    *sharedOut
	elem int
}

func (s *sharedSink) place(ctx context.Context, b Block, push func(Block) error) error {
	if s.o == nil || b.shared != nil { // inline, or read in place
		return push(b)
	}
	return s.o.place(ctx, b, s.elem, push)
}

func (s *sharedSink) alloc(ctx context.Context, n int64) ([]byte, func(*Block), error) {
	if s.o == nil || n > s.o.piece {
		return nil, nil, nil
	}
	off, seq, err := s.o.ring.Alloc(ctx, n)
	if err != nil {
		return nil, nil, err
	}
	return s.o.seg.Data[off : off+n], func(b *Block) {
		b.Data, b.seq = nil, seq
		b.shared = &gatewayv1.SharedRange{Offset: uint64(off), Length: uint64(n)}
	}, nil
}

// place copies b's data into the ring, in pieces of at most a quarter of
// it, and pushes each piece on with its range; b's buffer is recycled at
// once. Workers place their blocks in parallel.
func (o *sharedOut) place(ctx context.Context, b Block, elem int, push func(Block) error) error {
	err := splitBlock(b, elem, o.piece, func(p Block) error {
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
		p.shared = &gatewayv1.SharedRange{Offset: uint64(off), Length: uint64(len(p.Data))}
		p.Data, p.seq = nil, seq
		return push(p)
	})
	b.free()
	return err
}

// send sends placed blocks in the order of their allocations (the order
// the client releases them in), holding back those that overtook an
// earlier one; empty blocks go at once.
func (o *sharedOut) send(b Block, send func(*gatewayv1.Block) error) error {
	if b.shared == nil {
		return send(blockProto(b))
	}
	o.pending[b.seq] = b
	for {
		p, ok := o.pending[o.next]
		if !ok {
			return nil
		}
		delete(o.pending, o.next)
		o.next++
		pb := blockProto(p)
		pb.Shared = p.shared
		if err := send(pb); err != nil {
			return err
		}
	}
}

// close ends the call's use of the segment: kept for a later call if
// reusable (no client reads it any more) and fewer than two are idle,
// otherwise unmapped (a client's mapping stays valid).
func (o *sharedOut) close(reusable bool) {
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
