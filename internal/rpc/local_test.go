package rpc_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/internal/tracing"
)

// TestCallLocal: a local call runs through the server's unary
// interceptors (one of the test's sees its method and the metadata of the
// gRPC call LocalContext kept, not that call's request id), gets the
// default deadline and an access log line; a handler's panic and an
// error without a code leave as Internal. Before any unary call reached
// the server there is no chain to run.
func TestCallLocal(t *testing.T) {
	logs := &syncBuf{}
	var (
		mu   sync.Mutex
		seen []string // "method token"
	)
	record := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		tok := ""
		if v := metadata.ValueFromIncomingContext(ctx, "authorization"); len(v) == 1 {
			tok = v[0]
		}
		mu.Lock()
		seen = append(seen, info.FullMethod+" "+tok)
		mu.Unlock()
		return h(ctx, req)
	}
	srv := rpc.NewServer(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})), grpc.ChainUnaryInterceptor(record))
	srv.SetDefaultTimeouts(time.Hour, 3*time.Second)
	kept := make(chan context.Context, 1)
	srv.RegisterService(testService(func(ctx context.Context) error {
		kept <- srv.LocalContext(ctx)
		return nil
	}), struct{}{})
	if _, err := srv.CallLocal(context.Background(), "/test.Svc/Local", nil, 0, nil, nil); !errors.Is(err, rpc.ErrNoChain) {
		t.Fatalf("a local call before any unary call: %v, want ErrNoChain", err)
	}
	cc := listenAndDial(t, srv)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer t0k", tracing.RequestIDHeader, "opening-call-id")
	if err := callUnary(ctx, cc); err != nil {
		t.Fatal(err)
	}
	base := <-kept

	// An answer: the interceptor saw the method and the kept token; the
	// call had the default deadline and a request id of its own.
	resp, err := srv.CallLocal(base, "/test.Svc/Local", new(emptypb.Empty), 12, func(any) int { return 34 }, func(ctx context.Context, req any) (any, error) {
		d, ok := ctx.Deadline()
		if !ok || time.Until(d) > 3*time.Second || time.Until(d) < time.Second {
			t.Errorf("local call's deadline %v (%v), want the default of 3s", d, ok)
		}
		if id := tracing.RequestID(ctx); id == "" || id == "opening-call-id" {
			t.Errorf("local call's request id %q, want one of its own", id)
		}
		return req, nil
	})
	if err != nil || resp == nil {
		t.Fatalf("local call: %v, %v", resp, err)
	}
	mu.Lock()
	got := strings.Join(seen, ", ")
	mu.Unlock()
	if !strings.Contains(got, "/test.Svc/Local Bearer t0k") {
		t.Errorf("the interceptor saw %q, want the local call with the kept token", got)
	}
	// A panic and an error without a code: Internal.
	if _, err := srv.CallLocal(base, "/test.Svc/Local", new(emptypb.Empty), 0, nil, func(context.Context, any) (any, error) { panic("boom") }); status.Code(err) != codes.Internal {
		t.Errorf("a panicking local call: %v, want Internal", err)
	}
	if _, err := srv.CallLocal(base, "/test.Svc/Local", new(emptypb.Empty), 0, nil, func(context.Context, any) (any, error) { return nil, errors.New("plain") }); status.Code(err) != codes.Internal {
		t.Errorf("a local call's error without a code: %v, want Internal", err)
	}
	if _, err := srv.CallLocal(base, "/test.Svc/Local", new(emptypb.Empty), 0, nil, func(context.Context, any) (any, error) {
		return nil, status.Error(codes.NotFound, "no such thing")
	}); status.Code(err) != codes.NotFound {
		t.Errorf("a local call's NotFound: %v", err)
	}
	// The access log has a line per local call, with its sizes.
	log := logs.String()
	if n := strings.Count(log, "grpc.method=Local"); n != 4 {
		t.Errorf("%d access log lines of local calls, want 4:\n%s", n, log)
	}
	if !strings.Contains(log, "bytes_received=12 bytes_sent=34") {
		t.Errorf("no access log line with the local call's sizes:\n%s", log)
	}
}
