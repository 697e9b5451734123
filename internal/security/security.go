// Package security builds the security of a zarrgate server from its
// settings — TLS on the listener, authentication of every call,
// authorization and the audit log — and chains them in the one order that
// works (Chain). The serving commands (cmd/zarrgate, serveWith) build
// their servers with it, and so does the authorization matrix that drives
// the same stack in process with real credentials
// (internal/authz/authzgrpc, TestMatrixRealCredentials): what that test
// checks is what is deployed, not a copy of it.
//
// Errors name the settings by the zarrgate flags that set them (--tokens,
// --policy…), the names operators know them by.
package security

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"

	"google.golang.org/grpc"

	"github.com/zarrgate/zarrgate/internal/auth"
	"github.com/zarrgate/zarrgate/internal/auth/authgrpc"
	"github.com/zarrgate/zarrgate/internal/authz"
	"github.com/zarrgate/zarrgate/internal/authz/authzgrpc"
	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/internal/tlsconf"
)

// TLS is a listener's TLS (--tls-cert, --tls-key, --client-ca).
type TLS struct {
	CertFile, KeyFile string
	// ClientCAFile, when set, makes clients present a certificate that
	// verifies against it (mTLS).
	ClientCAFile string
}

// ServerOptions returns the option that serves TLS (1.2 or newer, ALPN h2)
// with the files, reloaded when they change; none when CertFile is empty.
// (Whether plaintext may be served at all depends on the address: the
// caller decides.)
func (c TLS) ServerOptions(logger *slog.Logger) ([]grpc.ServerOption, error) {
	if c.CertFile == "" && c.KeyFile == "" && c.ClientCAFile == "" {
		return nil, nil
	}
	cfg, err := tlsconf.Server(c.CertFile, c.KeyFile, c.ClientCAFile, logger, "h2")
	if err != nil {
		return nil, err
	}
	return []grpc.ServerOption{rpc.ServerTLS(cfg)}, nil
}

// Authentication is who may call (--tokens, --oidc-issuer or --jwks-url,
// --allow-anonymous; MTLS is --client-ca being set).
type Authentication struct {
	// TokensFile is a token file (auth.ParseTokens), watched for changes.
	TokensFile string
	// JWT, when set, is how JWTs are verified (auth.NewJWTVerifier).
	JWT *auth.JWTConfig
	// MTLS takes the identity of callers without a bearer token from their
	// verified client certificate.
	MTLS bool
	// AllowAnonymous lets calls without credentials in as anonymous.
	AllowAnonymous bool
	// AnonymousIf, when set, lets calls without credentials in as
	// anonymous while it returns true: Authorizer.GrantsAnonymous, so
	// that a policy granting anonymous something needs no
	// --allow-anonymous (auth.Authenticator.AnonymousIf).
	AnonymousIf func() bool
}

// ServerOptions returns the authentication interceptors (none when no
// source is configured: every call is then anonymous), and the credentials
// they accept, in words ("" when none: auth.Authenticator.Accepted). The
// token file and the issuer's keys are read here, so a bad file or an
// unreachable issuer fails start-up; the token file is then watched until
// ctx is done.
func (a Authentication) ServerOptions(ctx context.Context, logger *slog.Logger) ([]grpc.ServerOption, string, error) {
	au, err := a.Authenticator(ctx, logger)
	if err != nil || au == nil {
		return nil, "", err
	}
	return authgrpc.ServerOptions(au), au.Accepted(), nil
}

// Authenticator returns the authenticator of the settings (nil when no
// source is configured: every call is then anonymous), for listeners
// other than gRPC's (the HTTP one, internal/httpapi). The token file and
// the issuer's keys are read here, as in ServerOptions.
func (a Authentication) Authenticator(ctx context.Context, logger *slog.Logger) (*auth.Authenticator, error) {
	if a.TokensFile == "" && a.JWT == nil && !a.MTLS {
		return nil, nil
	}
	au := &auth.Authenticator{MTLS: a.MTLS, AllowAnonymous: a.AllowAnonymous, AnonymousIf: a.AnonymousIf}
	sources := []any{"mtls", a.MTLS, "allow_anonymous", a.AllowAnonymous, "anonymous_by_policy", a.AnonymousIf != nil}
	if a.TokensFile != "" {
		w, err := auth.NewTokenWatcher(a.TokensFile, logger)
		if err != nil {
			return nil, fmt.Errorf("--tokens: %w", err)
		}
		go w.Run(ctx, auth.DefaultReloadInterval)
		au.Tokens = w.Tokens
		sources = append(sources, "tokens", a.TokensFile, "token_entries", w.Tokens().Len())
	}
	if a.JWT != nil {
		v, err := auth.NewJWTVerifier(ctx, *a.JWT)
		if err != nil {
			return nil, fmt.Errorf("JWT verification (--oidc-issuer or --jwks-url): %w", err)
		}
		au.JWT = v
		sources = append(sources, "jwt_issuer", v.Issuer(), "jwt_audience", a.JWT.Audience)
	}
	logger.Info("authentication required", sources...)
	return au, nil
}

