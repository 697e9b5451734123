package arrayserver

import (
	"context"
	"errors"
	"fmt"
	"net"

	"google.golang.org/grpc"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/gateway"
	"github.com/zarrgate/zarrgate/internal/bulk"
	"github.com/zarrgate/zarrgate/internal/grpcerr"
	"github.com/zarrgate/zarrgate/internal/wire"
	"github.com/zarrgate/zarrgate/zarr"
)

// SetBulk makes ReadSlab offer l's bulk connections to the reads that ask
// for them (ReadSlabRequest.bulk); nil: none.
func (s *Server) SetBulk(l *bulk.Listener) { s.bulk = l }

// readSlabBulk is ReadSlab with its blocks over a bulk connection: the
// header goes through the stream with an offer (a ticket), the client
// connects to the bulk listener and presents the ticket, and every block
// is written there as a frame, as the stream would have sent it; then the
// end frame, and the call ends OK. The memory budget, limits and
// permissions are ReadSlab's: the same engine read, the same pieces
// (sendInline). With too many reads waiting for their connection, the
// header carries no offer and the blocks come through the stream.
func (s *Server) readSlabBulk(req *gatewayv1.ReadSlabRequest, sel []zarr.Range, stream grpc.ServerStreamingServer[gatewayv1.ReadSlabResponse]) error {
	ctx := stream.Context()
	var (
		elem int
		conn net.Conn
		w    *bulk.Writer
	)
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	// A write blocked on a client that stopped reading ends with the call.
	var stop func() bool
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	writeErr := func(err error) error {
		if ctx.Err() != nil {
			return fmt.Errorf("read_slab %q: the call ended (%w) while writing to the bulk connection: %v", req.GetPath(), ctx.Err(), err)
		}
		return errs.Wrap(errs.Unavailable, err, "read_slab %q: writing to the bulk connection", req.GetPath())
	}
	err := s.g.ReadSlabTo(ctx, req.GetPath(), sel, func(info gateway.SlabInfo) error {
		elem = info.DataType.Size
		h := slabHeader(info)
		t, err := s.bulk.Offer()
		if err != nil {
			// No ticket (too many reads wait for theirs, or the listener
			// is closing): the blocks come through the stream.
			return stream.Send(&gatewayv1.ReadSlabResponse{Message: &gatewayv1.ReadSlabResponse_Header{Header: h}})
		}
		h.Bulk = &gatewayv1.BulkOffer{Host: t.Host(), Port: t.Port(), Ticket: t.ID()}
		if err := stream.Send(&gatewayv1.ReadSlabResponse{Message: &gatewayv1.ReadSlabResponse_Header{Header: h}}); err != nil {
			t.Cancel()
			return err
		}
		c, err := t.Wait(ctx)
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, bulk.ErrClosed):
			return errs.New(errs.Unavailable, "read_slab %q: the bulk listener is closing (the server is shutting down)", req.GetPath())
		default:
			return errs.New(errs.FailedPrecondition, "read_slab %q: the client did not connect to the bulk listener %s with its ticket within %v; it must connect there, or read without bulk",
				req.GetPath(), t.Addr(), s.bulk.TTL())
		}
		conn, w = c, bulk.NewWriter(c)
		stop = context.AfterFunc(ctx, func() { c.Close() })
		return nil
	}, nil, func(b gateway.Block) error {
		if w == nil {
			return sendInline(b, elem, func(pb *gatewayv1.Block, done func()) error {
				return wire.Send(stream, &gatewayv1.ReadSlabResponse{Message: &gatewayv1.ReadSlabResponse_Block{Block: pb}}, done)
			})
		}
		return sendInline(b, elem, func(pb *gatewayv1.Block, done func()) error {
			if err := w.Write(&gatewayv1.ReadSlabResponse{Message: &gatewayv1.ReadSlabResponse_Block{Block: pb}}, done); err != nil {
				return writeErr(err)
			}
			return nil
		})
	})
	if err == nil && w != nil {
		if werr := w.End(); werr != nil {
			err = writeErr(werr)
		}
	}
	return grpcerr.ToStatus(err)
}
