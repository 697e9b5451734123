// Small reads: a slab of at most smallSlabBytes in one ReadSlabSmall
// request instead of a stream: over a small-reads connection where the
// gateway offers one (smallconn.go), else as a unary call.

package client

import (
	"context"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/grpcerr"
)

// smallSlabBytes is the largest slab read with ReadSlabSmall: the
// gateway's limit (arrayserver.MaxSmallSlabBytes). A unary call costs a
// small read less than a stream (issue 20: random 64×64 reads). Slabs
// large enough for shared memory (sharedMinElements) are streamed
// whatever their size in bytes.
const smallSlabBytes = 1 << 20

// readSmall reads the slab sel of a with one ReadSlabSmall request (over
// a small-reads connection, or as a call) into the dense buffer alloc
// returns for its header. ok is false when the gateway
// does not answer ReadSlabSmall (a gateway from before it: the client
// stops trying), or refuses the slab as too large for it: read it with
// ReadSlab then.
func readSmall(ctx context.Context, a *Array, sel Selection, alloc func(*SlabHeader) ([]byte, error)) (ok bool, _ error) {
	if !a.c.small.Load() {
		return false, nil
	}
	req := &gatewayv1.ReadSlabSmallRequest{Path: a.Path, Selection: sel.proto()}
	resp, err, conn := a.c.smalls.read(ctx, a.c.arrays, req)
	if !conn {
		resp, err = a.c.arrays.ReadSlabSmall(ctx, req)
	}
	if err != nil {
		st := status.Convert(err)
		switch {
		case st.Code() == codes.Unimplemented && strings.Contains(st.Message(), "ReadSlabSmall"):
			a.c.small.Store(false)
			return false, nil
		case st.Code() == codes.ResourceExhausted && strings.Contains(st.Message(), "read_slab_small"):
			return false, nil
		}
		return true, grpcerr.FromStatus(err)
	}
	h := resp.GetHeader()
	if h == nil {
		return true, errs.New(errs.DataLoss, "read %q: the response has no header", a.Path)
	}
	hdr := &SlabHeader{Shape: i64s(h.GetShape()), DataType: h.GetDataType(), ElementSize: int(h.GetElementSize())}
	if hdr.ElementSize == 0 {
		return true, errs.New(errs.DataLoss, "read %q: the server sends variable-length %s for a read of fixed-size elements", a.Path, hdr.DataType)
	}
	out, err := alloc(hdr)
	if err != nil {
		return true, err
	}
	// Blocks are checked against the slab (checkBlock), so placing one
	// cannot fail; together they must cover it.
	var got int64
	for _, pb := range resp.GetBlocks() {
		b := Block{Origin: i64s(pb.GetOrigin()), Shape: i64s(pb.GetShape()), Data: pb.GetData()}
		if err := checkBlock(hdr, b); err != nil {
			return true, errs.Wrap(errs.DataLoss, err, "read %q", a.Path)
		}
		placeBlock(out, hdr.Shape, b, hdr.ElementSize)
		got += product(b.Shape)
	}
	if n := product(hdr.Shape); got != n {
		return true, errs.New(errs.DataLoss, "read %q: the server sent %d of %d elements", a.Path, got, n)
	}
	return true, nil
}
