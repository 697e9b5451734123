// Slab writes: streaming blocks to WriteSlab.

package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"github.com/zarrgate/zarrgate/internal/grpcerr"
	"github.com/zarrgate/zarrgate/internal/wire"
)

// WriteStats reports what a write stored.
type WriteStats struct {
	Chunks, Bytes int64
}

// WriteBlocks writes the slab sel from blocks that tile it exactly.
func (a *Array) WriteBlocks(ctx context.Context, sel Selection, blocks iter.Seq2[Block, error]) (WriteStats, error) {
	return a.writeBlocks(ctx, sel, blocks, false)
}

// writeBlocks is WriteBlocks; with byRef set, block data is sent without
// a copy, for callers whose data does not change during the call.
func (a *Array) writeBlocks(ctx context.Context, sel Selection, blocks iter.Seq2[Block, error], byRef bool) (WriteStats, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := a.c.arrays.WriteSlab(ctx, noRetry)
	if err != nil {
		return WriteStats{}, grpcerr.FromStatus(err)
	}
	if err := stream.Send(&gatewayv1.WriteSlabRequest{Message: &gatewayv1.WriteSlabRequest_Header{Header: &gatewayv1.WriteSlabHeader{Path: a.Path, Selection: sel.proto()}}}); err != nil {
		return WriteStats{}, a.closeErr(stream, err)
	}
	for b, err := range blocks {
		if err != nil {
			return WriteStats{}, fmt.Errorf("write %q: %w", a.Path, err)
		}
		pb := &gatewayv1.Block{Origin: u64s(b.Origin), Shape: u64s(b.Shape), Data: b.Data}
		if b.Offsets != nil {
			pb.Offsets = u64s(b.Offsets)
		}
		var msg any = &gatewayv1.WriteSlabRequest{Message: &gatewayv1.WriteSlabRequest_Block{Block: pb}}
		if byRef {
			msg = wire.ByRef{Msg: msg.(*gatewayv1.WriteSlabRequest)}
		}
		if err := stream.SendMsg(msg); err != nil {
			return WriteStats{}, a.closeErr(stream, err)
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return WriteStats{}, grpcerr.FromStatus(err)
	}
	return WriteStats{Chunks: int64(resp.GetChunksWritten()), Bytes: int64(resp.GetBytesWritten())}, nil
}

// closeErr returns the server's status when a send failed because the
// server ended the call.
func (a *Array) closeErr(stream interface {
	CloseAndRecv() (*gatewayv1.WriteSlabResponse, error)
}, err error) error {
	if errors.Is(err, io.EOF) {
		_, err = stream.CloseAndRecv()
	}
	return grpcerr.FromStatus(err)
}