// Authorization is what callers may do (--policy) and the record of what
// they did (--audit-log).
type Authorization struct {
	// PolicyFile is a policy (authz.Parse), watched for changes; empty: no
	// authorization.
	PolicyFile string
	// AuditLog is where audit records go (authz.OpenAuditLog: a file, or
	// "-" for Stderr); empty: none.
	AuditLog string
	Stderr   io.Writer
}

// Load opens the audit log and reads the policy (nothing without either).
// An invalid policy fails here, at start-up; the policy is then watched
// until ctx is done. Close the Authorizer to close the audit log.
func (a Authorization) Load(ctx context.Context, logger *slog.Logger) (*Authorizer, error) {
	z := &Authorizer{release: func() {}}
	if a.PolicyFile == "" && a.AuditLog == "" {
		return z, nil
	}
	z.enabled = true
	closeAudit := func() error { return nil }
	if a.AuditLog != "" {
		w, cl, err := authz.OpenAuditLog(a.AuditLog, a.Stderr)
		if err != nil {
			return nil, err
		}
		z.c.Audit, closeAudit = authz.NewAuditor(w), cl
	}
	if a.PolicyFile != "" {
		w, err := authz.NewWatcher(a.PolicyFile, logger)
		if err != nil {
			closeAudit()
			return nil, fmt.Errorf("--policy: %w", err)
		}
		z.c.Policy = w.Policy
		go w.Run(ctx, authz.DefaultReloadInterval)
		logger.Info("authorization policy in force", "policy", a.PolicyFile)
	}
	z.release = func() { closeAudit() }
	return z, nil
}

// Authorizer is a loaded Authorization: the policy in force and the audit
// log, before the interceptors are made. It is loaded before
// authentication is set up, because the policy decides whether callers
// without credentials get in (GrantsAnonymous), and authentication in
// turn tells the interceptors what credentials it accepts (for the
// message of a refused caller who presented none).
type Authorizer struct {
	c       authzgrpc.Config
	enabled bool
	release func()
}

// GrantsAnonymous returns, for Authentication.AnonymousIf, whether the
// policy in force (as reloaded) grants the anonymous principal anything;
// nil without a policy.
func (z *Authorizer) GrantsAnonymous() func() bool {
	if z.c.Policy == nil {
		return nil
	}
	return func() bool {
		pol := z.c.Policy()
		return pol != nil && pol.GrantsAnonymous()
	}
}

// ServerOptions returns the authorization and audit interceptors (none
// without a policy and an audit log); credentials is what authentication
// accepts (Authentication.ServerOptions), "" without authentication.
func (z *Authorizer) ServerOptions(credentials string) []grpc.ServerOption {
	if !z.enabled {
		return nil
	}
	c := z.c
	c.Credentials = credentials
	return authzgrpc.ServerOptions(c)
}

// Close closes the audit log.
func (z *Authorizer) Close() { z.release() }

// Auth sets up authentication and authorization in the order they depend
// on each other: the policy first, then authentication (letting callers
// without credentials in while the policy grants anonymous something),
// then the authorization interceptors. It returns both sets of server
// options (for Chain) and what closes the audit log.
func Auth(ctx context.Context, logger *slog.Logger, authn Authentication, authz Authorization) (authnOpts, authzOpts []grpc.ServerOption, closeAll func(), err error) {
	st, err := Load(ctx, logger, authn, authz)
	if err != nil {
		return nil, nil, nil, err
	}
	return st.AuthnOptions, st.AuthzOptions, st.Close, nil
}

// Stack is the security of a server, loaded once and applied to each of
// its listeners: the gRPC interceptors, and the same authenticator,
// policy and audit log for the HTTP listener (internal/httpapi).
type Stack struct {
	// AuthnOptions and AuthzOptions are the gRPC server options (for
	// Chain).
	AuthnOptions, AuthzOptions []grpc.ServerOption
	// Authenticator is nil when no credentials are configured.
	Authenticator *auth.Authenticator
	// Policy returns the policy in force; nil without one.
	Policy func() *authz.Policy
	// Audit is the audit log; nil without one.
	Audit *authz.Auditor
	// Close closes the audit log.
	Close func()
}

// Load is Auth, returning the whole Stack.
func Load(ctx context.Context, logger *slog.Logger, authn Authentication, az Authorization) (*Stack, error) {
	z, err := az.Load(ctx, logger)
	if err != nil {
		return nil, err
	}
	if authn.AnonymousIf == nil {
		authn.AnonymousIf = z.GrantsAnonymous()
	}
	au, err := authn.Authenticator(ctx, logger)
	if err != nil {
		z.Close()
		return nil, err
	}
	st := &Stack{Authenticator: au, Policy: z.c.Policy, Audit: z.c.Audit, Close: z.Close}
	accepted := ""
	if au != nil {
		st.AuthnOptions, accepted = authgrpc.ServerOptions(au), au.Accepted()
	}
	st.AuthzOptions = z.ServerOptions(accepted)
	return st, nil
}

// Chain returns the server options in the order they must run: TLS first
// (the handshake verifies client certificates), then authentication
// (which reads the verified certificate and the bearer token and puts the
// caller in the call's context), then authorization (which decides on
// that caller). Interceptors run in the order their options are given.
func Chain(tls, authentication, authorization []grpc.ServerOption) []grpc.ServerOption {
	return slices.Concat(tls, authentication, authorization)
}
