package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/zarrgate/zarrgate/internal/grpcerr"
	"github.com/zarrgate/zarrgate/internal/wire"
)

// Server-side default deadlines, for calls whose client set none, so that
// no call holds memory, workers or store handles forever. They only bound
// calls that would otherwise be unbounded: a client that needs longer sets
// its own deadline, which is never shortened.
const (
	// DefaultStreamTimeout bounds a streaming call (ReadSlab, WriteSlab,
	// Get, Set, lists): 10 minutes move about 100 GiB on a LAN, more than
	// one call of an interactive client or a batch job's step moves.
	DefaultStreamTimeout = 10 * time.Minute
	// DefaultUnaryTimeout bounds a unary call. Unary calls carry at most
	// MaxMessageSize and do metadata work; the longest, erasing a prefix
	// or a node, erases about a million keys in this time on S3.
	DefaultUnaryTimeout = 2 * time.Minute
)

// longLived are streams that live as long as the connection and carry many
// requests, each with its own deadline: no default applies to them.
var longLived = map[string]bool{
	"/grpc.health.v1.Health/Watch":            true, // client-side health checking of workers
	"/zarrgate.codec.v1.CodecService/Process": true, // batches carry their caller's deadline
}

// errDefaultDeadline is the cause of a context ended by a default deadline.
type errDefaultDeadline struct{ d time.Duration }

func (e errDefaultDeadline) Error() string {
	return fmt.Sprintf("the call ran past the server's default deadline of %v for calls without one (--default-timeout, --default-unary-timeout); set a deadline on the call", e.d)
}

// SetDefaultTimeouts sets the deadlines given to calls without one:
// stream for streaming calls, unary for unary ones; 0 sets none. Call it
// before Serve.
func (s *Server) SetDefaultTimeouts(stream, unary time.Duration) {
	s.streamTimeout.Store(int64(stream))
	s.unaryTimeout.Store(int64(unary))
}

// RegisterService implements grpc.ServiceRegistrar: it registers the
// service on the gRPC server with its unary handlers' request decoding
// wrapped (see clientInput), its handlers wrapped to note the caller for
// the access log (notePrincipal), and notes which methods stream, for the
// default deadlines.
func (s *Server) RegisterService(desc *grpc.ServiceDesc, impl any) {
	d := *desc
	d.Methods = make([]grpc.MethodDesc, len(desc.Methods))
	for i, m := range desc.Methods {
		h := m.Handler
		m.Handler = func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			s.noteChain(ic)
			return h(srv, ctx, func(v any) error { return recvLenient(dec, v) }, innermost(ic))
		}
		d.Methods[i] = m
	}
	d.Streams = make([]grpc.StreamDesc, len(desc.Streams))
	for i, st := range desc.Streams {
		s.streaming["/"+desc.ServiceName+"/"+st.StreamName] = true
		h := st.Handler
		// The handler proper runs inside every interceptor: the caller is
		// known (authenticated) by then.
		st.Handler = func(srv any, ss grpc.ServerStream) error {
			notePrincipal(ss.Context())
			return h(srv, ss)
		}
		d.Streams[i] = st
	}
	s.Server.RegisterService(&d, impl)
}

// tap runs as each call's stream is created, so what it puts in the
// context is the stream's own: it marks the call as one whose codec is
// wire.Codec (the server forces it), so that handlers send large values
// by reference (wire.Send), and gives the call its default deadline.
// gRPC allows one tap handle per server, so an option passed to NewServer
// cannot replace this one.
func (s *Server) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	return s.tapDeadline(wire.WithCodec(ctx), info)
}

// tapDeadline gives a call without a deadline the default one. It runs as
// the stream is created, so the deadline is the stream's own: a handler
// blocked sending to a client that does not read is released by it too.
func (s *Server) tapDeadline(ctx context.Context, info *tap.Info) (context.Context, error) {
	if _, ok := ctx.Deadline(); ok || longLived[info.FullMethodName] {
		return ctx, nil
	}
	d := time.Duration(s.unaryTimeout.Load())
	if s.streaming[info.FullMethodName] {
		d = time.Duration(s.streamTimeout.Load())
	}
	if d <= 0 {
		return ctx, nil
	}
	ctx, cancel := context.WithTimeoutCause(ctx, d, errDefaultDeadline{d})
	// The stream's context ends with the call and cancels this one with
	// it; this only makes the release explicit.
	context.AfterFunc(ctx, cancel)
	return ctx, nil
}

// innermost wraps a unary call's interceptor chain so that the handler
// proper, inside every interceptor, notes the caller for the access log.
func innermost(ic grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	if ic == nil {
		return nil
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return ic(ctx, req, info, func(ctx context.Context, req any) (any, error) {
			notePrincipal(ctx)
			return handler(ctx, req)
		})
	}
}

