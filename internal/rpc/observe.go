package rpc

import (
	"context"
	"encoding/hex"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/zarrgate/zarrgate/internal/auth"
	"github.com/zarrgate/zarrgate/internal/tracing"
)

// call is what the access log line of one server call says, gathered
// while it runs: a stats handler sees every message's size and the final
// status, the handler's context shows who the caller turned out to be.
type call struct {
	method     string
	begin      time.Time
	recv, sent atomic.Int64
	// principal is set by the innermost wrapper (RegisterService), which
	// runs after authentication, in the goroutine that later ends the
	// call: no lock needed.
	principal string
}

type callKey struct{}

// observer is the server's stats handler: it gives each call its request
// id (the caller's x-request-id if it is acceptable, else the trace id
// when the call is traced, else a random one), counts the message bytes
// both ways, and writes the access log line when the call ends, with the
// final status (after every interceptor) and every byte counted (a unary
// response is sent after the interceptors return, so they cannot count
// it).
type observer struct{ logger *slog.Logger }

func (o observer) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (o observer) HandleConn(context.Context, stats.ConnStats)                       {}

func (o observer) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	id := ""
	// (Not metadata.FromIncomingContext, which copies all of it.)
	if v := metadata.ValueFromIncomingContext(ctx, tracing.RequestIDHeader); len(v) == 1 && tracing.ValidRequestID(v[0]) {
		id = v[0]
	}
	if id == "" {
		// The server span otelgrpc started (its handler runs first).
		if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
			id = sc.TraceID().String()
		} else {
			id = randomID()
		}
	}
	c := &call{method: info.FullMethodName, begin: time.Now()}
	return context.WithValue(tracing.WithRequestID(ctx, id), callKey{}, c)
}

// randomID is 128 random bits in hex, as a trace id is written. Not a
// secret: math/rand's per-thread generator is enough and costs nothing.
func randomID() string {
	var b [16]byte
	a, c := rand.Uint64(), rand.Uint64()
	for i := range 8 {
		b[i], b[8+i] = byte(a>>(8*i)), byte(c>>(8*i))
	}
	return hex.EncodeToString(b[:])
}

func (o observer) HandleRPC(ctx context.Context, s stats.RPCStats) {
	c, _ := ctx.Value(callKey{}).(*call)
	if c == nil {
		return
	}
	switch s := s.(type) {
	case *stats.InPayload:
		c.recv.Add(int64(s.Length))
	case *stats.OutPayload:
		c.sent.Add(int64(s.Length))
	case *stats.End:
		o.finish(ctx, c, s)
	}
}

// finish writes the access log line of a call.
func (o observer) finish(ctx context.Context, c *call, end *stats.End) {
	st, _ := status.FromError(end.Error)
	code := st.Code()
	lvl := slog.Level(codeToLevel(code))
	if !o.logger.Enabled(ctx, lvl) {
		return
	}
	service, method := splitMethod(c.method)
	principal := c.principal
	if principal == "" {
		principal = auth.Anonymous
	}
	attrs := []slog.Attr{
		slog.String("grpc.service", service), slog.String("grpc.method", method),
		slog.String("grpc.code", code.String()),
		slog.Float64("grpc.time_ms", float64(end.EndTime.Sub(c.begin).Microseconds())/1000),
		slog.String("principal", principal),
		slog.Int64("bytes_received", c.recv.Load()), slog.Int64("bytes_sent", c.sent.Load()),
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		attrs = append(attrs, slog.String("peer.address", p.Addr.String()))
	}
	if end.Error != nil {
		attrs = append(attrs, slog.String("grpc.error", st.Message()))
	}
	o.logger.LogAttrs(ctx, lvl, "finished call", attrs...)
}

func splitMethod(full string) (service, method string) {
	for i := len(full) - 1; i > 0; i-- {
		if full[i] == '/' {
			return full[1:i], full[i+1:]
		}
	}
	return "", full
}

// notePrincipal records who the call's caller is, from the context the
// handler gets (authentication, when configured, has run by then).
func notePrincipal(ctx context.Context) {
	if c, _ := ctx.Value(callKey{}).(*call); c != nil {
		if p, ok := auth.FromContext(ctx); ok {
			c.principal = p.Name
		}
	}
}

// The call's request id goes back to its caller in the response header
// when the call sends a response, and in the trailer when it fails before
// sending any (refused by authentication or authorization, or failed in
// the handler): never as a header of a failed call, because a response
// with headers commits a gRPC call: a call that failed UNAVAILABLE with a
// header could no longer be retried by a client's gRPC retry policy
// (clients in other languages configure one; gRPC retries only calls that
// got a trailers-only answer).
// The interceptors are first in the chain, so refused calls carry the id
// too.

func requestIDUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if grpc.ServerTransportStreamFromContext(ctx) == nil {
		// A local call (Server.CallLocal: a small read over its kept
		// connection) has no header to set; asking gRPC anyway costs an
		// error that prints the whole context (2.5 % of a small read's
		// CPU in the gateway).
		return resp, err
	}
	if id := tracing.RequestID(ctx); id != "" {
		if err == nil {
			grpc.SetHeader(ctx, metadata.Pairs(tracing.RequestIDHeader, id))
		} else {
			grpc.SetTrailer(ctx, metadata.Pairs(tracing.RequestIDHeader, id))
		}
	}
	return resp, err
}

func requestIDStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	id := tracing.RequestID(ss.Context())
	if id == "" {
		return handler(srv, ss)
	}
	w := &idStream{ServerStream: ss, md: metadata.Pairs(tracing.RequestIDHeader, id)}
	err := handler(srv, w)
	if !w.sent.Load() {
		if err == nil {
			ss.SetHeader(w.md)
		} else {
			ss.SetTrailer(w.md)
		}
	}
	return err
}

// idStream adds the request id to the header of a stream that sends one.
type idStream struct {
	grpc.ServerStream
	md   metadata.MD
	sent atomic.Bool
}

func (s *idStream) header() {
	if !s.sent.Swap(true) {
		s.ServerStream.SetHeader(s.md)
	}
}

func (s *idStream) SendHeader(md metadata.MD) error {
	s.header()
	return s.ServerStream.SendHeader(md)
}

func (s *idStream) SendMsg(m any) error {
	s.header()
	return s.ServerStream.SendMsg(m)
}

// forwardRequestID sends the request id of the call a client call is made
// for (the gateway's calls to its workers) on to the server, so that the
// workers' log lines of that call carry the same id.
func forwardRequestID(ctx context.Context) context.Context {
	if id := tracing.RequestID(ctx); id != "" {
		return metadata.AppendToOutgoingContext(ctx, tracing.RequestIDHeader, id)
	}
	return ctx
}

func forwardUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(forwardRequestID(ctx), method, req, reply, cc, opts...)
}

func forwardStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return streamer(forwardRequestID(ctx), desc, cc, method, opts...)
}

// LogHandler wraps h so that every record logged with a call's context
// carries the call's request id ("request_id"), and its trace id
// ("trace_id") when that is not the request id already.
func LogHandler(h slog.Handler) slog.Handler { return logHandler{h} }

type logHandler struct{ slog.Handler }

func (h logHandler) Handle(ctx context.Context, r slog.Record) error {
	id := tracing.RequestID(ctx)
	if id != "" {
		r.AddAttrs(slog.String("request_id", id))
	}
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		if t := sc.TraceID().String(); t != id {
			r.AddAttrs(slog.String("trace_id", t))
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return logHandler{h.Handler.WithAttrs(as)}
}

func (h logHandler) WithGroup(name string) slog.Handler {
	return logHandler{h.Handler.WithGroup(name)}
}
