// Package authgrpc authenticates every gRPC call a server takes: a pair
// of server interceptors that read the call's credentials (the
// authorization header, the client certificate the TLS handshake
// verified), ask an auth.Authenticator who the caller is, and put that
// Principal in the call's context (auth.FromContext), for the
// authorization interceptors (internal/authz/authzgrpc) that run after
// them and for the handlers.
//
// Two services are open to callers without credentials:
//   - health checks (grpc.health.v1): load balancers and Kubernetes probes
//     carry no credentials, and a health status says nothing about the
//     data;
//   - reflection (grpc.reflection.v1 and v1alpha): it answers only with
//     the API's schema, which is public anyway (proto/, the published
//     module), and tools need it before they can make any call at all:
//     grpcurl cannot even check health without it. Closing it would hide
//     nothing and break that.
package authgrpc

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/zarrgate/zarrgate/internal/auth"
	"github.com/zarrgate/zarrgate/internal/grpcerr"
)

// openPrefixes are the services whose calls need no credentials.
var openPrefixes = []string{"/grpc.health.v1.Health/", "/grpc.reflection.v1.ServerReflection/", "/grpc.reflection.v1alpha.ServerReflection/"}

// ServerOptions returns the interceptors as server options, to be given
// to rpc.NewServer before the authorization interceptors'.
func ServerOptions(a *auth.Authenticator) []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(Unary(a)), grpc.ChainStreamInterceptor(Stream(a))}
}

// Unary authenticates unary calls.
func Unary(a *auth.Authenticator) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, err := authenticate(ctx, a, info.FullMethod)
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// Stream authenticates streaming calls, before the handler receives any
// message.
func Stream(a *auth.Authenticator) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, err := authenticate(ss.Context(), a, info.FullMethod)
		if err != nil {
			return err
		}
		return handler(srv, &stream{ServerStream: ss, ctx: ctx})
	}
}

type stream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *stream) Context() context.Context { return s.ctx }

func authenticate(ctx context.Context, a *auth.Authenticator, method string) (context.Context, error) {
	for _, p := range openPrefixes {
		if strings.HasPrefix(method, p) {
			return ctx, nil
		}
	}
	var c auth.Credentials
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		c.Authorization = md.Get("authorization")
	}
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			if ch := ti.State.VerifiedChains; len(ch) > 0 && len(ch[0]) > 0 {
				c.Certificate = ch[0][0]
			}
		}
	}
	p, err := a.Authenticate(ctx, c)
	if err != nil {
		return nil, grpcerr.ToStatus(err)
	}
	return auth.WithPrincipal(ctx, p), nil
}
