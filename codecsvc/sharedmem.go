package codecsvc

import (
	"context"
	"fmt"
	"time"

	codecv1 "github.com/zarrgate/zarrgate/gen/zarrgate/codec/v1"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/bufpool"
	"github.com/zarrgate/zarrgate/internal/shm"
)

// A Process stream's shared-memory segment (codecv1.SharedMemoryOffer):
// the caller, a gateway on this host, offers one of its memory files; the
// worker maps it read-write, and decode batches may then carry their
// encoded chunks as regions of it (copied out before they are decoded:
// the gateway may write into its segment at any time, and a decoder must
// not read bytes that change under it) and give, per chunk, a region the
// answer is written to instead of travelling on the stream. Everything
// about a region comes from the caller and is checked against the
// segment's data area before it is used.

// SetSharedMemory lets Process streams attach a caller's shared-memory
// segment (on by default); off, every offer is declined and batches carry
// their bytes. Call it before serving.
func (s *Server) SetSharedMemory(on bool) { s.noShared = !on }

// attachShared answers an offer: the mapping, or nil and why not.
func (s *Server) attachShared(o *codecv1.SharedMemoryOffer) (*shm.Mapping, *codecv1.SharedMemoryAnswer) {
	if s.noShared {
		return nil, &codecv1.SharedMemoryAnswer{Reason: "shared memory is turned off on this worker"}
	}
	if !shm.Supported {
		return nil, &codecv1.SharedMemoryAnswer{Reason: shm.ErrUnsupported.Error()}
	}
	if o.GetSize() > shm.MaxAttachBytes {
		return nil, &codecv1.SharedMemoryAnswer{Reason: fmt.Sprintf("segment of %d bytes is too large", o.GetSize())}
	}
	m, err := shm.AttachWritable(o.GetPath(), int64(o.GetSize()), o.GetToken())
	if err != nil {
		return nil, &codecv1.SharedMemoryAnswer{Reason: err.Error()}
	}
	return m, &codecv1.SharedMemoryAnswer{Attached: true}
}

// region returns the bytes of r in seg, checked to lie in the segment's
// data area (never its token), without overflow.
func region(seg []byte, r *codecv1.SharedRegion, what string, i int) ([]byte, error) {
	off, n, size := r.GetOffset(), r.GetLength(), uint64(len(seg))
	if off < shm.DataOffset || off > size || n > size-off {
		return nil, &codec.ItemError{Index: i, Err: errs.New(errs.InvalidArgument, "%s %d: region [%d, +%d) is not inside the shared-memory segment's data area [%d, %d)", what, i, off, n, shm.DataOffset, size)}
	}
	return seg[off : off+n : off+n], nil
}

// maxSharedEncoded bounds the encoded bytes of one batch's shared_encoded
// regions, which the worker copies into memory of its own before it
// reserves anything: as much as one batch sent as bytes can carry (a
// message of at most rpc.MaxMessageSize), whatever size of segment the
// caller offered. A variable for tests.
var maxSharedEncoded uint64 = 64 << 20

// sharedInputs replaces a decode batch's shared_encoded regions by copies
// of their bytes (in one pooled buffer, returned for the caller to hand
// back once the answer is written: decoded chunks may alias it) and checks
// its output regions. The regions' total must fit the data area: a caller
// cannot make the worker copy more than its segment holds.
func sharedInputs(m *shm.Mapping, req *codecv1.DecodeRequest) (buf []byte, err error) {
	in, outs := req.GetSharedEncoded(), req.GetOutputs()
	if len(in) == 0 && len(outs) == 0 {
		return nil, nil
	}
	if m == nil {
		return nil, errs.New(errs.InvalidArgument, "decode: shared-memory regions on a stream with no segment attached")
	}
	if len(in) > 0 && (len(req.GetEncoded()) > 0 || len(req.GetRefs()) > 0) {
		return nil, errs.New(errs.InvalidArgument, "decode: both shared_encoded and encoded chunks or refs")
	}
	n := len(req.GetEncoded()) + len(req.GetRefs()) + len(in)
	if len(outs) > 0 && len(outs) != n {
		return nil, errs.New(errs.InvalidArgument, "decode: %d output regions for %d chunks", len(outs), n)
	}
	area := uint64(len(m.Data) - shm.DataOffset)
	var total uint64
	for i, o := range outs {
		if o.GetLength() == 0 {
			continue // none: this chunk's answer goes inline
		}
		if _, err := region(m.Data, o, "output", i); err != nil {
			return nil, err
		}
	}
	for i, r := range in {
		if _, err := region(m.Data, r, "shared_encoded", i); err != nil {
			return nil, err
		}
		total += r.GetLength() // no overflow: each length <= area
		if total > area {
			return nil, errs.New(errs.InvalidArgument, "decode: shared_encoded regions of more than the segment's %d bytes of data", area)
		}
		if total > maxSharedEncoded {
			return nil, errs.New(errs.InvalidArgument, "decode: shared_encoded regions of more than %d bytes in one batch", maxSharedEncoded)
		}
	}
	if len(in) == 0 {
		return nil, nil
	}
	buf = bufpool.Get(int(total))[:0]
	enc := make([][]byte, len(in))
	for i, r := range in {
		b, _ := region(m.Data, r, "shared_encoded", i)
		k := len(buf)
		buf = append(buf, b...)
		enc[i] = buf[k:len(buf):len(buf)]
	}
	req.Encoded = enc
	return buf, nil
}

