package remote

import (
	"bytes"
	"context"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/reflect/protoreflect"

	codecv1 "github.com/zarrgate/zarrgate/gen/zarrgate/codec/v1"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/bufpool"
	"github.com/zarrgate/zarrgate/internal/wire"
)

// recvResponse receives one answer of a Process stream without
// allocating its size: the message stays in gRPC's receive buffers
// (wire.Frame) and each large decoded chunk (at least wire.Large bytes) is
// copied from them once, into a buffer of internal/bufpool that the chunk
// is then lent in (lendChunks), so that the gateway hands it back when it
// is done with the chunk and the next batch reuses it. Gathering the
// message into a fresh buffer instead cost an allocation, the zeroing of
// its size and the garbage collector's work for every batch.
func recvResponse(s grpc.ClientStream) (*codecv1.ProcessResponse, error) {
	var f wire.Frame
	if err := s.RecvMsg(&f); err != nil {
		return nil, err
	}
	defer f.Free()
	resp := new(codecv1.ProcessResponse)
	err := f.Decode(resp, func(in protoreflect.Message, fd protoreflect.FieldDescriptor, pieces [][]byte) {
		n := 0
		for _, p := range pieces {
			n += len(p)
		}
		buf := bufpool.Get(n)[:0]
		for _, p := range pieces {
			buf = append(buf, p...)
		}
		in.Set(fd, protoreflect.ValueOfBytes(buf))
	})
	if err != nil {
		return nil, errs.New(errs.DataLoss, "codec worker sent a malformed answer: %v", err)
	}
	// Large encoded chunks (repeated bytes) alias the frame: copied out
	// before it is freed.
	if enc := resp.GetEncode(); enc != nil {
		for i, e := range enc.Encoded {
			if len(e) >= wire.Large {
				enc.Encoded[i] = bytes.Clone(e)
			}
		}
	}
	return resp, nil
}

// lendChunks converts decoded chunks received by recvResponse into dst:
// those of at least wire.Large bytes lie in whole bufpool buffers of their
// own, and are lent to the caller (codec.Chunk.Release hands them back).
func lendChunks(dst []codec.Chunk, p []*codecv1.Chunk) {
	for i, c := range p {
		data, offs := c.GetData(), c.GetOffsets()
		if len(offs) == 0 {
			offs = nil
		}
		if len(data) >= wire.Large {
			dst[i] = codec.Lend(data, offs, data, bufpool.Put)
		} else {
			dst[i] = codec.Chunk{Data: data, Offsets: offs}
		}
	}
}

var _ codec.SelectDecoder = (*Client)(nil)

