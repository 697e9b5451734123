package client

import (
	"context"
	"strings"

	"google.golang.org/grpc/credentials"

	"github.com/zarrgate/zarrgate/errs"
)

// WithToken sends token (a static token from the server's --tokens file,
// or a JWT) as "authorization: Bearer TOKEN" with every call. A token is
// a secret: Dial refuses to send it in plaintext except to a loopback
// address or a unix socket, so use it with WithTLS.
func WithToken(token string) Option { return func(o *options) { o.token = &token } }

// bearer is the per-RPC credential of WithToken.
type bearer struct {
	header string
	local  bool // plaintext allowed: the server is on this host
}

func newBearer(token, addr string, tls bool) (*bearer, error) {
	if token == "" || strings.IndexFunc(token, func(r rune) bool { return r <= ' ' || r >= 0x7f }) >= 0 {
		return nil, errs.New(errs.InvalidArgument, "token: empty, or with spaces or control characters (is it the whole token, without \"Bearer \"?)")
	}
	local := isLocal(addr)
	if !tls && !local {
		return nil, errs.New(errs.InvalidArgument, "a token is sent only over TLS (WithTLS), or in plaintext to a loopback address or unix socket; %s is neither", addr)
	}
	return &bearer{header: "Bearer " + token, local: local}, nil
}

func (b *bearer) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	// Again per call: the connection's credentials may have been replaced
	// by WithDialOptions.
	if ri, ok := credentials.RequestInfoFromContext(ctx); ok && !b.local {
		if err := credentials.CheckSecurityLevel(ri.AuthInfo, credentials.PrivacyAndIntegrity); err != nil {
			return nil, errs.New(errs.FailedPrecondition, "not sending the token over a connection without TLS")
		}
	}
	return map[string]string{"authorization": b.header}, nil
}

// RequireTransportSecurity is false so that the token also goes to a
// server on this host in plaintext; GetRequestMetadata refuses other
// plaintext connections.
func (b *bearer) RequireTransportSecurity() bool { return false }
