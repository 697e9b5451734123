package client_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"github.com/zarrgate/zarrgate/client"
	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/gateway"
	"github.com/zarrgate/zarrgate/gateway/arrayserver"
	"github.com/zarrgate/zarrgate/internal/grpcerr"
	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/internal/shm"
	"github.com/zarrgate/zarrgate/storesvc/memory"
)

// liar is a gateway whose ReadSlabShared sends what lie says: the client
// must turn every lie into DataLoss, never a panic or a wrong value.
type liar struct {
	*arrayserver.Server
	lie func(seg *shm.Segment, send func(*gatewayv1.ReadSlabSharedResponse) error) error
}

func (l *liar) ReadSlabShared(stream grpc.BidiStreamingServer[gatewayv1.ReadSlabSharedRequest, gatewayv1.ReadSlabSharedResponse]) error {
	if l.lie == nil {
		return status.Error(codes.Unimplemented, "method ReadSlabShared not implemented")
	}
	if _, err := stream.Recv(); err != nil {
		return err
	}
	seg, err := shm.Create(1 << 20)
	if err != nil {
		return err
	}
	defer seg.Close()
	return l.lie(seg, func(m *gatewayv1.ReadSlabSharedResponse) error {
		if err := stream.Send(m); err != nil {
			return err
		}
		if m.GetHeader().GetSharedSegment() != nil {
			if _, err := stream.Recv(); err != nil && err != io.EOF { // the attach answer
				return err
			}
		}
		return nil
	})
}

// serveLiar serves a liar (lie nil: no ReadSlabShared at all) on
// loopback and returns a client of it, both stopped with the test.
func serveLiar(t *testing.T, lie func(*shm.Segment, func(*gatewayv1.ReadSlabSharedResponse) error) error) *client.Client {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	g := gateway.New(memory.New(), codecsvc.NewLocal(), gateway.Config{})
	gatewayv1.RegisterArrayServiceServer(srv, &liar{Server: arrayserver.NewServer(g), lie: lie})
	go srv.Serve(lis)
	c, err := client.Dial(context.Background(), lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); srv.Stop() })
	return c
}

func header(shape []uint64, seg *shm.Segment) *gatewayv1.ReadSlabSharedResponse {
	h := &gatewayv1.SlabHeader{Shape: shape, DataType: "float32", ByteOrder: gatewayv1.ByteOrder_BYTE_ORDER_LITTLE_ENDIAN, ElementSize: 4}
	if seg != nil {
		h.SharedSegment = &gatewayv1.SharedSegment{Path: seg.Path, Size: uint64(len(seg.Data)), Token: seg.Token}
	}
	return &gatewayv1.ReadSlabSharedResponse{Message: &gatewayv1.ReadSlabSharedResponse_Header{Header: h}}
}

func sharedBlock(origin, shape []uint64, off, n uint64) *gatewayv1.ReadSlabSharedResponse {
	return &gatewayv1.ReadSlabSharedResponse{Message: &gatewayv1.ReadSlabSharedResponse_Block{Block: &gatewayv1.Block{
		Origin: origin, Shape: shape, Shared: &gatewayv1.SharedRange{Offset: off, Length: n}}}}
}

// TestSharedMemoryLies: a gateway that sends shared ranges outside its
// segment, shared blocks without a segment, ranges that do not match the
// block, blocks outside the slab, or a slab of another shape gets DataLoss
// from ReadInto and Blocks.
func TestSharedMemoryLies(t *testing.T) {
	if !shm.Supported {
		t.Skip("no shared memory on this platform")
	}
	const n = 512 // a 512 × 512 float32 array: large enough for shared memory
	lies := map[string]func(seg *shm.Segment, send func(*gatewayv1.ReadSlabSharedResponse) error) error{
		"range past the segment": func(seg *shm.Segment, send func(*gatewayv1.ReadSlabSharedResponse) error) error {
			send(header([]uint64{n, n}, seg))
			return send(sharedBlock([]uint64{0, 0}, []uint64{n, n}, shm.DataOffset, n*n*4))
		},
		"range over the token": func(seg *shm.Segment, send func(*gatewayv1.ReadSlabSharedResponse) error) error {
			send(header([]uint64{n, n}, seg))
			return send(sharedBlock([]uint64{0, 0}, []uint64{1, 4}, 0, 16))
		},
		"offset overflows": func(seg *shm.Segment, send func(*gatewayv1.ReadSlabSharedResponse) error) error {
			send(header([]uint64{n, n}, seg))
			return send(sharedBlock([]uint64{0, 0}, []uint64{1, 4}, 1<<63, 1<<63+16))
		},
		"shared block without a segment": func(seg *shm.Segment, send func(*gatewayv1.ReadSlabSharedResponse) error) error {
			send(header([]uint64{n, n}, nil))
			return send(sharedBlock([]uint64{0, 0}, []uint64{1, 4}, shm.DataOffset, 16))
		},
		"range shorter than the block": func(seg *shm.Segment, send func(*gatewayv1.ReadSlabSharedResponse) error) error {
			send(header([]uint64{n, n}, seg))
			return send(sharedBlock([]uint64{0, 0}, []uint64{2, 4}, shm.DataOffset, 16))
		},
		"block outside the slab": func(seg *shm.Segment, send func(*gatewayv1.ReadSlabSharedResponse) error) error {
			send(header([]uint64{n, n}, seg))
			return send(sharedBlock([]uint64{n, 0}, []uint64{1, 4}, shm.DataOffset, 16))
		},
		"slab of another shape": func(seg *shm.Segment, send func(*gatewayv1.ReadSlabSharedResponse) error) error {
			return send(header([]uint64{n + 1, n}, seg))
		},
	}
	for name, lie := range lies {
		t.Run(name, func(t *testing.T) {
			c := serveLiar(t, lie)
			ctx := context.Background()
			a, err := c.CreateArray(ctx, "a", client.ArraySpec{Shape: []int64{n, n}, DataType: "float32", ChunkShape: []int64{128, 128}})
			if err != nil {
				t.Fatal(err)
			}
			err = client.ReadInto(ctx, a, nil, make([]float32, n*n))
			if grpcerr.Code(err) != codes.DataLoss {
				t.Fatalf("ReadInto: %v, want DataLoss", err)
			}
			if name == "slab of another shape" {
				return // Blocks hands any shape on to its caller
			}
			_, blocks, err := a.Blocks(ctx, nil)
			for _, e := range blocks {
				if e != nil {
					err = e
					break
				}
			}
			if grpcerr.Code(err) != codes.DataLoss {
				t.Fatalf("Blocks: %v, want DataLoss", err)
			}
		})
	}
}

// TestSharedMemoryUnimplemented: against a gateway without ReadSlabShared
// the client reads through ReadSlab, and stops asking.
func TestSharedMemoryUnimplemented(t *testing.T) {
	c := serveLiar(t, nil)
	ctx := context.Background()
	const n = 512
	a, err := c.CreateArray(ctx, "a", client.ArraySpec{Shape: []int64{n, n}, DataType: "int32", ChunkShape: []int64{100, 100}})
	if err != nil {
		t.Fatal(err)
	}
	want := make([]int32, n*n)
	for i := range want {
		want[i] = int32(i)
	}
	if _, err := client.Write(ctx, a, nil, want); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		got, _, err := client.Read[int32](ctx, a, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("element %d = %d", i, got[i])
			}
		}
	}
}
