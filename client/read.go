// Slab reads: the blocks of ReadSlab and ReadSlabShared streams as they
// arrive, checked against the slab.

package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/grpcerr"
	"github.com/zarrgate/zarrgate/internal/shm"
	"github.com/zarrgate/zarrgate/internal/wire"
)

// Block is a box of a slab: origin and shape in slab coordinates, elements
// in C order, little-endian (variable-length types: data + n+1 offsets).
type Block struct {
	Origin, Shape []int64
	Data          []byte
	Offsets       []int64

	pieces [][]byte // Data, left in receive buffers (recvPieces)
	// done, set on blocks received as pieces (recvPieces: of gRPC's
	// receive buffers or of a shared-memory segment), keeps pieces valid
	// after the next block is yielded, until it is called, once, by
	// whoever copies them out.
	done func()
	// placed: Data is empty, the block's elements were read straight into
	// the slab's destination (SlabHeader.into).
	placed bool
}

// SlabHeader describes a slab being read.
type SlabHeader struct {
	Shape       []int64
	DataType    string
	ElementSize int

	// inPlace: the gateway writes the slab into the read's destination
	// (a SharedBuffer), and placed is how many elements it says it wrote;
	// otherwise refused says why (empty if no destination was named).
	inPlace bool
	placed  int64
	refused string

	// into, set by the reader of a dense slab before it takes the first
	// block, is the slab's destination (C order, ElementSize bytes per
	// element): blocks from a bulk connection are read straight into it
	// where they can be (placeFrame), and come as placed blocks.
	into []byte
}

// Blocks streams the slab sel (nil: all) of the array block by block, for
// slabs larger than memory: it returns the slab's header, then yields
// blocks as they arrive, in no particular order; together they tile the
// slab. Stopping the iteration early cancels the read.
func (a *Array) Blocks(ctx context.Context, sel Selection) (*SlabHeader, iter.Seq2[Block, error], error) {
	return a.blocks(ctx, sel, recvOwned)
}

// How blocks receives: each block's data owned by the caller; or valid
// only until the next block is yielded, in one reused buffer, for callers
// that copy it out at once; or (fixed-size types) left in gRPC's receive
// buffers or a shared-memory segment as Block.pieces, saving a copy, valid
// until the block's done is called.
const (
	recvOwned = iota
	recvReuse
	recvPieces
)

// slabMsg is what ReadSlab and ReadSlabShared stream.
type slabMsg interface {
	proto.Message
	GetHeader() *gatewayv1.SlabHeader
	GetBlock() *gatewayv1.Block
}

func (a *Array) blocks(ctx context.Context, sel Selection, mode int) (*SlabHeader, iter.Seq2[Block, error], error) {
	return a.blocksVia(ctx, a.c.arrays, sel, mode, nil)
}

// blocksVia is blocks through the ArrayService client arrays (one of the
// client's connections); shared-memory reads always take the first. With
// dest (mode recvPieces), the gateway is asked to write the slab into it:
// if it accepts (hdr.inPlace), no blocks are yielded.
func (a *Array) blocksVia(ctx context.Context, arrays gatewayv1.ArrayServiceClient, sel Selection, mode int, dest *shm.Dest) (*SlabHeader, iter.Seq2[Block, error], error) {
	return a.blocksVia2(ctx, arrays, sel, mode, dest, a.c.bulk.want())
}

