// Package auth is who is calling: the identity of a call's caller (its
// Principal), established by the transport edge from an mTLS client
// certificate or a bearer token, and carried in the call's context to
// whatever decides what the caller may do (package authz) and records
// what it did (the audit log).
package auth

import "context"

// Anonymous is the name of the principal of a call that presented no
// credentials, where the server lets such calls in at all.
const Anonymous = "anonymous"

// Principal is an authenticated caller.
type Principal struct {
	// Name identifies the caller: a token's user, a JWT's subject (or the
	// claim the server is told to use), a client certificate's subject or
	// SAN; Anonymous for a call without credentials.
	Name string
	// Groups are the groups the credentials say the caller belongs to
	// (a token file's groups, a JWT's groups claim).
	Groups []string
	// Method is how the caller was authenticated: "mtls", "token", "jwt"
	// or "none".
	Method string
}

type principalKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the principal ctx carries, if any.
func FromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}
