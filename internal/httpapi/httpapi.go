// Package httpapi serves a zarrgate store over plain HTTP, for the Zarr
// readers that speak HTTP and not gRPC (zarrita.js, zarr-python through
// fsspec, tensorstore's http kvstore, GDAL's /vsicurl/): GET and HEAD of
// /zarr/<key> with byte ranges, ETags from the store's generations and
// conditional requests, JSON listings, a virtual consolidated-metadata
// document, and optional conditional writes (PUT, DELETE).
//
// A Server reads the store through the storesvc contract, the same one the
// gRPC StoreService serves, and applies the same security per request: the
// caller is authenticated from its bearer token or verified client
// certificate (auth.Authenticator, as the gRPC listener does), and the
// authorization policy's path rules decide on the key's path exactly as
// they do for the StoreService (authz.ReadPath for reads, the key for
// writes, listings filtered to what the caller may read).
//
// Other HTTP endpoints (the slab endpoint, the browser view) are separate
// http.Handlers added with Mount; they share the listener, its limits and
// its authentication (Principal).
package httpapi

import (
	"context"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/auth"
	"github.com/zarrgate/zarrgate/internal/authz"
	"github.com/zarrgate/zarrgate/storesvc"
)

// Defaults of the Options' limits.
const (
	DefaultMaxBodyBytes         = 64 << 20
	DefaultMaxListEntries       = 100_000
	DefaultMaxConcurrent        = 256
	DefaultMaxNodes             = 10_000
	DefaultMaxConsolidatedBytes = 64 << 20
	// Prefix is where the store is served.
	Prefix = "/zarr/"
)

// Options configure a Server. The zero value serves reads to anyone, with
// no CORS headers, no Cache-Control and writes refused.
type Options struct {
	// CORSOrigins are the origins browsers may read from ("*": any); empty:
	// no CORS headers.
	CORSOrigins []string
	// CacheControl is the Cache-Control header of successful reads; empty:
	// none.
	CacheControl string
	// Writes enables PUT and DELETE (still subject to the policy and to the
	// store being writable).
	Writes bool
	// Authenticator, when set, establishes the caller of every request
	// (from its "Authorization: Bearer" header or verified client
	// certificate); nil: every caller is anonymous.
	Authenticator *auth.Authenticator
	// Policy returns the authorization policy in force; nil (or a nil
	// policy): no authorization.
	Policy func() *authz.Policy
	// Audit, when set, records writes and refusals.
	Audit *authz.Auditor
	// ConsolidateGroups serves every group's zarr.json (Zarr v3) with
	// "consolidated_metadata" describing the nodes below it, so that
	// readers that cannot list (over HTTP, none can) and open groups with
	// consolidated metadata (zarr-python's open_group, open_consolidated)
	// find every node. A group with more keys below it than
	// MaxListEntries, or more nodes than MaxNodes, gets its stored
	// document.
	ConsolidateGroups bool
	// MaxBodyBytes bounds a PUT body (default DefaultMaxBodyBytes).
	MaxBodyBytes int64
	// MaxListEntries bounds the entries of one listing (default
	// DefaultMaxListEntries); a longer one is refused.
	MaxListEntries int
	// MaxConcurrent bounds the requests served at once (default
	// DefaultMaxConcurrent); beyond it requests get 503.
	MaxConcurrent int
	// MaxNodes and MaxConsolidatedBytes bound a consolidated-metadata
	// document (defaults DefaultMaxNodes, DefaultMaxConsolidatedBytes).
	MaxNodes             int
	MaxConsolidatedBytes int64
	// Logger logs failures that are not the client's; nil: slog.Default.
	Logger *slog.Logger
}

// Server is the HTTP face of a store. It is an http.Handler.
type Server struct {
	store  storesvc.Store
	opts   Options
	sem    chan struct{}
	mounts []mount
	logger *slog.Logger
}

type mount struct {
	prefix string
	h      http.Handler
	public func(*http.Request) bool
}

// New returns a Server of store.
func New(store storesvc.Store, opts Options) *Server {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.MaxListEntries <= 0 {
		opts.MaxListEntries = DefaultMaxListEntries
	}
	if opts.MaxConcurrent <= 0 {
		opts.MaxConcurrent = DefaultMaxConcurrent
	}
	if opts.MaxNodes <= 0 {
		opts.MaxNodes = DefaultMaxNodes
	}
	if opts.MaxConsolidatedBytes <= 0 {
		opts.MaxConsolidatedBytes = DefaultMaxConsolidatedBytes
	}
	s := &Server{store: store, opts: opts, sem: make(chan struct{}, opts.MaxConcurrent), logger: opts.Logger}
	if s.logger == nil {
		s.logger = slog.Default()
	}
	return s
}

