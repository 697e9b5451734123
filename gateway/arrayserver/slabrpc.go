package arrayserver

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"

	"google.golang.org/grpc"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/gateway"
	"github.com/zarrgate/zarrgate/internal/bufpool"
	"github.com/zarrgate/zarrgate/internal/grpcerr"
	"github.com/zarrgate/zarrgate/internal/membudget"
	"github.com/zarrgate/zarrgate/internal/wire"
	"github.com/zarrgate/zarrgate/zarr"
)

// maxBlockBytes is the largest block data one response carries; larger
// blocks are split along their outer dimensions.
const maxBlockBytes = 1 << 20

// SelectionFromProto converts a wire selection: an empty one is nil (the
// whole array), a step of 0 means 1.
func SelectionFromProto(sel []*gatewayv1.Slice) ([]zarr.Range, error) {
	if len(sel) == 0 {
		return nil, nil
	}
	if len(sel) > zarr.MaxDims {
		return nil, errs.New(errs.InvalidArgument, "selection: %d dimensions, more than any array has (%d)", len(sel), zarr.MaxDims)
	}
	out := make([]zarr.Range, len(sel))
	for d, s := range sel {
		if s.GetStart() > 1<<62 || s.GetStop() > 1<<62 || s.GetStep() > 1<<62 {
			return nil, errs.New(errs.InvalidArgument, "selection dimension %d: value too large", d)
		}
		step := int64(s.GetStep())
		if step == 0 {
			step = 1
		}
		out[d] = zarr.Range{Start: int64(s.GetStart()), Stop: int64(s.GetStop()), Step: step}
	}
	return out, nil
}

// ReadSlab implements gatewayv1.ArrayServiceServer. A request asking for
// bulk, to a server with a bulk listener, gets an offer in its header and
// its blocks over the bulk connection (readSlabBulk).
func (s *Server) ReadSlab(req *gatewayv1.ReadSlabRequest, stream grpc.ServerStreamingServer[gatewayv1.ReadSlabResponse]) error {
	sel, err := SelectionFromProto(req.GetSelection())
	if err != nil {
		return grpcerr.ToStatus(err)
	}
	if req.GetBulk() && s.bulk != nil {
		return s.readSlabBulk(req, sel, stream)
	}
	var elem int
	err = s.g.ReadSlabTo(stream.Context(), req.GetPath(), sel, func(info gateway.SlabInfo) error {
		elem = info.DataType.Size
		return stream.Send(&gatewayv1.ReadSlabResponse{Message: &gatewayv1.ReadSlabResponse_Header{Header: slabHeader(info)}})
	}, nil, func(b gateway.Block) error {
		return sendInline(b, elem, func(pb *gatewayv1.Block, done func()) error {
			return wire.Send(stream, &gatewayv1.ReadSlabResponse{Message: &gatewayv1.ReadSlabResponse_Block{Block: pb}}, done)
		})
	})
	return grpcerr.ToStatus(err)
}

// MaxSmallSlabBytes is the largest slab ReadSlabSmall returns: elements
// times element size, or for variable-length types the blocks' bytes and
// 8 bytes per offset.
const MaxSmallSlabBytes = 1 << 20

