package wire

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/types/known/emptypb"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"
)

// recorder is Codec counting the ByRef messages it marshals.
type recorder struct {
	encoding.CodecV2
	byRef *atomic.Int32
}

func (r recorder) Marshal(v any) (mem.BufferSlice, error) {
	if _, ok := v.(ByRef); ok {
		r.byRef.Add(1)
	}
	return r.CodecV2.Marshal(v)
}

// TestSend sends a large block with Send on a real gRPC server over
// loopback, once on a server forcing Codec that marks its calls (as
// internal/rpc does) and once on a plain grpc.NewServer(): both deliver
// the block intact and call done; only the first passes the message by
// reference, and the plain one calls done before Send returns.
func TestSend(t *testing.T) {
	data := randBytes(rand.New(rand.NewPCG(3, 4)), 3<<20)
	for _, ours := range []bool{true, false} {
		var byRef atomic.Int32
		var opts []grpc.ServerOption
		if ours {
			opts = append(opts, grpc.ForceServerCodecV2(recorder{Codec, &byRef}),
				grpc.InTapHandle(func(ctx context.Context, _ *tap.Info) (context.Context, error) { return WithCodec(ctx), nil }))
		}
		srv := grpc.NewServer(opts...)
		doneAtReturn := make(chan bool, 1)
		doneCalled := make(chan struct{})
		srv.RegisterService(&grpc.ServiceDesc{ServiceName: "test.Svc", HandlerType: (*any)(nil),
			Streams: []grpc.StreamDesc{{StreamName: "Read", ServerStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
				if err := ss.RecvMsg(new(emptypb.Empty)); err != nil {
					return err
				}
				var called atomic.Bool
				err := Send(ss, &gatewayv1.ReadSlabResponse{Message: &gatewayv1.ReadSlabResponse_Block{Block: &gatewayv1.Block{Data: data}}}, func() {
					if !called.Swap(true) {
						close(doneCalled)
					}
				})
				doneAtReturn <- called.Load()
				return err
			}}}}, struct{}{})
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go srv.Serve(lis)
		cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		s, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/test.Svc/Read")
		if err == nil {
			err = s.SendMsg(new(emptypb.Empty))
		}
		if err == nil {
			err = s.CloseSend()
		}
		got := new(gatewayv1.ReadSlabResponse)
		if err == nil {
			err = s.RecvMsg(got)
		}
		if err != nil {
			t.Fatalf("ours %v: %v", ours, err)
		}
		if !bytes.Equal(got.GetBlock().GetData(), data) {
			t.Errorf("ours %v: block arrived with %d bytes, not the %d sent", ours, len(got.GetBlock().GetData()), len(data))
		}
		atReturn := <-doneAtReturn
		select {
		case <-doneCalled:
		case <-ctx.Done():
			t.Errorf("ours %v: done never called", ours)
		}
		if want := int32(0); ours {
			want = 1
			if byRef.Load() != want {
				t.Errorf("our codec marshalled %d ByRef messages, want %d", byRef.Load(), want)
			}
		} else if !atReturn {
			t.Error("plain server: done not called by the time Send returned")
		}
		cancel()
		cc.Close()
		srv.Stop()
	}
}
