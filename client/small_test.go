package client_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"github.com/zarrgate/zarrgate/client"
	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/gateway"
	"github.com/zarrgate/zarrgate/gateway/arrayserver"
	"github.com/zarrgate/zarrgate/internal/grpcerr"
	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/storesvc/memory"
)

// smallLiar is a gateway whose ReadSlabSmall answers what lie returns
// (and counts its calls); its other methods are a real gateway's.
type smallLiar struct {
	*arrayserver.Server
	calls int
	lie   func(real *gatewayv1.ReadSlabSmallResponse) (*gatewayv1.ReadSlabSmallResponse, error)
}

func (l *smallLiar) ReadSlabSmall(ctx context.Context, req *gatewayv1.ReadSlabSmallRequest) (*gatewayv1.ReadSlabSmallResponse, error) {
	l.calls++
	resp, err := l.Server.ReadSlabSmall(ctx, req)
	if err != nil {
		return nil, err
	}
	return l.lie(resp)
}

// serveSmallLiar serves l on loopback with a 100 × 100 int32 array "a"
// holding 0, 1, 2, … and returns a client of it and the array.
func serveSmallLiar(t *testing.T, l *smallLiar) (*client.Client, *client.Array, []int32) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	l.Server = arrayserver.NewServer(gateway.New(memory.New(), codecsvc.NewLocal(), gateway.Config{}))
	gatewayv1.RegisterArrayServiceServer(srv, l)
	go srv.Serve(lis)
	c, err := client.Dial(context.Background(), lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); srv.Stop() })
	ctx := context.Background()
	a, err := c.CreateArray(ctx, "a", client.ArraySpec{Shape: []int64{100, 100}, DataType: "int32", ChunkShape: []int64{30, 30}})
	if err != nil {
		t.Fatal(err)
	}
	want := make([]int32, 100*100)
	for i := range want {
		want[i] = int32(i)
	}
	if _, err := client.Write(ctx, a, nil, want); err != nil {
		t.Fatal(err)
	}
	return c, a, want
}

// TestReadSmallLies: a gateway whose ReadSlabSmall answer does not match
// the slab (no header, variable-length elements, a block outside the
// slab, a block's data of the wrong length, blocks missing) gets
// DataLoss from ReadInto, never a panic or a wrong value.
func TestReadSmallLies(t *testing.T) {
	lies := map[string]func(r *gatewayv1.ReadSlabSmallResponse){
		"no header":          func(r *gatewayv1.ReadSlabSmallResponse) { r.Header = nil },
		"variable length":    func(r *gatewayv1.ReadSlabSmallResponse) { r.Header.ElementSize = 0 },
		"other shape":        func(r *gatewayv1.ReadSlabSmallResponse) { r.Header.Shape[0]++ },
		"block outside":      func(r *gatewayv1.ReadSlabSmallResponse) { r.Blocks[0].Origin[0] = 50 },
		"short data":         func(r *gatewayv1.ReadSlabSmallResponse) { r.Blocks[0].Data = r.Blocks[0].Data[4:] },
		"a block missing":    func(r *gatewayv1.ReadSlabSmallResponse) { r.Blocks = r.Blocks[1:] },
		"huge shape":         func(r *gatewayv1.ReadSlabSmallResponse) { r.Blocks[0].Shape = []uint64{1 << 62, 1 << 62} },
		"rank of the blocks": func(r *gatewayv1.ReadSlabSmallResponse) { r.Blocks[0].Origin = r.Blocks[0].Origin[:1] },
	}
	for name, lie := range lies {
		t.Run(name, func(t *testing.T) {
			l := &smallLiar{lie: func(r *gatewayv1.ReadSlabSmallResponse) (*gatewayv1.ReadSlabSmallResponse, error) {
				lie(r)
				return r, nil
			}}
			_, a, _ := serveSmallLiar(t, l)
			sel := client.Selection{{Start: 20, Stop: 40, Step: 1}, {Start: 25, Stop: 35, Step: 1}} // 4 chunks
			err := client.ReadInto(context.Background(), a, sel, make([]int32, 20*10))
			if grpcerr.Code(err) != codes.DataLoss || l.calls != 1 {
				t.Fatalf("ReadInto after %d ReadSlabSmall calls: %v, want DataLoss after 1", l.calls, err)
			}
		})
	}
}

// TestReadSmallFallsBack: the client reads small slabs with
// ReadSlabSmall, and the same data through ReadSlab from a gateway that
// does not implement it (asking once only) or refuses the slab as too
// large for it.
func TestReadSmallFallsBack(t *testing.T) {
	for name, c := range map[string]struct {
		err       error
		wantCalls int
	}{
		"implemented":   {nil, 3},
		"unimplemented": {status.Error(codes.Unimplemented, "unknown method ReadSlabSmall for service zarrgate.gateway.v1.ArrayService"), 1},
		"too large":     {status.Error(codes.ResourceExhausted, `read_slab_small "a": the slab has 800 bytes or more, more than ReadSlabSmall returns (100); read it with ReadSlab`), 3},
	} {
		t.Run(name, func(t *testing.T) {
			l := &smallLiar{lie: func(r *gatewayv1.ReadSlabSmallResponse) (*gatewayv1.ReadSlabSmallResponse, error) {
				if c.err != nil {
					return nil, c.err
				}
				return r, nil
			}}
			_, a, want := serveSmallLiar(t, l)
			for i := range 3 {
				y, x := int64(7+i*11), int64(3+i*17)
				got := make([]int32, 40*30)
				if err := client.ReadInto(context.Background(), a, client.Selection{{Start: y, Stop: y + 40, Step: 1}, {Start: x, Stop: x + 30, Step: 1}}, got); err != nil {
					t.Fatal(err)
				}
				for k, v := range got {
					if w := want[(y+int64(k/30))*100+x+int64(k%30)]; v != w {
						t.Fatalf("read %d: element %d = %d, want %d", i, k, v, w)
					}
				}
			}
			if l.calls != c.wantCalls {
				t.Errorf("%d ReadSlabSmall calls for 3 reads, want %d", l.calls, c.wantCalls)
			}
		})
	}
}