// ReadSlabSmall implements gatewayv1.ArrayServiceServer: ReadSlab in one
// unary call, for small slabs. The blocks are copied into the response
// (at most MaxSmallSlabBytes, reserved against the memory budget twice
// over, for the copies and for gRPC's encoding of them, until the
// handler returns and gRPC encodes the response), and each engine block
// is freed as soon as it is copied.
func (s *Server) ReadSlabSmall(ctx context.Context, req *gatewayv1.ReadSlabSmallRequest) (*gatewayv1.ReadSlabSmallResponse, error) {
	sel, err := SelectionFromProto(req.GetSelection())
	if err != nil {
		return nil, grpcerr.ToStatus(err)
	}
	budget := s.g.Budget()
	var held []membudget.Reservation
	defer func() {
		for _, r := range held {
			r.Release()
		}
	}()
	reserve := func(n int64) error {
		r, err := budget.Acquire(ctx, 2*n, fmt.Sprintf("the response of a small read of %q", req.GetPath()))
		if err == nil {
			held = append(held, r)
		}
		return err
	}
	tooLarge := func(n int64) error {
		return errs.New(errs.ResourceExhausted, "read_slab_small %q: the slab has %d bytes or more, more than ReadSlabSmall returns (%d); read it with ReadSlab", req.GetPath(), n, MaxSmallSlabBytes)
	}
	resp := &gatewayv1.ReadSlabSmallResponse{}
	var elem int
	var total int64 // variable-length types: bytes in the response so far
	err = s.g.ReadSlabTo(ctx, req.GetPath(), sel, func(info gateway.SlabInfo) error {
		elem = info.DataType.Size
		if elem > 0 {
			n := int64(elem)
			for _, d := range info.Shape {
				if d > 0 && n > MaxSmallSlabBytes/d {
					return tooLarge(MaxSmallSlabBytes + 1)
				}
				n *= d
			}
			if n > MaxSmallSlabBytes {
				return tooLarge(n)
			}
			if err := reserve(n); err != nil {
				return err
			}
		}
		resp.Header = slabHeader(info)
		return nil
	}, nil, func(b gateway.Block) error {
		defer b.Free()
		if elem == 0 {
			n := int64(len(b.Data)) + 8*int64(len(b.Offsets))
			if total += n; total > MaxSmallSlabBytes {
				return tooLarge(total)
			}
			// The read holds its batches' memory here: take more only if
			// it is free now, never wait for it while holding some (two
			// such reads could wait on each other); refused, the client
			// reads with ReadSlab.
			r, ok := budget.TryAcquire(2 * n)
			if !ok {
				return errs.New(errs.ResourceExhausted, "read_slab_small %q: no memory free now for the response's %d bytes of strings; read it with ReadSlab", req.GetPath(), n)
			}
			held = append(held, r)
		}
		pb := blockProto(b)
		pb.Data = bytes.Clone(b.Data)
		resp.Blocks = append(resp.Blocks, pb)
		return nil
	})
	if err != nil {
		return nil, grpcerr.ToStatus(err)
	}
	return resp, nil
}

// slabHeader is info's wire form.
func slabHeader(info gateway.SlabInfo) *gatewayv1.SlabHeader {
	return &gatewayv1.SlabHeader{Shape: u64s(info.Shape), DataType: info.DataType.Name,
		ByteOrder: byteOrderProto(info.ByteOrder), ElementSize: uint32(info.DataType.Size)}
}

// byteOrderProto is o's wire form.
func byteOrderProto(o gateway.ByteOrder) gatewayv1.ByteOrder {
	if o == gateway.LittleEndian {
		return gatewayv1.ByteOrder_BYTE_ORDER_LITTLE_ENDIAN
	}
	return gatewayv1.ByteOrder_BYTE_ORDER_UNSPECIFIED
}

// sendInline sends a block with its data in the message, split into
// pieces of at most maxBlockBytes. Block data is never modified once
// emitted (its own buffer or the cached fill value), so send may pass it to
// gRPC by reference; send calls done once gRPC has written it, and a pooled
// buffer is recycled when every piece is written.
func sendInline(b gateway.Block, elem int, send func(pb *gatewayv1.Block, done func()) error) error {
	refs := bufpool.NewRefs(1, b.Free)
	err := gateway.SplitBlock(b, elem, maxBlockBytes, func(p gateway.Block) error {
		refs.Hold()
		return send(blockProto(p), refs.Release)
	})
	if err == nil {
		refs.Release()
	}
	return err
}

// blockProto is b's wire form, data inline.
func blockProto(b gateway.Block) *gatewayv1.Block {
	pb := &gatewayv1.Block{Origin: u64s(b.Origin), Shape: u64s(b.Shape), Data: b.Data}
	if b.Offsets != nil {
		pb.Offsets = u64s(b.Offsets)
	}
	return pb
}