// sharedOutputs writes each answer chunk that fits its output region into
// it, answering with its length instead of its bytes. Regions were checked
// by sharedInputs. Variable-length and missing chunks, and those larger
// than their region, stay in the answer.
func sharedOutputs(m *shm.Mapping, req *codecv1.DecodeRequest, resp *codecv1.DecodeResponse) {
	outs := req.GetOutputs()
	if len(outs) == 0 || len(outs) != len(resp.GetChunks()) {
		return
	}
	for i, c := range resp.Chunks {
		if outs[i].GetLength() == 0 {
			continue
		}
		dst, err := region(m.Data, outs[i], "output", i)
		if err != nil || c.GetMissing() || len(c.GetOffsets()) > 0 || len(c.GetData()) > len(dst) {
			continue
		}
		n := uint64(copy(dst, c.Data))
		// A fresh Chunk: the answer's may be shared with the caller's
		// other uses (ChunksToProto's are not, but this costs nothing).
		resp.Chunks[i] = &codecv1.Chunk{SharedLength: &n}
	}
}

// decodeInto decodes a batch of whole chunks, all of whose output regions
// hold a chunk and whose chain allows it (Chain.DecodeInto), straight into
// those regions, saving the copy of each chunk sharedOutputs makes; the
// encoded chunks and one chunk's working buffers are reserved (the
// results are the caller's memory). handled is false when the batch does not qualify: s.decode
// then decodes it as any other.
func (s *Server) decodeInto(ctx context.Context, m *shm.Mapping, req *codecv1.DecodeRequest) (_ *codecv1.DecodeResponse, handled bool, err error) {
	outs, enc := req.GetOutputs(), req.GetEncoded()
	if s.local == nil || m == nil || len(outs) == 0 || len(outs) != len(enc) || len(req.GetRefs()) > 0 || len(req.GetSelections()) > 0 {
		return nil, false, nil
	}
	spec, err := SpecFromProto(req.GetSpec())
	if err != nil {
		return nil, false, nil
	}
	c, err := s.local.Chain(spec)
	if err != nil || !c.decodesInto() {
		return nil, false, nil
	}
	for _, o := range outs {
		if int64(o.GetLength()) < c.DecodedBound() {
			return nil, false, nil
		}
	}
	var start time.Time
	if s.obs != nil {
		start = time.Now()
		defer func() { s.obs.Batch(false, spec, len(enc), start, err) }()
	}
	if s.budget != nil {
		// The encoded chunks (copied out of the segment) and one chunk's
		// working buffers; the results are in the caller's memory.
		need := c.WorkingBound()
		for _, e := range enc {
			need += int64(len(e)) // no overflow: together at most the segment's size
		}
		r, err := s.budget.Acquire(ctx, need, fmt.Sprintf("decoding a batch of %d chunks of %v %s", len(enc), spec.Shape, spec.DataType))
		if err != nil {
			return nil, true, err
		}
		defer r.Release()
	}
	resp := &codecv1.DecodeResponse{Chunks: make([]*codecv1.Chunk, len(enc))}
	for i, e := range enc {
		if err := ctx.Err(); err != nil {
			return nil, true, err
		}
		dst, err := region(m.Data, outs[i], "output", i) // checked by sharedInputs
		if err != nil {
			return nil, true, err
		}
		n, ok, err := c.DecodeInto(e, dst)
		if err != nil {
			return nil, true, &codec.ItemError{Index: i, Err: err}
		}
		if !ok { // not for this chain after all: the usual way
			return nil, false, nil
		}
		l := uint64(n)
		resp.Chunks[i] = &codecv1.Chunk{SharedLength: &l}
	}
	return resp, true, nil
}