// Mount serves h under prefix (which must start and end with "/", and not
// be Prefix), after the Server's concurrency limit, CORS and
// authentication: h finds the caller with auth.FromContext, and decides
// on it with the policy itself.
func (s *Server) Mount(prefix string, h http.Handler) {
	s.MountPublic(prefix, h, nil)
}

// MountPublic is Mount with requests that need no authentication: those
// public reports true for (such as the browser view's own page and
// scripts, which hold no data, so that a browser can load the page and
// then send a token with the page's data requests). They reach h without a
// principal in their context (auth.FromContext reports none).
func (s *Server) MountPublic(prefix string, h http.Handler, public func(*http.Request) bool) {
	if !strings.HasPrefix(prefix, "/") || !strings.HasSuffix(prefix, "/") || prefix == Prefix {
		panic(fmt.Sprintf("httpapi: Mount(%q): want a prefix /like/this/ other than %s", prefix, Prefix))
	}
	s.mounts = append(s.mounts, mount{prefix, h, public})
	slices.SortFunc(s.mounts, func(a, b mount) int { return len(b.prefix) - len(a.prefix) })
}

// Timeouts of the http.Server that NewHTTPServer returns, and of a PUT's
// body (BodyReadTimeout, set per request). There is no overall read or
// write timeout: net/http's ReadTimeout would also cancel a long response
// (its background read of the connection times out), and a large value
// streams for as long as the client keeps reading it (WriteStepTimeout).
const (
	ReadHeaderTimeout = 10 * time.Second
	BodyReadTimeout   = 5 * time.Minute
	IdleTimeout       = 2 * time.Minute
	MaxHeaderBytes    = 64 << 10
)

// NewHTTPServer returns an http.Server serving h with the limits above.
func NewHTTPServer(h http.Handler, logger *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: ReadHeaderTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	select {
	case s.sem <- struct{}{}:
		defer func() { <-s.sem }()
	default:
		w.Header().Set("Retry-After", "1")
		writeError(w, r, errs.New(errs.Unavailable, "too many concurrent requests (at most %d): retry later", s.opts.MaxConcurrent))
		return
	}
	preflight := s.cors(w, r)
	if preflight {
		return
	}
	var h http.Handler
	if strings.HasPrefix(r.URL.Path, Prefix) {
		h = http.HandlerFunc(s.serveStore)
	} else {
		for _, m := range s.mounts {
			if strings.HasPrefix(r.URL.Path, m.prefix) {
				h = m.h
				if m.public != nil && m.public(r) {
					h.ServeHTTP(w, r)
					return
				}
				break
			}
		}
	}
	if h == nil {
		writeError(w, r, errs.New(errs.NotFound, "no such endpoint %q: the store is under %s", r.URL.Path, Prefix))
		return
	}
	p, err := s.authenticate(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	h.ServeHTTP(w, r.WithContext(auth.WithPrincipal(r.Context(), p)))
}

func (s *Server) authenticate(r *http.Request) (auth.Principal, error) {
	if s.opts.Authenticator == nil {
		return auth.Principal{Name: auth.Anonymous, Method: "none"}, nil
	}
	c := auth.Credentials{Authorization: r.Header.Values("Authorization")}
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		c.Certificate = r.TLS.VerifiedChains[0][0]
	}
	return s.opts.Authenticator.Authenticate(r.Context(), c)
}

// PeerCertificate is the verified client certificate of r, or nil.
func PeerCertificate(r *http.Request) *x509.Certificate {
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		return r.TLS.VerifiedChains[0][0]
	}
	return nil
}

// cors sets the CORS headers of a request from an allowed origin, and
// answers a preflight (reporting true).
func (s *Server) cors(w http.ResponseWriter, r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" || len(s.opts.CORSOrigins) == 0 {
		return false
	}
	allowed := slices.Contains(s.opts.CORSOrigins, "*") || slices.Contains(s.opts.CORSOrigins, origin)
	h := w.Header()
	h.Add("Vary", "Origin")
	if !allowed {
		return false
	}
	if slices.Contains(s.opts.CORSOrigins, "*") {
		h.Set("Access-Control-Allow-Origin", "*")
	} else {
		h.Set("Access-Control-Allow-Origin", origin)
	}
	h.Set("Access-Control-Expose-Headers", "Content-Length, Content-Range, Accept-Ranges, ETag, Content-Type")
	if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
		methods := "GET, HEAD, OPTIONS"
		if s.opts.Writes {
			methods = "GET, HEAD, PUT, DELETE, OPTIONS"
		}
		h.Set("Access-Control-Allow-Methods", methods)
		h.Set("Access-Control-Allow-Headers", "Authorization, Range, If-None-Match, If-Match, If-Range, Content-Type")
		h.Set("Access-Control-Max-Age", "600")
		w.WriteHeader(http.StatusNoContent)
		return true
	}
	return false
}