// WriteSlab implements gatewayv1.ArrayServiceServer.
func (s *Server) WriteSlab(stream grpc.ClientStreamingServer[gatewayv1.WriteSlabRequest, gatewayv1.WriteSlabResponse]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	h := first.GetHeader()
	if h == nil {
		return grpcerr.ToStatus(errs.New(errs.InvalidArgument, "write_slab: the first message must be the header (path and selection)"))
	}
	sel, err := SelectionFromProto(h.GetSelection())
	if err != nil {
		return grpcerr.ToStatus(err)
	}
	// Blocks are received into pooled buffers (with wire's codec), which
	// WriteSlab hands back once it has copied their elements out.
	pooled := wire.HasCodec(stream.Context())
	next := func() (gateway.Block, error) {
		msg := new(gatewayv1.WriteSlabRequest)
		in := &wire.Pooled{Msg: msg}
		var err error
		if pooled {
			err = stream.RecvMsg(in)
		} else {
			err = stream.RecvMsg(msg)
		}
		if err == io.EOF {
			return gateway.Block{}, io.EOF
		}
		if err != nil {
			return gateway.Block{}, err
		}
		pb := msg.GetBlock()
		if pb == nil {
			return gateway.Block{}, errs.New(errs.InvalidArgument, "write_slab %q: only the first message may be a header", h.GetPath())
		}
		b := gateway.Block{Data: pb.GetData()}
		if buf := in.Buf; buf != nil {
			b = b.WithRelease(func() { bufpool.Put(buf) })
		}
		if b.Origin, err = i64s(pb.GetOrigin()); err != nil {
			return gateway.Block{}, err
		}
		if b.Shape, err = i64s(pb.GetShape()); err != nil {
			return gateway.Block{}, err
		}
		if len(pb.GetOffsets()) > 0 {
			if b.Offsets, err = i64s(pb.GetOffsets()); err != nil {
				return gateway.Block{}, err
			}
		}
		return b, nil
	}
	st, err := s.g.WriteSlab(stream.Context(), h.GetPath(), sel, next)
	if err != nil {
		return grpcerr.ToStatus(err)
	}
	return stream.SendAndClose(&gatewayv1.WriteSlabResponse{ChunksWritten: uint64(st.Objects), BytesWritten: uint64(st.Bytes)})
}

// WriteSlabShared implements gatewayv1.ArrayServiceServer: a slab written
// from the client's memory on this host (Gateway.WriteSlabShared), or
// refused with the reason, nothing written.
func (s *Server) WriteSlabShared(ctx context.Context, req *gatewayv1.WriteSlabSharedRequest) (*gatewayv1.WriteSlabSharedResponse, error) {
	sel, err := SelectionFromProto(req.GetSelection())
	if err != nil {
		return nil, grpcerr.ToStatus(err)
	}
	src := req.GetSource()
	if src == nil {
		return nil, grpcerr.ToStatus(errs.New(errs.InvalidArgument, "write_slab_shared %q: no source named", req.GetPath()))
	}
	// The client's memory is checked (its own sealed memory file, holding
	// its token) before a byte is read, as a read's destination is.
	size := int64(min(src.GetSize(), uint64(math.MaxInt64)))
	st, refused, err := s.g.WriteSlabShared(ctx, req.GetPath(), sel, int(src.GetPid()), int(src.GetFd()), size, src.GetToken())
	if err != nil {
		return nil, grpcerr.ToStatus(err)
	}
	if refused != nil {
		return &gatewayv1.WriteSlabSharedResponse{Source: &gatewayv1.SharedDestinationAnswer{Reason: refused.Error()}}, nil
	}
	return &gatewayv1.WriteSlabSharedResponse{Source: &gatewayv1.SharedDestinationAnswer{Accepted: true},
		ChunksWritten: uint64(st.Objects), BytesWritten: uint64(st.Bytes)}, nil
}