// DecodeSelected implements codec.SelectDecoder: the worker decodes each
// chunk whole and answers with the part sel selects, so that a partial
// read moves only that part back.
func (c *Client) DecodeSelected(ctx context.Context, spec *codec.BatchSpec, encoded [][]byte, sel []codec.Selection) ([]codec.Chunk, error) {
	if len(sel) != len(encoded) {
		return nil, errs.New(errs.InvalidArgument, "decode: %d selections for %d chunks", len(sel), len(encoded))
	}
	ps, err := codecsvc.SpecToProto(spec)
	if err != nil {
		return nil, err
	}
	psel := codecsvc.SelectionsToProto(sel, spec.DataType.Size)
	out := make([]codec.Chunk, len(encoded))
	err = c.decodeParts(ctx, spec, out, func(lo, hi int) *codecv1.DecodeRequest {
		return &codecv1.DecodeRequest{Spec: ps, Encoded: encoded[lo:hi], Selections: psel[lo:hi]}
	}, selectedSize(spec, sel), nil)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// decodeParts sends a batch of len(out) chunks to the workers in the parts
// split cuts it into, in parallel, each part's request made by req, and
// lends each part's decoded chunks into out (got, if not nil, also sees
// them): the shape Decode, DecodeSelected and DecodeFetched share.
// outSize, if not nil, is the size of chunk i's answer (0: unknown), for
// the answer to come through shared memory (shared.go). On an error, the
// chunks already lent are released and out is left empty.
func (c *Client) decodeParts(ctx context.Context, spec *codec.BatchSpec, out []codec.Chunk, req func(lo, hi int) *codecv1.DecodeRequest, outSize func(i int) int64, got func(lo int, chunks []*codecv1.Chunk)) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, r := range split(spec, len(out)) {
		g.Go(func() error {
			var sizes []int64
			if outSize != nil && c.sharedBytes > 0 {
				sizes = make([]int64, r[1]-r[0])
				for i := range sizes {
					sizes[i] = outSize(r[0] + i)
				}
			}
			resp, reg, err := c.do(gctx, &codecv1.ProcessRequest{Work: &codecv1.ProcessRequest_Decode{Decode: req(r[0], r[1])}}, sizes)
			if err != nil {
				return shift(err, r[0])
			}
			if reg != nil {
				defer reg.done()
			}
			chunks := resp.GetDecode().GetChunks()
			if len(chunks) != r[1]-r[0] {
				return errs.New(errs.DataLoss, "codec worker answered %d chunks for %d", len(chunks), r[1]-r[0])
			}
			lendChunks(out[r[0]:r[1]], chunks)
			for i, ch := range chunks {
				if ch.SharedLength == nil {
					continue
				}
				var ok bool
				if reg != nil {
					out[r[0]+i], ok = reg.lend(i, ch.GetSharedLength())
				}
				if !ok {
					return errs.New(errs.DataLoss, "codec worker answered chunk %d with %d bytes in shared memory it was given no room for", r[0]+i, ch.GetSharedLength())
				}
				c.sharedChunks.Add(1)
			}
			if got != nil {
				got(r[0], chunks)
			}
			return nil
		})
	}
	err := g.Wait()
	if err != nil {
		for i := range out {
			out[i].Release()
			out[i] = codec.Chunk{}
		}
	}
	return err
}

// fixedSize is the size of a whole decoded chunk of spec, or 0 for
// variable-length data (whose size is not known before it is decoded).
func fixedSize(spec *codec.BatchSpec) int64 {
	if spec.DataType.VariableLength() {
		return 0
	}
	n := int64(spec.DataType.Size)
	for _, d := range spec.Shape {
		n *= d
	}
	return n
}

// selectedSize is the size of the answer to a chunk read through sel.
func selectedSize(spec *codec.BatchSpec, sel []codec.Selection) func(i int) int64 {
	whole := fixedSize(spec)
	if whole == 0 {
		return nil
	}
	return func(i int) int64 {
		if sel == nil || sel[i].Whole() {
			return whole
		}
		return sel[i].Elems() * int64(spec.DataType.Size)
	}
}

var _ codec.FetchDecoder = (*Client)(nil)

// DecodeFetched implements codec.FetchDecoder: the workers, started with
// a store tier, read the chunks refs names themselves, so that only keys
// go to them and only the selections come back. A worker without a store
// tier answers FailedPrecondition.
func (c *Client) DecodeFetched(ctx context.Context, spec *codec.BatchSpec, refs []codec.Ref, sel []codec.Selection) ([]codec.Chunk, []bool, error) {
	if sel != nil && len(sel) != len(refs) {
		return nil, nil, errs.New(errs.InvalidArgument, "decode: %d selections for %d refs", len(sel), len(refs))
	}
	ps, err := codecsvc.SpecToProto(spec)
	if err != nil {
		return nil, nil, err
	}
	psel := codecsvc.SelectionsToProto(sel, spec.DataType.Size)
	prefs := codecsvc.RefsToProto(refs)
	out := make([]codec.Chunk, len(refs))
	found := make([]bool, len(refs))
	err = c.decodeParts(ctx, spec, out, func(lo, hi int) *codecv1.DecodeRequest {
		req := &codecv1.DecodeRequest{Spec: ps, Refs: prefs[lo:hi]}
		if psel != nil {
			req.Selections = psel[lo:hi]
		}
		return req
	}, selectedSize(spec, sel), func(lo int, chunks []*codecv1.Chunk) {
		for i, ch := range chunks {
			found[lo+i] = !ch.GetMissing()
		}
	})
	if err != nil {
		return nil, nil, err
	}
	return out, found, nil
}
