package rpc

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/zarrgate/zarrgate/internal/tracing"
)

// Local calls: a unary method's handler run by the server itself for a
// request that came another way than a gRPC call (the small reads of a
// bulk connection, gateway/arrayserver), exactly as a gRPC call of the
// method is run: through every unary interceptor of the server
// (authentication, authorization and its audit log, metrics, panic
// recovery, the guard of status codes), with the default deadline for
// unary calls, a request id of its own and an access log line. What a
// local call does not get is a trace span (the tracing stats handler sees
// gRPC calls only).

// unaryChain is the server's unary interceptor chain, as gRPC hands it to
// every unary method's handler.
type unaryChain struct{ ic grpc.UnaryServerInterceptor }

// noteChain records the server's unary interceptor chain the first time a
// unary call passes it to a handler: gRPC does not expose it otherwise.
// It is the same function for every call of the server.
func (s *Server) noteChain(ic grpc.UnaryServerInterceptor) {
	if s.chain.Load() == nil {
		s.chain.Store(&unaryChain{ic})
	}
}

// ErrNoChain is CallLocal's error before any unary call reached the
// server (its interceptor chain is not known yet).
var ErrNoChain = errors.New("rpc: no unary call has reached the server yet: its interceptor chain is not known")

// CallLocal runs handler for req as a unary call of method (a full method
// name, "/package.Service/Method") made by the caller whose credentials
// ctx carries (incoming metadata and peer, as in a gRPC call's context:
// LocalContext's), through the server's unary interceptors, and writes
// the call's access log line. recvBytes is the request's size for the
// log; the response's is taken from sentBytes, when given, after the call.
func (s *Server) CallLocal(ctx context.Context, method string, req any, recvBytes int, sentBytes func(resp any) int, handler grpc.UnaryHandler) (any, error) {
	ch := s.chain.Load()
	if ch == nil {
		return nil, ErrNoChain
	}
	c := &call{method: method, begin: time.Now()}
	c.recv.Store(int64(recvBytes))
	ctx = context.WithValue(tracing.WithRequestID(ctx, randomID()), callKey{}, c)
	if _, ok := ctx.Deadline(); !ok {
		if d := time.Duration(s.unaryTimeout.Load()); d > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeoutCause(ctx, d, errDefaultDeadline{d})
			defer cancel()
		}
	}
	inner := func(ctx context.Context, req any) (any, error) {
		notePrincipal(ctx)
		return handler(ctx, req)
	}
	var resp any
	var err error
	if ch.ic != nil {
		resp, err = ch.ic(ctx, req, &grpc.UnaryServerInfo{FullMethod: method}, inner)
	} else {
		resp, err = inner(ctx, req)
	}
	if err == nil && sentBytes != nil {
		c.sent.Store(int64(sentBytes(resp)))
	}
	if err != nil {
		// As gRPC would send it: a status.
		err = status.Convert(err).Err()
	}
	observer{s.logger}.finish(ctx, c, &stats.End{EndTime: time.Now(), Error: err})
	return resp, err
}

// LocalContext returns a context for the local calls made on behalf of
// the caller of the gRPC call ctx belongs to: with that call's metadata
// (its authorization header among them; not its request id) and its peer
// (with the TLS state its client certificate was verified by), and
// nothing else of it: not its deadline, cancellation, request id or
// trace. Each local call presents the credentials anew, so that one
// revoked or expired since, or a policy changed since, refuses it.
func (s *Server) LocalContext(ctx context.Context) context.Context {
	md, _ := metadata.FromIncomingContext(ctx) // a copy
	if md == nil {
		md = metadata.MD{}
	}
	delete(md, tracing.RequestIDHeader)
	out := metadata.NewIncomingContext(context.Background(), md)
	if p, ok := peer.FromContext(ctx); ok {
		out = peer.NewContext(out, p)
	}
	return out
}
