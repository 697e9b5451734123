package rpc_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zarrgate/zarrgate/internal/rpc"
)

// A client-streaming call refused after its first message (as the policy
// refuses a Set or WriteSlab) reads on what the client still sends, until
// the client closes its side, before its status goes: the client's later
// messages are taken, not refused because the call already ended (which
// grpcio's asyncio client reports as INTERNAL, hiding the status). What it
// reads on is bounded, in bytes and in time. A bidirectional call, a
// conversation, is refused at once.
func TestRefusedStreamDrainsClient(t *testing.T) {
	refuse := func(context.Context) error { return status.Error(codes.PermissionDenied, "no") }
	open := func(t *testing.T, cc *grpc.ClientConn) grpc.ClientStream {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		t.Cleanup(cancel)
		s, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true}, "/test.Svc/Upload")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.SendMsg(wrapperspb.Bytes(nil)); err != nil {
			t.Fatal(err)
		}
		return s
	}
	status := func(s grpc.ClientStream) error {
		return s.RecvMsg(wrapperspb.Bytes(nil))
	}

	t.Run("client sends the rest", func(t *testing.T) {
		cc, _ := serve(t, refuse, nil)
		s := open(t, cc)
		time.Sleep(200 * time.Millisecond) // the server has refused by now
		for i := range 4 {
			if err := s.SendMsg(wrapperspb.Bytes(make([]byte, 64<<10))); err != nil {
				t.Fatalf("message %d after the refusal: %v (the call ended before the client's side)", i+1, err)
			}
		}
		s.CloseSend()
		if err := status(s); grpcCode(err) != codes.PermissionDenied {
			t.Fatalf("status %v, want PermissionDenied", err)
		}
	})

	t.Run("client never closes", func(t *testing.T) {
		rpc.SetDrain(t, 4<<20, 300*time.Millisecond)
		cc, _ := serve(t, refuse, nil)
		s := open(t, cc)
		start := time.Now()
		if err := status(s); grpcCode(err) != codes.PermissionDenied {
			t.Fatalf("status %v, want PermissionDenied", err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("status after %v", d)
		}
	})

	t.Run("client sends too much", func(t *testing.T) {
		rpc.SetDrain(t, 1<<20, time.Minute)
		cc, _ := serve(t, refuse, nil)
		s := open(t, cc)
		// The server's receive window (8 MiB) takes what the client sends
		// whether the server reads it or not, so on a busy machine the
		// client may fill it before the call ends; past it, sends wait
		// for the server, which reads 1 MiB and ends the call. A server
		// that read on would take all 32 MiB.
		const msg = 128 << 10
		var err error
		sent := 0
		for ; sent < 32<<20 && err == nil; sent += msg {
			err = s.SendMsg(wrapperspb.Bytes(make([]byte, msg)))
		}
		if !errors.Is(err, io.EOF) || sent > 10<<20 {
			t.Fatalf("%d KiB sent after the refusal, last send %v: want the call ended once the 8 MiB window and the 1 MiB drained were taken", sent>>10, err)
		}
		if err := status(s); grpcCode(err) != codes.PermissionDenied {
			t.Fatalf("status %v, want PermissionDenied", err)
		}
	})

	t.Run("bidirectional", func(t *testing.T) {
		rpc.SetDrain(t, 4<<20, time.Minute)
		cc, _ := serve(t, refuse, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		s, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/test.Svc/Stream")
		if err != nil {
			t.Fatal(err)
		}
		s.SendMsg(wrapperspb.Bytes(nil))
		start := time.Now()
		if err := status(s); grpcCode(err) != codes.PermissionDenied {
			t.Fatalf("status %v, want PermissionDenied", err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("a refused conversation answered after %v", d)
		}
	})
}

func grpcCode(err error) codes.Code { return status.Code(err) }
