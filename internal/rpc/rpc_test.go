package rpc_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/grpcerr"
	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/internal/wire"
)

// syncBuf is a log sink the server writes from its goroutines.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// behaviour is what the test service's handlers do: they are given the
// call's context and return what the test wants a handler to return.
type behaviour func(ctx context.Context) error

// testService registers a unary method "Unary" and a bidi stream "Stream"
// whose handlers receive one message and run the behaviour.
func testService(b behaviour) *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: "test.Svc",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Unary", Handler: func(_ any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := new(emptypb.Empty)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, _ any) (any, error) { return new(emptypb.Empty), b(ctx) }
			if ic == nil {
				return h(ctx, in)
			}
			return ic(ctx, in, &grpc.UnaryServerInfo{FullMethod: "/test.Svc/Unary"}, h)
		}}},
		Streams: []grpc.StreamDesc{{StreamName: "Stream", ClientStreams: true, ServerStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
			if err := ss.RecvMsg(new(emptypb.Empty)); err != nil {
				return err
			}
			return b(ss.Context())
		}}, {StreamName: "Upload", ClientStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
			if err := ss.RecvMsg(new(emptypb.Empty)); err != nil {
				return err
			}
			if err := b(ss.Context()); err != nil {
				return err
			}
			for {
				if err := ss.RecvMsg(new(emptypb.Empty)); err == io.EOF {
					return ss.SendMsg(new(emptypb.Empty))
				} else if err != nil {
					return err
				}
			}
		}}},
	}
}

// serve runs an rpc.Server with the test service and returns a connection
// to it and the server's log.
func serve(t *testing.T, b behaviour, setup func(*rpc.Server)) (*grpc.ClientConn, *syncBuf) {
	t.Helper()
	logs := &syncBuf{}
	srv := rpc.NewServer(slog.New(slog.NewTextHandler(logs, nil)))
	if setup != nil {
		setup(srv)
	}
	srv.RegisterService(testService(b), struct{}{})
	return listenAndDial(t, srv), logs
}

// listenAndDial serves srv on loopback until the test ends and returns a
// connection to it.
func listenAndDial(t *testing.T, srv *rpc.Server) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	cc, err := rpc.Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close(); srv.Stop() })
	return cc
}

func callUnary(ctx context.Context, cc *grpc.ClientConn) error {
	return cc.Invoke(ctx, "/test.Svc/Unary", new(emptypb.Empty), new(emptypb.Empty))
}

func callStream(ctx context.Context, cc *grpc.ClientConn, send bool) error {
	s, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/test.Svc/Stream")
	if err != nil {
		return err
	}
	if send {
		if err := s.SendMsg(new(emptypb.Empty)); err != nil {
			return err
		}
	}
	s.CloseSend()
	for {
		if err := s.RecvMsg(new(emptypb.Empty)); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}

// TestSafetyNet: whatever a handler returns leaves as a status with a
// meaningful code; a handler's bug is Internal and logged as one, never
// Unknown.
func TestSafetyNet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cases := []struct {
		name   string
		ret    error
		panics bool
		want   codes.Code
		bug    bool // logged as a server bug
	}{
		{"coded error", errs.New(errs.NotFound, "key %q not found", "k"), false, codes.NotFound, false},
		{"wrapped coded error", errors.Join(errors.New("context"), errs.New(errs.OutOfRange, "past the end")), false, codes.OutOfRange, false},
		{"plain error", errors.New("disk on fire"), false, codes.Internal, true},
		{"bare io.EOF", io.EOF, false, codes.Internal, true},
		{"Unknown status", status.Error(codes.Unknown, "who knows"), false, codes.Internal, true},
		{"context error", context.Canceled, false, codes.Canceled, false},
		{"panic", errors.New("nil map"), true, codes.Internal, true},
		{"panic with a code", errs.New(errs.ResourceExhausted, "over the limit"), true, codes.ResourceExhausted, false},
	}
	for _, tc := range cases {
		for _, kind := range []string{"unary", "stream"} {
			cc, logs := serve(t, func(context.Context) error {
				if tc.panics {
					panic(tc.ret)
				}
				return tc.ret
			}, nil)
			var err error
			if kind == "unary" {
				err = callUnary(ctx, cc)
			} else {
				err = callStream(ctx, cc, true)
			}
			if got := status.Code(err); got != tc.want {
				t.Errorf("%s, %s: code %v (%v), want %v", tc.name, kind, got, err, tc.want)
			}
			if bug := strings.Contains(logs.String(), "server bug"); bug != tc.bug {
				t.Errorf("%s, %s: logged as a server bug: %v, want %v\n%s", tc.name, kind, bug, tc.bug, logs.String())
			}
		}
	}
	// A client that closes a stream before the message its handler needs
	// made the mistake: InvalidArgument, no bug.
	cc, logs := serve(t, func(context.Context) error { return nil }, nil)
	if err := callStream(ctx, cc, false); status.Code(err) != codes.InvalidArgument {
		t.Errorf("stream closed before its message: %v, want InvalidArgument", err)
	}
	if strings.Contains(logs.String(), "server bug") {
		t.Errorf("a client's early close logged as a bug:\n%s", logs)
	}
}

