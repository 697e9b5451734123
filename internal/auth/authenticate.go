package auth

import (
	"context"
	"crypto/x509"
	"strings"

	"github.com/zarrgate/zarrgate/errs"
)

// MaxAuthorizationBytes bounds the authorization header of a call: a
// larger one is refused before it is parsed. (JWTs with long group lists
// run to a few KiB.)
const MaxAuthorizationBytes = 16 << 10

// Authenticator establishes who is calling from the credentials a call
// presents, by whichever sources are configured.
type Authenticator struct {
	// Tokens returns the static tokens in force (a TokenWatcher's Tokens
	// method); nil: no token file.
	Tokens func() *Tokens
	// JWT verifies JWTs; nil: none are accepted.
	JWT *JWTVerifier
	// MTLS takes the identity of callers that present no bearer token
	// from their verified client certificate (FromCertificate).
	MTLS bool
	// AllowAnonymous lets calls without credentials in, as Anonymous
	// (Method "none"); otherwise they are Unauthenticated, unless
	// AnonymousIf says otherwise.
	AllowAnonymous bool
	// AnonymousIf, when set, is asked on every call without credentials
	// that AllowAnonymous does not let in: true lets it in as Anonymous.
	// A server with a policy sets it to whether the policy in force
	// grants the anonymous principal anything, so that the policy alone
	// decides what callers without credentials may do, and a policy that
	// grants them nothing refuses them here, as Unauthenticated, exactly
	// as a server without a policy does.
	AnonymousIf func() bool
}

// Credentials are what a call presented, as the transport found them.
type Credentials struct {
	// Authorization holds the values of the call's authorization headers.
	Authorization []string
	// Certificate is the client certificate the TLS handshake verified
	// (the leaf of the first verified chain), or nil.
	Certificate *x509.Certificate
}

// Authenticate returns the caller's principal. A bearer token, when
// present, decides (a JWT-shaped one goes to the JWT verifier, any other
// to the token file), and a bad one is refused even if a client
// certificate came too; without one, a verified client certificate (with
// MTLS); without either, Anonymous if allowed. Errors are Unauthenticated
// (Unavailable if a JWT issuer's keys cannot be fetched) and never quote
// the token.
func (a *Authenticator) Authenticate(ctx context.Context, c Credentials) (Principal, error) {
	size := 0
	for _, v := range c.Authorization {
		size += len(v)
	}
	switch {
	case size > MaxAuthorizationBytes:
		return Principal{}, errs.New(errs.Unauthenticated, "authorization header too large (%d bytes; at most %d)", size, MaxAuthorizationBytes)
	case len(c.Authorization) > 1:
		return Principal{}, errs.New(errs.Unauthenticated, "more than one authorization header")
	case len(c.Authorization) == 1:
		return a.bearer(ctx, c.Authorization[0])
	case a.MTLS && c.Certificate != nil:
		p, err := FromCertificate(c.Certificate)
		if err != nil {
			return Principal{}, errs.New(errs.Unauthenticated, "%v", err)
		}
		return p, nil
	case a.AllowAnonymous || a.AnonymousIf != nil && a.AnonymousIf():
		return Principal{Name: Anonymous, Method: "none"}, nil
	}
	return Principal{}, errs.New(errs.Unauthenticated, "no credentials: this server needs %s", a.Accepted())
}

// Accepted says which credentials the server takes ("an 'authorization:
// Bearer TOKEN' header or a client certificate"), for messages that ask
// a caller for them.
func (a *Authenticator) Accepted() string {
	var ways []string
	if a.Tokens != nil || a.JWT != nil {
		ways = append(ways, "an 'authorization: Bearer TOKEN' header")
	}
	if a.MTLS {
		ways = append(ways, "a client certificate")
	}
	if len(ways) == 0 {
		return "credentials"
	}
	return strings.Join(ways, " or ")
}

func (a *Authenticator) bearer(ctx context.Context, header string) (Principal, error) {
	scheme, tok, _ := strings.Cut(strings.TrimSpace(header), " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return Principal{}, errs.New(errs.Unauthenticated, "authorization header: want 'Bearer TOKEN'")
	}
	tok = strings.TrimLeft(tok, " ")
	if tok == "" {
		return Principal{}, errs.New(errs.Unauthenticated, "authorization header: empty bearer token")
	}
	if !isToken68(tok) {
		return Principal{}, errs.New(errs.Unauthenticated, "authorization header: malformed bearer token (want base64url characters)")
	}
	if isJWT(tok) {
		if a.JWT == nil {
			return Principal{}, errs.New(errs.Unauthenticated, "bearer token is a JWT, and this server accepts none")
		}
		return a.JWT.Verify(ctx, tok)
	}
	if a.Tokens == nil {
		if a.JWT != nil {
			return Principal{}, errs.New(errs.Unauthenticated, "bearer token is not a JWT (this server takes JWTs only)")
		}
		return Principal{}, errs.New(errs.Unauthenticated, "this server accepts no bearer tokens")
	}
	if ts := a.Tokens(); ts != nil {
		if p, ok := ts.Lookup(tok); ok {
			return p, nil
		}
	}
	return Principal{}, errs.New(errs.Unauthenticated, "unknown bearer token")
}

// isToken68 reports whether s is a token68 (RFC 7235): base64url or
// base64 characters and trailing '='.
func isToken68(s string) bool {
	s = strings.TrimRight(s, "=")
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~+/", c) >= 0) {
			return false
		}
	}
	return true
}

// isJWT reports whether tok has the shape of a JWS in compact form: three
// dot-separated parts, the first starting like a JSON object ("ey",
// base64url of `{"`). (Unsigned ones, with an empty third part, are
// JWT-shaped too: the verifier refuses them with a clear message.)
func isJWT(tok string) bool {
	return strings.Count(tok, ".") == 2 && strings.HasPrefix(tok, "ey")
}