// Status returns the HTTP status of an error by its errs code.
func Status(err error) int {
	switch errs.CodeOf(err) {
	case errs.CodeInvalidArgument:
		return http.StatusBadRequest
	case errs.CodeNotFound:
		return http.StatusNotFound
	case errs.CodePermissionDenied:
		return http.StatusForbidden
	case errs.CodeUnauthenticated:
		return http.StatusUnauthorized
	case errs.CodeResourceExhausted:
		return http.StatusTooManyRequests
	case errs.CodeFailedPrecondition, errs.CodeAborted:
		return http.StatusPreconditionFailed
	case errs.CodeOutOfRange:
		return http.StatusRequestedRangeNotSatisfiable
	case errs.CodeUnimplemented:
		return http.StatusNotImplemented
	case errs.CodeUnavailable:
		return http.StatusServiceUnavailable
	case errs.CodeDeadlineExceeded:
		return http.StatusGatewayTimeout
	case errs.CodeAlreadyExists:
		return http.StatusConflict
	case errs.CodeCanceled:
		return 499 // the client went away; nobody reads it
	}
	return http.StatusInternalServerError
}

// writeError answers with err's status and message (text/plain).
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	st := Status(err)
	h := w.Header()
	if st == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="zarrgate"`)
	}
	h.Del("ETag")
	h.Del("Content-Range")
	h.Del("Cache-Control")
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	msg := err.Error() + "\n"
	h.Set("Content-Length", fmt.Sprint(len(msg)))
	w.WriteHeader(st)
	if r.Method != http.MethodHead {
		io.WriteString(w, msg)
	}
}

// etag quotes a generation as an entity tag; generations with characters
// an entity tag cannot hold are hex-encoded.
func etag(gen string) string {
	if gen == "" {
		return ""
	}
	for i := 0; i < len(gen); i++ {
		if c := gen[i]; c <= 0x20 || c == '"' || c >= 0x7f {
			return `"x` + hex.EncodeToString([]byte(gen)) + `"`
		}
	}
	return `"` + gen + `"`
}

// generationOf returns the generation an entity tag (as sent in If-Match)
// stands for, or an error for a malformed one.
func generationOf(tag string) (string, error) {
	tag = strings.TrimSpace(tag)
	tag = strings.TrimPrefix(tag, "W/")
	if len(tag) < 3 || tag[0] != '"' || tag[len(tag)-1] != '"' {
		return "", errs.New(errs.InvalidArgument, "malformed entity tag %.80q: want a quoted ETag as returned by GET", tag)
	}
	g := tag[1 : len(tag)-1]
	if strings.HasPrefix(g, "x") {
		if b, err := hex.DecodeString(g[1:]); err == nil && etag(string(b)) == tag {
			return string(b), nil
		}
	}
	return g, nil
}

// matchesAny reports whether an If-None-Match or If-Range header lists tag
// (weak comparison) or is "*".
func matchesAny(header, tag string) bool {
	for t := range strings.SplitSeq(header, ",") {
		t = strings.TrimSpace(t)
		if t == "*" || tag != "" && strings.TrimPrefix(t, "W/") == tag {
			return true
		}
	}
	return false
}

// policy returns the policy in force, or nil.
func (s *Server) policy() *authz.Policy {
	if s.opts.Policy == nil {
		return nil
	}
	return s.opts.Policy()
}

// Authorize is the policy check for the handlers mounted on s (the slab
// endpoint, the browser view): whether the caller of r, as s authenticated
// it, may read the node at path (no leading "/"; "" is the root). what
// names the endpoint in the denial and the audit log.
func (s *Server) Authorize(what string) func(r *http.Request, path string) error {
	return func(r *http.Request, path string) error {
		p, ok := auth.FromContext(r.Context())
		if !ok {
			return errs.New(errs.Unauthenticated, "%s: the request was not authenticated", what)
		}
		return s.check(r.Context(), p, authz.Read, path, what)
	}
}

// check refuses what the policy does not allow p on path.
func (s *Server) check(ctx context.Context, p auth.Principal, perm authz.Perm, path, what string) error {
	pol := s.policy()
	if pol == nil || pol.Allowed(p, perm, path) {
		return nil
	}
	name := path
	if name == "" {
		name = "the store root"
	}
	err := errs.New(errs.PermissionDenied, "%s: %s needs %q permission on %s", what, authz.PrincipalString(p), perm.String(), name)
	s.audit(ctx, p, what, path, perm, true, err)
	return err
}

func (s *Server) audit(ctx context.Context, p auth.Principal, what, key string, perm authz.Perm, denied bool, err error) {
	if s.opts.Audit == nil {
		return
	}
	r := authz.Record{Principal: p, Method: "HTTP " + what, Perm: perm, Keys: []string{key}, Denied: denied, Code: "OK"}
	if err != nil {
		r.Code, r.Error = errs.CodeOf(err).String(), err.Error()
	}
	s.opts.Audit.Log(ctx, r)
}