// TestDefaultDeadline: a call without a deadline gets the server's
// default, a stream the streaming one and a unary call the unary one, and
// the status says so; a client's own deadline is kept.
func TestDefaultDeadline(t *testing.T) {
	block := func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Second):
			return errs.New(errs.FailedPrecondition, "no deadline came")
		}
	}
	cc, _ := serve(t, block, func(s *rpc.Server) { s.SetDefaultTimeouts(300*time.Millisecond, 100*time.Millisecond) })
	bg := context.Background()
	for _, tc := range []struct {
		name string
		call func() error
		took time.Duration
	}{
		{"unary", func() error { return callUnary(bg, cc) }, 100 * time.Millisecond},
		{"stream", func() error { return callStream(bg, cc, true) }, 300 * time.Millisecond},
	} {
		start := time.Now()
		err := tc.call()
		took := time.Since(start)
		if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "default deadline") {
			t.Errorf("%s: %v, want DeadlineExceeded naming the default deadline", tc.name, err)
		}
		if took < tc.took || took > tc.took+2*time.Second {
			t.Errorf("%s: ended after %v, want about %v", tc.name, took, tc.took)
		}
	}
	// The client's own deadline, longer than the default, is kept.
	ctx, cancel := context.WithTimeout(bg, 700*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := callStream(ctx, cc, true)
	if status.Code(err) != codes.DeadlineExceeded || time.Since(start) < 600*time.Millisecond {
		t.Errorf("call with its own deadline: %v after %v, want DeadlineExceeded after about 700ms", err, time.Since(start))
	}
}

// TestCallsMarkedWithCodec: every call on an rpc.Server, unary or
// streaming, with or without a deadline, long-lived or not, is marked as
// using wire.Codec, so that the services' wire.Send takes the by-reference
// path; an interceptor added by the caller that wraps the stream keeps the
// mark. Without the mark, every large value would be copied again.
func TestCallsMarkedWithCodec(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	unmarked := func(ctx context.Context) error {
		if !wire.HasCodec(ctx) {
			// converted here: a plain server has no guard to give errs'
			// errors their status
			return grpcerr.ToStatus(errs.New(errs.FailedPrecondition, "call not marked as using wire.Codec"))
		}
		return nil
	}
	wrap := grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		return h(srv, &wrapped{ss, context.WithValue(ss.Context(), struct{}{}, 1)})
	})
	logs := &syncBuf{}
	srv := rpc.NewServer(slog.New(slog.NewTextHandler(logs, nil)), wrap)
	srv.RegisterService(testService(unmarked), struct{}{})
	srv.SetDefaultTimeouts(0, 0)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	cc, err := rpc.Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cc.Close(); srv.Stop() }()
	if err := callUnary(ctx, cc); err != nil {
		t.Errorf("unary: %v", err)
	}
	if err := callStream(ctx, cc, true); err != nil {
		t.Errorf("stream: %v", err)
	}
	if err := callStream(context.Background(), cc, true); err != nil {
		t.Errorf("stream without a deadline: %v", err)
	}

	// A plain gRPC server does not mark its calls: wire.Send copies there.
	plain := grpc.NewServer()
	plain.RegisterService(testService(unmarked), struct{}{})
	lis2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go plain.Serve(lis2)
	defer plain.Stop()
	cc2, err := rpc.Dial(lis2.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cc2.Close()
	if err := callStream(ctx, cc2, true); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("stream on a plain server: %v, want the handler to see no mark", err)
	}
}

// wrapped is a stream an interceptor wraps with a context of its own.
type wrapped struct {
	grpc.ServerStream
	ctx context.Context
}

func (w *wrapped) Context() context.Context { return w.ctx }

// goroutineID is the id of the calling goroutine, from its stack trace's
// first line ("goroutine 42 [running]:").
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	f := strings.Fields(string(buf))
	if len(f) < 2 {
		return ""
	}
	return f[1]
}

// TestCallsRunOnWorkers: calls run on the server's long-lived stream
// workers (one per processor), not on a new goroutine each: consecutive
// calls' handlers share their goroutines. With every worker busy, a call
// still runs (on a goroutine of its own).
func TestCallsRunOnWorkers(t *testing.T) {
	var (
		mu      sync.Mutex
		ids     = map[string]bool{}
		entered = make(chan struct{}, 64)
		release = make(chan struct{})
	)
	cc, _ := serve(t, func(ctx context.Context) error {
		mu.Lock()
		ids[goroutineID()] = true
		mu.Unlock()
		if md, _ := metadata.FromIncomingContext(ctx); len(md.Get("block")) > 0 {
			entered <- struct{}{}
			<-release
		}
		return nil
	}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang fails, not a slow machine
	defer cancel()
	const calls = 30
	for range calls {
		if err := callUnary(ctx, cc); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(ids); n > runtime.GOMAXPROCS(0) {
		t.Errorf("%d consecutive calls ran on %d goroutines, want at most one per processor (%d)", calls, n, runtime.GOMAXPROCS(0))
	}
	busy := runtime.GOMAXPROCS(0) + 2
	errc := make(chan error, busy)
	for range busy {
		go func() { errc <- callUnary(metadata.AppendToOutgoingContext(ctx, "block", "1"), cc) }()
	}
	for range busy {
		<-entered
	}
	if err := callUnary(ctx, cc); err != nil {
		t.Fatalf("a call while every worker is busy: %v", err)
	}
	close(release)
	for range busy {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
}