// blocksVia2 is blocksVia, asking for a bulk connection if tryBulk.
func (a *Array) blocksVia2(ctx context.Context, arrays gatewayv1.ArrayServiceClient, sel Selection, mode int, dest *shm.Dest, tryBulk bool) (*SlabHeader, iter.Seq2[Block, error], error) {
	shared := mode != recvReuse && a.c.shared.Load() && (dest != nil || product(sel.Shape(a.Shape)) >= sharedMinElements)
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	var stream grpc.ClientStream
	var newMsg func() slabMsg
	var err error
	if shared {
		var s grpc.BidiStreamingClient[gatewayv1.ReadSlabSharedRequest, gatewayv1.ReadSlabSharedResponse]
		if s, err = a.c.arrays.ReadSlabShared(ctx); err == nil {
			req := &gatewayv1.ReadSlabSharedRequest{Message: &gatewayv1.ReadSlabSharedRequest_Read{Read: &gatewayv1.ReadSlabRequest{Path: a.Path, Selection: sel.proto()}}}
			if dest != nil {
				req.Destination = &gatewayv1.SharedDestination{Pid: uint32(dest.Pid), Fd: uint32(dest.Fd), Size: uint64(len(dest.Data())), Token: dest.Token}
			}
			err = s.Send(req)
			if err == io.EOF {
				// The server ended the stream already (a gateway without
				// ReadSlabShared answers at once): its status comes with
				// the receive below, as gRPC's Send documents.
				err = nil
			}
		}
		stream, newMsg = s, func() slabMsg { return &gatewayv1.ReadSlabSharedResponse{} }
	} else {
		stream, err = arrays.ReadSlab(ctx, &gatewayv1.ReadSlabRequest{Path: a.Path, Selection: sel.proto(), Bulk: tryBulk})
		newMsg = func() slabMsg { return &gatewayv1.ReadSlabResponse{} }
	}
	if err != nil {
		cancel()
		return nil, nil, grpcerr.FromStatus(err)
	}
	first := newMsg()
	if err := stream.RecvMsg(first); err != nil {
		cancel()
		if shared && status.Code(err) == codes.Unimplemented && strings.Contains(status.Convert(err).Message(), "ReadSlabShared") {
			// A gateway from before ReadSlabShared ("unknown method"), or
			// one that does not implement it.
			a.c.shared.Store(false)
			return a.blocksVia2(parent, arrays, sel, mode, dest, a.c.bulk.want())
		}
		if err == io.EOF {
			err = errs.New(errs.DataLoss, "read %q: stream ended before the header", a.Path)
		}
		return nil, nil, grpcerr.FromStatus(err)
	}
	h := first.GetHeader()
	if h == nil {
		cancel()
		return nil, nil, errs.New(errs.DataLoss, "read %q: first message is not a header", a.Path)
	}
	hdr := &SlabHeader{Shape: i64s(h.GetShape()), DataType: h.GetDataType(), ElementSize: int(h.GetElementSize())}
	if dest != nil {
		switch ans := h.GetDestination(); {
		case !shared:
			hdr.refused = "shared memory is off for this client (WithSharedMemory)"
		case ans == nil:
			hdr.refused = "the gateway does not write into client memory"
		case !ans.GetAccepted():
			hdr.refused = ans.GetReason()
		default:
			hdr.inPlace = true
			return hdr, a.inPlace(stream, cancel, hdr), nil
		}
	}
	var bk *bulkIn
	if o := h.GetBulk(); o != nil && tryBulk && !shared {
		var err error
		bk, err = a.c.bulk.open(ctx, o, stream, cancel)
		if err != nil {
			// Not reachable from here (a firewall, a proxy, a listener
			// behind NAT without --bulk-advertise), or the connection
			// refused before its first frame: the read again through the
			// stream, and no bulk for a while.
			cancel()
			if parent.Err() != nil {
				return nil, nil, grpcerr.FromStatus(status.FromContextError(parent.Err()).Err())
			}
			var st callError
			if errors.As(err, &st) {
				return nil, nil, grpcerr.FromStatus(st.err)
			}
			a.c.bulk.failed()
			return a.blocksVia2(parent, arrays, sel, mode, dest, false)
		}
	}
	var sh *sharedIn
	if seg := h.GetSharedSegment(); shared && seg != nil {
		// nil if not on the gateway's host, or not its user: blocks come inline
		m, _ := a.c.maps.attach(seg.GetPath(), int64(seg.GetSize()), seg.GetToken())
		s := stream.(grpc.BidiStreamingClient[gatewayv1.ReadSlabSharedRequest, gatewayv1.ReadSlabSharedResponse])
		if err := s.Send(&gatewayv1.ReadSlabSharedRequest{Message: &gatewayv1.ReadSlabSharedRequest_Attach{Attach: &gatewayv1.SharedAttach{Attached: m != nil}}}); err != nil && err != io.EOF {
			cancel()
			a.c.maps.detach(m, false)
			return nil, nil, grpcerr.FromStatus(err)
		}
		if m != nil {
			sh = &sharedIn{m: m, stream: s, batch: (int64(len(m.Data)) - shm.DataOffset) / 8}
		}
	}
	if bk != nil {
		return hdr, a.bulkBlocks(ctx, cancel, stream, bk, hdr, mode), nil
	}
	seq := func(yield func(Block, error) bool) {
		defer cancel()
		if sh != nil {
			defer func() {
				sh.wait() // blocks still being copied out read the mapping
				a.c.maps.detach(sh.m, sh.ended)
			}()
		}
		reuse := &wire.Reuse{Msg: newMsg()}
		for {
			msg := newMsg()
			var pieces [][]byte
			var frame *wire.Frame // holding pieces (recvPieces)
			var err error
			switch mode {
			case recvReuse:
				err = stream.RecvMsg(reuse)
				msg = reuse.Msg.(slabMsg)
			case recvPieces:
				// A frame per message: its pieces stay valid until the
				// block's done, so that blocks can be copied out in
				// parallel.
				frame = new(wire.Frame)
				if err = stream.RecvMsg(frame); err == nil {
					err = frame.Decode(msg, func(in protoreflect.Message, fd protoreflect.FieldDescriptor, p [][]byte) {
						if fd.Name() == "data" {
							pieces = p
						} else {
							in.Set(fd, protoreflect.ValueOfBytes(bytes.Join(p, nil)))
						}
					})
					if err != nil {
						err = errs.Wrap(errs.DataLoss, err, "read %q", a.Path)
					}
				}
			default:
				err = stream.RecvMsg(msg)
			}
			if err == io.EOF {
				return
			}
			if err != nil {
				yield(Block{}, grpcerr.FromStatus(err))
				return
			}
			pb := msg.GetBlock()
			if pb == nil && frame != nil {
				frame.Free()
			}
			if m, ok := msg.(*gatewayv1.ReadSlabSharedResponse); ok && m.GetEnd() != nil && sh != nil {
				sh.end()
				continue
			}
			if pb == nil {
				yield(Block{}, errs.New(errs.DataLoss, "read %q: a message after the header is not a block", a.Path))
				return
			}
			b := Block{Origin: i64s(pb.GetOrigin()), Shape: i64s(pb.GetShape()), Data: pb.GetData(), pieces: pieces}
			if len(pb.GetOffsets()) > 0 {
				b.Offsets = i64s(pb.GetOffsets())
			}
			if frame != nil {
				if pieces != nil {
					b.done = sync.OnceFunc(frame.Free)
				} else {
					frame.Free() // nothing of the block is left in it
				}
			}
			if r := pb.GetShared(); r != nil {
				if b.pieces, err = sh.data(r); err != nil {
					yield(Block{}, errs.Wrap(errs.DataLoss, err, "read %q", a.Path))
					return
				}
				b.done = sh.hold(r.GetLength())
				if mode == recvOwned { // the caller keeps Data: copy it out now
					b.Data = bytes.Clone(b.pieces[0])
					b.pieces = nil
					b.done()
					b.done = nil
				}
			}
			if err := checkBlock(hdr, b); err != nil {
				if b.done != nil {
					b.done()
				}
				yield(Block{}, errs.Wrap(errs.DataLoss, err, "read %q", a.Path))
				return
			}
			if !yield(b, nil) {
				return
			}
		}
	}
	return hdr, seq, nil
}