// recvLenient receives m through recv, a message that does not parse
// giving InvalidArgument. gRPC would answer it itself, as Internal, which
// blames the server for the client's bytes.
func recvLenient(recv func(any) error, m any) error {
	l := &wire.Lenient{Msg: m}
	if err := recv(l); err != nil {
		return err
	}
	if l.Err != nil {
		hint := ""
		if strings.Contains(l.Err.Error(), "UTF-8") {
			hint = " (keys, paths and other strings must be valid UTF-8)"
		}
		return status.Errorf(codes.InvalidArgument, "malformed request message: %v%s", l.Err, hint)
	}
	return nil
}

// guardedStream receives messages leniently (see recvLenient) and notes
// whether the client closed its side.
type guardedStream struct {
	grpc.ServerStream
	sawEOF atomic.Bool
}

func (g *guardedStream) RecvMsg(m any) error {
	err := recvLenient(g.ServerStream.RecvMsg, m)
	if err == io.EOF {
		g.sawEOF.Store(true)
	}
	return err
}

// safetyNet is the last word on a handler's error: every error leaves as a
// status with a meaningful code. A handler that returns a plain error, a
// bare io.EOF it did not expect, or Unknown has a bug: the call gets
// Internal and the error is logged as one. io.EOF after the client closed
// its side of the stream is the client's doing: it ended the stream before
// the messages the call needs.
func safetyNet(ctx context.Context, logger *slog.Logger, method string, err error, clientClosed bool) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, io.EOF) && grpcerr.Code(err) == codes.Unknown {
		if clientClosed {
			return status.Errorf(codes.InvalidArgument, "%s: the client closed the stream before sending the messages the call needs", method)
		}
		logger.ErrorContext(ctx, "handler returned io.EOF without a status (server bug)", "method", method)
		return status.Errorf(codes.Internal, "%s: internal error (server bug, logged): unexpected end of stream", method)
	}
	code := grpcerr.Code(err)
	if code == codes.DeadlineExceeded {
		var dd errDefaultDeadline
		if errors.As(context.Cause(ctx), &dd) {
			return status.Error(codes.DeadlineExceeded, dd.Error())
		}
	}
	if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
		return err
	}
	switch code {
	case codes.Unknown:
		logger.ErrorContext(ctx, "handler returned an error without a status code (server bug)", "method", method, "error", err)
		return status.Errorf(codes.Internal, "internal error (server bug, logged): %v", err)
	case codes.OK:
		return nil
	}
	return status.Error(code, err.Error())
}

func (s *Server) unaryGuard(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	return resp, safetyNet(ctx, s.logger, info.FullMethod, err, false)
}

func (s *Server) streamGuard(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	g := &guardedStream{ServerStream: ss}
	err := handler(srv, g)
	if err != nil && info.IsClientStream && !info.IsServerStream {
		g.drain(err)
	}
	return safetyNet(ss.Context(), s.logger, info.FullMethod, err, g.sawEOF.Load())
}

// Bounds of what a client-streaming call that fails reads on before its
// status is sent (guardedStream.drain).
var (
	drainBytes = 4 << 20
	drainTime  = time.Second // a variable for tests
)

// drain reads and discards what the client still sends, up to drainBytes
// and drainTime, until it closes its side, when a client-streaming call
// (Set, WriteSlab: the client streams a value, the server answers once)
// failed before the client had closed it (refused by the policy after the
// first message, or a bad header). Bidirectional calls are conversations,
// whose clients wait for answers before they close: they are not drained. The status then
// follows the client's last message rather than crossing it: grpcio's
// asyncio client reports a write that fails because the call already
// ended as INTERNAL "Internal error from Core", hiding the status the
// server sent (grpc/grpc#36066), so zarr-python through ZarrgateStore saw
// INTERNAL instead of PERMISSION_DENIED on a refused write. Values larger
// than drainBytes can still meet it. A call that was cancelled, ran out of
// time, or was refused for want of resources reads nothing more.
func (g *guardedStream) drain(err error) {
	if g.sawEOF.Load() || g.Context().Err() != nil {
		return
	}
	switch grpcerr.Code(err) {
	case codes.Canceled, codes.DeadlineExceeded, codes.ResourceExhausted:
		return
	}
	done, limit := make(chan struct{}), drainBytes
	go func() {
		defer close(done)
		var f wire.Frame
		for n := 0; n < limit; {
			// The raw stream: the frames are counted and freed, never
			// parsed.
			if g.ServerStream.RecvMsg(&f) != nil {
				return
			}
			n += f.Len()
			f.Free()
		}
	}()
	t := time.NewTimer(drainTime)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		// Still reading: the status goes now, and ending the call
		// ends that read.
	}
}

// recovered is the status of a call whose handler panicked. A panic with
// a coded error is a deliberate abort with that code; any other panic is a
// server bug: Internal, logged with its stack.
func recovered(ctx context.Context, logger *slog.Logger, p any) error {
	if err, ok := p.(error); ok {
		if c := grpcerr.Code(err); c != codes.Unknown && c != codes.Internal {
			logger.WarnContext(ctx, "handler aborted by a panic with a status", "code", c, "error", err, "stack", string(debug.Stack()))
			return status.Error(c, err.Error())
		}
	}
	logger.ErrorContext(ctx, "panic in handler (server bug)", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
	return status.Errorf(codes.Internal, "internal error (server bug, logged): %v", p)
}
