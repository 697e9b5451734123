package arrayserver

import (
	"context"
	"errors"
	"io"
	"math"
	"time"

	"google.golang.org/grpc"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/gateway"
	"github.com/zarrgate/zarrgate/internal/grpcerr"
	"github.com/zarrgate/zarrgate/internal/wire"
)

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
	var slabElems int64
	sink := &sharedSink{} // its segment set once the client has attached it
	reusable := false
	defer func() {
		if sink.o != nil {
			sink.o.Close(reusable)
		}
	}()
	send := func(b gateway.Block) error {
		return stream.Send(&gatewayv1.ReadSlabSharedResponse{Message: &gatewayv1.ReadSlabSharedResponse_Block{Block: placedProto(b)}})
	}
	defer func() {
		if sink.dest != nil {
			sink.dest.Close()
		}
	}()
	err = s.g.ReadSlabTo(ctx, req.GetPath(), sel, func(info gateway.SlabInfo) error {
		elem = info.DataType.Size
		slabElems = 1
		for _, n := range info.Shape {
			slabElems *= n
		}
		h := slabHeader(info)
		if dst := first.GetDestination(); dst != nil {
			// The client's memory, checked (its own sealed memory file,
			// holding its token) before a byte is written; refused, the
			// read goes on as without it, saying why.
			size := int64(min(dst.GetSize(), uint64(math.MaxInt64)))
			d, err := s.g.OpenDestination(info, int(dst.GetPid()), int(dst.GetFd()), size, dst.GetToken())
			if err != nil {
				h.Destination = &gatewayv1.SharedDestinationAnswer{Reason: err.Error()}
			} else {
				h.Destination = &gatewayv1.SharedDestinationAnswer{Accepted: true}
				sink.dest = d
				return stream.Send(&gatewayv1.ReadSlabSharedResponse{Message: &gatewayv1.ReadSlabSharedResponse_Header{Header: h}})
			}
		}
		seg := s.g.SharedSegment()
		if seg != nil {
			h.SharedSegment = &gatewayv1.SharedSegment{Path: seg.Path(), Size: uint64(seg.Size()), Token: seg.Token()}
		}
		if err := stream.Send(&gatewayv1.ReadSlabSharedResponse{Message: &gatewayv1.ReadSlabSharedResponse_Header{Header: h}}); err != nil || seg == nil {
			if seg != nil {
				seg.Close(true)
			}
			return err
		}
		msg, err := stream.Recv()
		switch {
		case err != nil:
			seg.Close(false)
			return err
		case msg.GetAttach() == nil:
			seg.Close(false)
			return errs.New(errs.InvalidArgument, "read_slab_shared %q: the second message must answer the segment offer (attach)", req.GetPath())
		case !msg.GetAttach().GetAttached():
			seg.Close(true) // not used: blocks go inline
			return nil
		}
		sink.o, sink.elem = seg, elem
		go receive(seg, stream, cancel)
		return nil
	}, sink, func(b gateway.Block) error {
		if sink.dest != nil { // written in place: nothing to send
			b.Free()
			return nil
		}
		if sink.o == nil {
			return sendInline(b, elem, func(pb *gatewayv1.Block, done func()) error {
				return wire.Send(stream, &gatewayv1.ReadSlabSharedResponse{Message: &gatewayv1.ReadSlabSharedResponse_Block{Block: pb}}, done)
			})
		}
		return sink.o.InOrder(b, send)
	})
	if d := sink.dest; err == nil && d != nil {
		if d.Written() != slabElems {
			err = errs.New(errs.Internal, "read_slab_shared %q: %d of the slab's %d elements were written to the destination", req.GetPath(), d.Written(), slabElems)
		} else {
			err = stream.Send(&gatewayv1.ReadSlabSharedResponse{Message: &gatewayv1.ReadSlabSharedResponse_End{End: &gatewayv1.SlabEnd{DestinationElements: uint64(slabElems)}}})
		}
	}
	if out := sink.o; err == nil && out != nil && out.Pending() > 0 {
		err = errs.New(errs.Internal, "read_slab_shared %q: %d placed blocks were never sent", req.GetPath(), out.Pending())
	}
	if out := sink.o; err == nil && out != nil {
		// All blocks are sent: once the client has released them, the
		// segment can serve a later call.
		if err = stream.Send(&gatewayv1.ReadSlabSharedResponse{Message: &gatewayv1.ReadSlabSharedResponse_End{End: &gatewayv1.SlabEnd{}}}); err == nil {
			dctx, dcancel := context.WithTimeout(ctx, drainWait)
			reusable = out.Drained(dctx) == nil
			dcancel()
		}
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		err = cause // the client broke the protocol: say how
	}
	return grpcerr.ToStatus(err)
}

// placedProto is b's wire form: its range of the segment if placed there,
// its data inline if not (an empty block).
func placedProto(b gateway.Block) *gatewayv1.Block {
	pb := blockProto(b)
	if b.Placed {
		pb.Shared = &gatewayv1.SharedRange{Offset: uint64(b.Placement.Offset), Length: uint64(b.Placement.Length)}
	}
	return pb
}

// receive takes the client's releases until the call ends. A release of
// more blocks than are outstanding, or another kind of message, ends the
// call with InvalidArgument.
func receive(o *gateway.SharedSegment, stream grpc.BidiStreamingServer[gatewayv1.ReadSlabSharedRequest, gatewayv1.ReadSlabSharedResponse], cancel context.CancelCauseFunc) {
	for {
		msg, err := stream.Recv()
		if err != nil {
			if err == io.EOF {
				err = errs.New(errs.FailedPrecondition, "read_slab_shared: the client closed its side before the read ended; shared blocks can no longer be released")
			}
			o.Fail(err)
			return
		}
		rel := msg.GetRelease()
		if rel == nil {
			err = errs.New(errs.InvalidArgument, "read_slab_shared: after the attach answer only releases may follow")
		} else if e := o.Release(rel.GetBlocks()); e != nil {
			err = errs.Wrap(errs.InvalidArgument, e, "read_slab_shared")
		}
		if err != nil {
			o.Fail(err)
			cancel(err)
			return
		}
	}
}

// sharedSink is ReadSlabShared's gateway.BlockSink: the client's
// destination once accepted (dest set), or the segment once the client
// has attached it (o set), a pass-through before or without.
type sharedSink struct {
	dest *gateway.Destination
	o    *gateway.SharedSegment
	elem int
}

func (s *sharedSink) Place(ctx context.Context, b gateway.Block, push func(gateway.Block) error) error {
	if s.dest != nil {
		return s.dest.Place(ctx, b, push)
	}
	if s.o == nil || b.Placed { // inline, or read in place
		return push(b)
	}
	return s.o.Place(ctx, b, s.elem, push)
}

// Rows implements gateway.RowSink: the destination's, if there is one.
func (s *sharedSink) Rows(origin, shape []int64, vecs [][]byte) ([][]byte, func(), error) {
	if s.dest == nil {
		return nil, nil, nil
	}
	return s.dest.Rows(origin, shape, vecs)
}

func (s *sharedSink) Alloc(ctx context.Context, n int64) ([]byte, func(*gateway.Block), error) {
	if s.o == nil {
		return nil, nil, nil
	}
	return s.o.Alloc(ctx, n)
}