// bulkBlocks yields the blocks of a read from its bulk connection: each
// frame's block as the stream would have carried it, its data in the
// frame (a fresh buffer for recvOwned; otherwise the one buffer of the
// connection, valid until the next block: blocks come without done, and
// readDenseVia places each before taking the next), or, with hdr.into,
// read straight into place (placeFrame) and yielded as placed.
func (a *Array) bulkBlocks(ctx context.Context, cancel context.CancelFunc, stream grpc.ClientStream, bk *bulkIn, hdr *SlabHeader, mode int) iter.Seq2[Block, error] {
	return func(yield func(Block, error) bool) {
		defer cancel()
		defer bk.close()
		msg := new(gatewayv1.ReadSlabResponse)
		for {
			_, err := bk.begin(ctx, stream, a.Path)
			if err == io.EOF {
				return
			}
			if err != nil {
				yield(Block{}, err)
				return
			}
			if hdr.into != nil && hdr.ElementSize > 0 && bk.r.Direct() {
				b, ok, err := placeFrame(bk, hdr)
				var ce connError
				if errors.As(err, &ce) {
					err = bk.fail(ctx, stream, a.Path, ce.err)
				} else if err != nil {
					err = errs.Wrap(errs.DataLoss, err, "read %q", a.Path)
				}
				if err != nil {
					yield(Block{}, err)
					return
				}
				if ok {
					if !yield(b, nil) {
						return
					}
					continue
				}
			}
			f, err := bk.r.Rest(mode == recvOwned)
			if err != nil {
				yield(Block{}, bk.fail(ctx, stream, a.Path, err))
				return
			}
			if err := wire.Decode(f, msg); err != nil {
				yield(Block{}, errs.Wrap(errs.DataLoss, err, "read %q: a frame of the bulk connection", a.Path))
				return
			}
			pb := msg.GetBlock()
			if pb == nil {
				yield(Block{}, errs.New(errs.DataLoss, "read %q: a frame of the bulk connection is not a block", a.Path))
				return
			}
			b := Block{Origin: i64s(pb.GetOrigin()), Shape: i64s(pb.GetShape()), Data: pb.GetData()}
			if len(pb.GetOffsets()) > 0 {
				b.Offsets = i64s(pb.GetOffsets())
			}
			if err := checkBlock(hdr, b); err != nil {
				yield(Block{}, errs.Wrap(errs.DataLoss, err, "read %q", a.Path))
				return
			}
			if !yield(b, nil) {
				return
			}
		}
	}
}

