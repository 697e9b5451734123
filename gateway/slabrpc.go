package gateway

import (
	"io"

	"google.golang.org/grpc"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/bufpool"
	"github.com/zarrgate/zarrgate/internal/grpcerr"
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

// ReadSlab implements gatewayv1.ArrayServiceServer.
func (s *Server) ReadSlab(req *gatewayv1.ReadSlabRequest, stream grpc.ServerStreamingServer[gatewayv1.ReadSlabResponse]) error {
	sel, err := SelectionFromProto(req.GetSelection())
	if err != nil {
		return grpcerr.ToStatus(err)
	}
	var elem int
	err = s.g.readSlab(stream.Context(), req.GetPath(), sel, func(info SlabInfo) error {
		elem = info.DataType.Size
		return stream.Send(&gatewayv1.ReadSlabResponse{Message: &gatewayv1.ReadSlabResponse_Header{Header: slabHeader(info)}})
	}, nil, func(b Block) error {
		return sendInline(b, elem, func(pb *gatewayv1.Block, done func()) error {
			return wire.Send(stream, &gatewayv1.ReadSlabResponse{Message: &gatewayv1.ReadSlabResponse_Block{Block: pb}}, done)
		})
	})
	return grpcerr.ToStatus(err)
}

// slabHeader is info's wire form.
func slabHeader(info SlabInfo) *gatewayv1.SlabHeader {
	return &gatewayv1.SlabHeader{Shape: u64s(info.Shape), DataType: info.DataType.Name,
		ByteOrder: gatewayv1.ByteOrder_BYTE_ORDER_LITTLE_ENDIAN, ElementSize: uint32(info.DataType.Size)}
}

// sendInline sends a block with its data in the message, split into
// pieces of at most maxBlockBytes. Block data is never modified once
// emitted (its own buffer or the cached fill value), so send may pass it to
// gRPC by reference; send calls done once gRPC has written it, and a pooled
// buffer is recycled when every piece is written.
func sendInline(b Block, elem int, send func(pb *gatewayv1.Block, done func()) error) error {
	refs := bufpool.NewRefs(1, b.free)
	err := splitBlock(b, elem, maxBlockBytes, func(p Block) error {
		refs.Hold()
		return send(blockProto(p), refs.Release)
	})
	if err == nil {
		refs.Release()
	}
	return err
}

// blockProto is b's wire form, data inline.
func blockProto(b Block) *gatewayv1.Block {
	pb := &gatewayv1.Block{Origin: u64s(b.Origin), Shape: u64s(b.Shape), Data: b.Data}
	if b.Offsets != nil {
		pb.Offsets = u64s(b.Offsets)
	}
	return pb
}

// splitBlock hands b to send in pieces of at most limit data bytes (or a
// single element, if one is larger), cut along the outermost dimension
// longer than 1, so that every piece is contiguous in b.
func splitBlock(b Block, elem int, limit int64, send func(Block) error) error {
	if int64(len(b.Data)) <= limit {
		return send(b)
	}
	d := 0
	for d < len(b.Shape) && b.Shape[d] <= 1 {
		d++
	}
	if d == len(b.Shape) {
		return send(b) // one element
	}
	inner := product(b.Shape[d+1:]) // elements per slice along d
	// byteAt is the data offset of the first element of slice i along d.
	byteAt := func(i int64) int64 {
		if elem > 0 {
			return i * inner * int64(elem)
		}
		return b.Offsets[i*inner]
	}
	for i := int64(0); i < b.Shape[d]; {
		j := i + 1
		for j < b.Shape[d] && byteAt(j+1)-byteAt(i) <= limit {
			j++
		}
		piece := Block{Origin: clone(b.Origin), Shape: clone(b.Shape), Data: b.Data[byteAt(i):byteAt(j)]}
		piece.Origin[d] += i
		piece.Shape[d] = j - i
		if elem == 0 {
			base := b.Offsets[i*inner]
			piece.Offsets = make([]int64, (j-i)*inner+1)
			for k := range piece.Offsets {
				piece.Offsets[k] = b.Offsets[i*inner+int64(k)] - base
			}
		}
		if err := splitBlock(piece, elem, limit, send); err != nil {
			return err
		}
		i = j
	}
	return nil
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
	next := func() (Block, error) {
		msg, err := stream.Recv()
		if err == io.EOF {
			return Block{}, io.EOF
		}
		if err != nil {
			return Block{}, err
		}
		pb := msg.GetBlock()
		if pb == nil {
			return Block{}, errs.New(errs.InvalidArgument, "write_slab %q: only the first message may be a header", h.GetPath())
		}
		b := Block{Data: pb.GetData()}
		if b.Origin, err = i64s(pb.GetOrigin()); err != nil {
			return Block{}, err
		}
		if b.Shape, err = i64s(pb.GetShape()); err != nil {
			return Block{}, err
		}
		if len(pb.GetOffsets()) > 0 {
			if b.Offsets, err = i64s(pb.GetOffsets()); err != nil {
				return Block{}, err
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