// inPlace is the rest of a read whose slab the gateway writes into the
// client's destination: no blocks, only the end, with the count of
// elements written (hdr.placed), or the call's error.
func (a *Array) inPlace(stream grpc.ClientStream, cancel context.CancelFunc, hdr *SlabHeader) iter.Seq2[Block, error] {
	return func(yield func(Block, error) bool) {
		defer cancel()
		for {
			msg := new(gatewayv1.ReadSlabSharedResponse)
			err := stream.RecvMsg(msg)
			switch {
			case err == io.EOF && hdr.placed == 0 && product(hdr.Shape) > 0:
				err = errs.New(errs.DataLoss, "read %q: the stream ended before the gateway said the slab was written", a.Path)
			case err == io.EOF:
				return
			case err != nil:
				err = grpcerr.FromStatus(err)
			case msg.GetEnd() == nil:
				err = errs.New(errs.DataLoss, "read %q: a message other than the end after the gateway took the destination", a.Path)
			default:
				hdr.placed = int64(msg.GetEnd().GetDestinationElements())
				continue
			}
			yield(Block{}, err)
			return
		}
	}
}

// checkBlock checks that a block lies inside the slab and, for fixed-size
// types, that its data has the block's size.
func checkBlock(hdr *SlabHeader, b Block) error {
	if err := checkBox(hdr, b.Origin, b.Shape); err != nil {
		return err
	}
	if hdr.ElementSize == 0 {
		return nil
	}
	n := int64(len(b.Data))
	if b.pieces != nil {
		n = 0
		for _, p := range b.pieces {
			n += int64(len(p))
		}
	}
	return checkSize(hdr, b.Origin, b.Shape, n)
}

// checkBox checks that a box lies inside the slab.
func checkBox(hdr *SlabHeader, origin, shape []int64) error {
	nd := len(hdr.Shape)
	if len(origin) != nd || len(shape) != nd {
		return fmt.Errorf("block rank %d, slab rank %d", len(origin), nd)
	}
	for d := range nd {
		if origin[d] < 0 || shape[d] < 0 || origin[d] > hdr.Shape[d] || shape[d] > hdr.Shape[d]-origin[d] {
			return fmt.Errorf("block at %v shape %v outside the slab %v", origin, shape, hdr.Shape)
		}
	}
	return nil
}

// checkSize checks that a box inside the slab (checkBox) of fixed-size
// elements has n bytes of data.
func checkSize(hdr *SlabHeader, origin, shape []int64, n int64) error {
	if want := product(shape) * int64(hdr.ElementSize); n != want {
		return fmt.Errorf("block at %v has %d bytes, want %d", origin, n, want)
	}
	return nil
}
