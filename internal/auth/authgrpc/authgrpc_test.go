package authgrpc_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	storev1 "github.com/zarrgate/zarrgate/gen/zarrgate/store/v1"
	"github.com/zarrgate/zarrgate/internal/auth"
	"github.com/zarrgate/zarrgate/internal/auth/authgrpc"
	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/internal/testcerts"
	"github.com/zarrgate/zarrgate/internal/tlsconf"
	"github.com/zarrgate/zarrgate/storesvc/memory"
	"github.com/zarrgate/zarrgate/storesvc/storeserver"
)

const audience = "zarrgate-test"

// issuer is an OIDC issuer on 127.0.0.1: discovery document and JWKS.
type issuer struct {
	srv     *httptest.Server
	mu      sync.Mutex
	keys    []jose.JSONWebKey // private; their public halves are published
	fetches atomic.Int32
}

func newIssuer(t *testing.T) *issuer {
	t.Helper()
	is := &issuer{}
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{
			"issuer": is.srv.URL, "jwks_uri": is.srv.URL + "/keys",
			"authorization_endpoint": is.srv.URL + "/auth", "token_endpoint": is.srv.URL + "/token",
			"id_token_signing_alg_values_supported": []string{"RS256", "ES256"},
		})
	})
	mux.HandleFunc("/keys", func(w http.ResponseWriter, r *http.Request) {
		is.fetches.Add(1)
		is.mu.Lock()
		defer is.mu.Unlock()
		var set jose.JSONWebKeySet
		for _, k := range is.keys {
			set.Keys = append(set.Keys, k.Public())
		}
		json.NewEncoder(w).Encode(set)
	})
	is.srv = httptest.NewServer(mux) // 127.0.0.1
	t.Cleanup(is.srv.Close)
	return is
}

func ecKey(t *testing.T, kid string) jose.JSONWebKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return jose.JSONWebKey{Key: k, KeyID: kid, Algorithm: "ES256", Use: "sig"}
}

func rsaKey(t *testing.T, kid string) jose.JSONWebKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return jose.JSONWebKey{Key: k, KeyID: kid, Algorithm: "RS256", Use: "sig"}
}

// publish replaces the issuer's keys.
func (is *issuer) publish(keys ...jose.JSONWebKey) {
	is.mu.Lock()
	defer is.mu.Unlock()
	is.keys = keys
}

// claims are a valid token's claims for sub, to be changed by a test.
func (is *issuer) claims(sub string) map[string]any {
	now := time.Now()
	return map[string]any{"iss": is.srv.URL, "aud": audience, "sub": sub, "iat": now.Unix(),
		"exp": now.Add(time.Hour).Unix(), "groups": []string{"readers", "ops"}}
}

func sign(t *testing.T, key jose.JSONWebKey, claims map[string]any) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.SignatureAlgorithm(key.Algorithm), Key: key}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	payload, _ := json.Marshal(claims)
	jws, err := s.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// unsigned is a JWT with alg none.
func unsigned(claims map[string]any) string {
	enc := base64.RawURLEncoding
	h, _ := json.Marshal(map[string]string{"alg": "none", "typ": "JWT"})
	p, _ := json.Marshal(claims)
	return enc.EncodeToString(h) + "." + enc.EncodeToString(p) + "."
}

// hs256 is a JWT signed with HMAC under secret.
func hs256(t *testing.T, secret []byte, claims map[string]any) string {
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: secret}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := json.Marshal(claims)
	jws, _ := s.Sign(p)
	tok, _ := jws.CompactSerialize()
	return tok
}

// server is a real gRPC server (internal/rpc, StoreService on a memory
// store) behind the authentication interceptors; seen records the
// principal the next interceptor found in each call's context.
type server struct {
	addr string
	mu   sync.Mutex
	seen map[string]auth.Principal // by method
	tls  *tls.Config               // the client's, for TLS servers
}

func (s *server) saw(method string) (auth.Principal, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.seen[method]
	delete(s.seen, method)
	return p, ok
}

func startServer(t *testing.T, a *auth.Authenticator, extra ...grpc.ServerOption) *server {
	t.Helper()
	s := &server{seen: map[string]auth.Principal{}}
	record := func(ctx context.Context, method string) {
		if p, ok := auth.FromContext(ctx); ok {
			s.mu.Lock()
			s.seen[method] = p
			s.mu.Unlock()
		}
	}
	opts := append(extra, authgrpc.ServerOptions(a)...)
	opts = append(opts,
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			record(ctx, info.FullMethod)
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			record(ss.Context(), info.FullMethod)
			return h(srv, ss)
		}))
	srv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)), opts...)
	storeserver.New(memory.New()).Register(srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	s.addr = lis.Addr().String()
	return s
}

func (s *server) conn(t *testing.T, extra ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	if s.tls != nil {
		extra = append([]grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(s.tls))}, extra...)
	}
	cc, err := rpc.Dial(s.addr, extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// call makes a unary and a streaming call with the authorization header
// (none when empty), checks both end alike, and returns the code and
// message of the unary one.
func (s *server) call(t *testing.T, cc *grpc.ClientConn, authz string) (codes.Code, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if authz != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", authz)
	}
	c := storev1.NewStoreServiceClient(cc)
	st := s.unary(ctx, c)
	ls, serr := c.List(ctx, &storev1.ListRequest{})
	if serr == nil {
		for {
			if _, serr = ls.Recv(); serr != nil {
				break
			}
		}
	}
	if serr == io.EOF {
		serr = nil
	}
	if sst := status.Convert(serr); sst.Code() != st.Code() {
		t.Errorf("unary call: %v; stream: %v", st.Code(), sst.Code())
	}
	return st.Code(), st.Message()
}

// unary is call's unary call alone: for a poll while credentials change
// (a reload between call's two calls would make them differ).
func (s *server) unary(ctx context.Context, c storev1.StoreServiceClient) *status.Status {
	_, err := c.GetCapabilities(ctx, &storev1.GetCapabilitiesRequest{})
	return status.Convert(err)
}

// unaryCode is the code of the unary call with authz.
func (s *server) unaryCode(cc *grpc.ClientConn, authz string) codes.Code {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", authz)
	return s.unary(ctx, storev1.NewStoreServiceClient(cc)).Code()
}

const (
	unaryMethod  = "/zarrgate.store.v1.StoreService/GetCapabilities"
	streamMethod = "/zarrgate.store.v1.StoreService/List"
)

// wantPrincipal checks both calls saw p (groups in any order: a
// certificate's O= values are a DER SET, sorted).
func (s *server) wantPrincipal(t *testing.T, p auth.Principal) {
	t.Helper()
	for _, m := range []string{unaryMethod, streamMethod} {
		got, ok := s.saw(m)
		if !ok || got.Name != p.Name || got.Method != p.Method || !slices.Equal(slices.Sorted(slices.Values(got.Groups)), slices.Sorted(slices.Values(p.Groups))) {
			t.Errorf("%s saw principal %+v (%v), want %+v", m, got, ok, p)
		}
	}
}

func newVerifier(t *testing.T, c auth.JWTConfig) *auth.JWTVerifier {
	t.Helper()
	v, err := auth.NewJWTVerifier(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestJWT: tokens of a real OIDC issuer (discovery, JWKS) are accepted
// with their subject and groups; every way a token can be wrong is
// UNAUTHENTICATED with a message that names the fault and not the token.
func TestJWT(t *testing.T) {
	is := newIssuer(t)
	key, rkey := ecKey(t, "k1"), rsaKey(t, "k2")
	is.publish(key, rkey)
	v := newVerifier(t, auth.JWTConfig{IssuerURL: is.srv.URL, Audience: audience, MinRefresh: time.Hour})
	s := startServer(t, &auth.Authenticator{JWT: v})
	cc := s.conn(t)

	for _, k := range []jose.JSONWebKey{key, rkey} {
		code, msg := s.call(t, cc, "Bearer "+sign(t, k, is.claims("alice")))
		if code != codes.OK {
			t.Fatalf("valid %s token: %v %s", k.Algorithm, code, msg)
		}
		s.wantPrincipal(t, auth.Principal{Name: "alice", Groups: []string{"readers", "ops"}, Method: "jwt"})
	}

	with := func(change func(map[string]any)) map[string]any {
		c := is.claims("alice")
		change(c)
		return c
	}
	other := ecKey(t, "k1") // the kid of a published key, another key
	stranger := ecKey(t, "k9")
	huge := "Bearer " + strings.Repeat("A", 1<<20)
	cases := []struct {
		name, authz, want string
	}{
		{"no credentials", "", "no credentials"},
		{"expired", "Bearer " + sign(t, key, with(func(c map[string]any) { c["exp"] = time.Now().Add(-time.Minute).Unix() })), "expired"},
		{"no exp", "Bearer " + sign(t, key, with(func(c map[string]any) { delete(c, "exp") })), "expired"},
		{"nbf in the future", "Bearer " + sign(t, key, with(func(c map[string]any) { c["nbf"] = time.Now().Add(time.Hour).Unix() })), "not valid yet"},
		{"wrong issuer", "Bearer " + sign(t, key, with(func(c map[string]any) { c["iss"] = "https://evil.example" })), "another issuer"},
		// Another issuer's token, signed by that issuer's own key: the
		// signature is checked first and fails, and the message says why.
		{"another issuer's token", "Bearer " + sign(t, stranger, with(func(c map[string]any) { c["iss"] = "https://other.example" })), `another issuer (iss "https://other.example", want`},
		{"wrong audience", "Bearer " + sign(t, key, with(func(c map[string]any) { c["aud"] = "another-service" })), "audience"},
		{"no subject", "Bearer " + sign(t, key, with(func(c map[string]any) { delete(c, "sub") })), `claim "sub"`},
		{"subject anonymous", "Bearer " + sign(t, key, with(func(c map[string]any) { c["sub"] = auth.Anonymous })), `claim "sub"`},
		{"groups not strings", "Bearer " + sign(t, key, with(func(c map[string]any) { c["groups"] = []any{1, 2} })), `claim "groups"`},
		{"another key, published kid", "Bearer " + sign(t, other, is.claims("alice")), "signature does not verify"},
		{"another key, unknown kid", "Bearer " + sign(t, stranger, is.claims("alice")), "signature does not verify"},
		{"alg none", "Bearer " + unsigned(is.claims("alice")), "algorithm"},
		{"HS256", "Bearer " + hs256(t, []byte("a secret of thirty-two bytes....."), is.claims("alice")), "algorithm"},
		{"tampered payload", "Bearer " + tamper(sign(t, key, is.claims("alice"))), "signature does not verify"},
		{"garbage JWT", "Bearer eyJhbGciOi.eyJzdWIi.c2lnbmF0dXJl", "malformed JWT"},
		{"not a JWT", "Bearer opaque-token-123", "not a JWT"},
		{"empty bearer", "Bearer ", "empty bearer token"},
		{"bearer with spaces inside", "Bearer abc def", "malformed bearer token"},
		{"basic", "Basic dXNlcjpwYXNz", "want 'Bearer TOKEN'"},
		{"1 MiB header", huge, "too large"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, msg := s.call(t, cc, c.authz)
			if code == codes.OK {
				t.Fatalf("accepted")
			}
			if code != codes.Unauthenticated || !strings.Contains(msg, c.want) {
				t.Fatalf("%v %q, want Unauthenticated saying %q", code, msg, c.want)
			}
			if tok, _ := strings.CutPrefix(c.authz, "Bearer "); len(tok) > 20 && strings.Contains(msg, tok[len(tok)-20:]) {
				t.Fatalf("the message quotes the token: %q", msg)
			}
			if _, ok := s.saw(unaryMethod); ok {
				t.Fatalf("the call went on to the next interceptor")
			}
		})
	}
	// Tokens naming unknown keys fetch the keys at most once per
	// MinRefresh (here an hour): one fetch at start-up, one for the first
	// unknown key.
	if n := is.fetches.Load(); n > 2 {
		t.Errorf("the JWKS was fetched %d times: forged tokens make the server hammer the issuer", n)
	}
	// Health checks and reflection need no credentials.
	hc, err := healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || hc.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health without credentials: %v %v", hc, err)
	}
	rs, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rs.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
	if r, err := rs.Recv(); err != nil || len(r.GetListServicesResponse().GetService()) == 0 {
		t.Fatalf("reflection without credentials: %v %v", r, err)
	}
}

// tamper changes the subject in a signed token's payload.
func tamper(tok string) string {
	parts := strings.Split(tok, ".")
	p, _ := base64.RawURLEncoding.DecodeString(parts[1])
	p = []byte(strings.Replace(string(p), `"alice"`, `"admin"`, 1))
	parts[1] = base64.RawURLEncoding.EncodeToString(p)
	return strings.Join(parts, ".")
}

// TestJWTKeyRotation: when the issuer publishes a new key and withdraws
// the old one, tokens of the new key are accepted (the key set is fetched
// again for the unknown kid) and tokens of the old one refused. Also: a
// JWKS URL and issuer without discovery, and claims named by flags.
func TestJWTKeyRotation(t *testing.T) {
	is := newIssuer(t)
	k1, k2 := ecKey(t, "k1"), rsaKey(t, "k2")
	is.publish(k1)
	v := newVerifier(t, auth.JWTConfig{JWKSURL: is.srv.URL + "/keys", Issuer: is.srv.URL, Audience: audience,
		UserClaim: "email", GroupsClaim: "realm_access.roles", MinRefresh: time.Millisecond})
	s := startServer(t, &auth.Authenticator{JWT: v})
	cc := s.conn(t)
	claims := func() map[string]any {
		c := is.claims("u-123")
		c["email"] = "carol@example.org"
		c["realm_access"] = map[string]any{"roles": []string{"writers"}}
		return c
	}
	old := sign(t, k1, claims())
	if code, msg := s.call(t, cc, "Bearer "+old); code != codes.OK {
		t.Fatalf("before rotation: %v %s", code, msg)
	}
	s.wantPrincipal(t, auth.Principal{Name: "carol@example.org", Groups: []string{"writers"}, Method: "jwt"})
	is.publish(k2)
	time.Sleep(5 * time.Millisecond)
	if code, msg := s.call(t, cc, "Bearer "+sign(t, k2, claims())); code != codes.OK {
		t.Fatalf("token of the new key: %v %s", code, msg)
	}
	if code, msg := s.call(t, cc, "Bearer "+old); code != codes.Unauthenticated || !strings.Contains(msg, "signature") {
		t.Fatalf("token of the withdrawn key: %v %s", code, msg)
	}
}

// TestJWTIssuerDown: an issuer unreachable at start-up fails the
// verifier's creation; one that goes away later makes tokens of unknown
// keys Unavailable (not Unauthenticated: the client is not at fault),
// while tokens of known keys still pass.
func TestJWTIssuerDown(t *testing.T) {
	if _, err := auth.NewJWTVerifier(context.Background(), auth.JWTConfig{IssuerURL: "http://127.0.0.1:1", Audience: audience}); err == nil {
		t.Fatal("verifier made for an unreachable issuer")
	}
	if _, err := auth.NewJWTVerifier(context.Background(), auth.JWTConfig{JWKSURL: "http://127.0.0.1:1/keys", Issuer: "x"}); err == nil || !strings.Contains(err.Error(), "audience") {
		t.Fatalf("verifier without audience: %v", err)
	}
	is := newIssuer(t)
	k1 := ecKey(t, "k1")
	is.publish(k1)
	v := newVerifier(t, auth.JWTConfig{IssuerURL: is.srv.URL, Audience: audience, MinRefresh: time.Millisecond})
	s := startServer(t, &auth.Authenticator{JWT: v})
	cc := s.conn(t)
	is.srv.Close()
	time.Sleep(5 * time.Millisecond)
	if code, msg := s.call(t, cc, "Bearer "+sign(t, ecKey(t, "k2"), is.claims("alice"))); code != codes.Unavailable || !strings.Contains(msg, "could not be fetched") {
		t.Fatalf("unknown key, issuer down: %v %s", code, msg)
	}
	if code, msg := s.call(t, cc, "Bearer "+sign(t, k1, is.claims("alice"))); code != codes.OK {
		t.Fatalf("known key, issuer down: %v %s", code, msg)
	}
}

// TestTokenFile: static tokens, stored hashed, are accepted with their
// user and groups; unknown ones are refused; a changed file takes effect,
// a broken one is ignored.
func TestTokenFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tokens")
	tok1, h1, _ := auth.NewToken()
	tok2, h2, _ := auth.NewToken()
	line1, err := auth.TokenLine(h1, "bob", []string{"ops", "readers"})
	if err != nil {
		t.Fatal(err)
	}
	write := func(content string) {
		t.Helper()
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write("# tokens\n" + line1 + "\n")
	if data, _ := os.ReadFile(path); strings.Contains(string(data), tok1) {
		t.Fatal("the token file holds the token")
	}
	w, err := auth.NewTokenWatcher(path, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, &auth.Authenticator{Tokens: w.Tokens})
	cc := s.conn(t)
	if code, msg := s.call(t, cc, "Bearer "+tok1); code != codes.OK {
		t.Fatalf("listed token: %v %s", code, msg)
	}
	s.wantPrincipal(t, auth.Principal{Name: "bob", Groups: []string{"ops", "readers"}, Method: "token"})
	if code, msg := s.call(t, cc, "bearer "+tok1); code != codes.OK { // the scheme is case-insensitive
		t.Fatalf("lower-case scheme: %v %s", code, msg)
	}
	for name, authz := range map[string]string{
		"unknown":        "Bearer " + tok2,
		"hash as token":  "Bearer " + strings.TrimPrefix(h1, auth.TokenHashPrefix),
		"token's prefix": "Bearer " + tok1[:len(tok1)-1],
		"a JWT":          "Bearer " + unsigned(map[string]any{"sub": "bob"}),
		"no credentials": "",
	} {
		if code, msg := s.call(t, cc, authz); code != codes.Unauthenticated || strings.Contains(msg, tok1) {
			t.Errorf("%s: %v %s", name, code, msg)
		}
	}
	// Replace bob's token by carol's.
	line2, _ := auth.TokenLine(h2, "carol", nil)
	write(line2 + "\n")
	if !w.ReloadIfChanged() {
		t.Fatal("changed file not reloaded")
	}
	if code, _ := s.call(t, cc, "Bearer "+tok1); code != codes.Unauthenticated {
		t.Fatalf("removed token after reload: %v", code)
	}
	if code, msg := s.call(t, cc, "Bearer "+tok2); code != codes.OK {
		t.Fatalf("added token after reload: %v %s", code, msg)
	}
	s.wantPrincipal(t, auth.Principal{Name: "carol", Method: "token"})
	// A broken version (a token pasted in clear) is ignored.
	write(tok1 + " bob\n")
	if w.ReloadIfChanged() {
		t.Fatal("broken file took effect")
	}
	if code, _ := s.call(t, cc, "Bearer "+tok2); code != codes.OK {
		t.Fatalf("tokens in force lost to a broken file: %v", code)
	}
	// The file's watcher picks changes up by itself.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx, 10*time.Millisecond)
	write(line1 + "\n")
	deadline := time.Now().Add(5 * time.Second)
	for s.unaryCode(cc, "Bearer "+tok1) != codes.OK {
		if time.Now().After(deadline) {
			t.Fatal("the watcher did not reload the file")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Reloaded: both kinds of call agree again.
	if code, msg := s.call(t, cc, "Bearer "+tok1); code != codes.OK {
		t.Fatalf("token after the watcher's reload: %v %s", code, msg)
	}
}

// TestMTLS: over a real TLS handshake that verifies client certificates
// (tlsconf.Server with a client CA), the principal is the certificate's
// URI SAN, else DNS SAN, else email SAN, else CN, with its O= as groups;
// a bearer token, when sent too, decides.
func TestMTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "test CA")
	srvCert, srvKey := ca.Issue(t, testcerts.Server("127.0.0.1")).Write(t, dir)
	caFile := ca.WriteCA(t, dir, "ca.pem")
	cfg, err := tlsconf.Server(srvCert, srvKey, caFile, slog.New(slog.NewTextHandler(io.Discard, nil)), "h2")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "tokens")
	tok, h, _ := auth.NewToken()
	line, _ := auth.TokenLine(h, "bot", nil)
	os.WriteFile(path, []byte(line+"\n"), 0o600)
	w, err := auth.NewTokenWatcher(path, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, &auth.Authenticator{MTLS: true, Tokens: w.Tokens}, rpc.ServerTLS(cfg))

	spiffe, _ := url.Parse("spiffe://example.org/ns/prod/gateway")
	clientCA := func(tmpl testcerts.Template) *grpc.ClientConn {
		c := ca.Issue(t, tmpl)
		s.tls = &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{c.TLS(t)}, ServerName: "127.0.0.1"}
		return s.conn(t)
	}
	eku := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	cases := []struct {
		name string
		tmpl testcerts.Template
		want auth.Principal
	}{
		{"URI SAN", testcerts.Template{CommonName: "cn", URIs: []*url.URL{spiffe}, DNSNames: []string{"gw.example.org"}, Emails: []string{"gw@example.org"}, ExtUsage: eku, Orgs: []string{"gateways", "prod"}},
			auth.Principal{Name: "spiffe://example.org/ns/prod/gateway", Groups: []string{"gateways", "prod"}, Method: "mtls"}},
		{"DNS SAN", testcerts.Template{CommonName: "cn", DNSNames: []string{"gw.example.org"}, Emails: []string{"gw@example.org"}, ExtUsage: eku},
			auth.Principal{Name: "gw.example.org", Groups: []string{"zarrgate tests"}, Method: "mtls"}},
		{"email SAN", testcerts.Template{CommonName: "cn", Emails: []string{"dave@example.org"}, ExtUsage: eku, Orgs: []string{}},
			auth.Principal{Name: "dave@example.org", Method: "mtls"}},
		{"CN", testcerts.Template{CommonName: "erin", ExtUsage: eku, Orgs: []string{"ops"}},
			auth.Principal{Name: "erin", Groups: []string{"ops"}, Method: "mtls"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cc := clientCA(c.tmpl)
			if code, msg := s.call(t, cc, ""); code != codes.OK {
				t.Fatalf("%v %s", code, msg)
			}
			s.wantPrincipal(t, c.want)
		})
	}
	t.Run("nameless certificate", func(t *testing.T) {
		cc := clientCA(testcerts.Template{ExtUsage: eku})
		if code, msg := s.call(t, cc, ""); code != codes.Unauthenticated || !strings.Contains(msg, "certificate") {
			t.Fatalf("%v %s", code, msg)
		}
	})
	t.Run("token and certificate", func(t *testing.T) {
		cc := clientCA(testcerts.Client("erin"))
		if code, msg := s.call(t, cc, "Bearer "+tok); code != codes.OK {
			t.Fatalf("%v %s", code, msg)
		}
		s.wantPrincipal(t, auth.Principal{Name: "bot", Method: "token"})
		if code, _ := s.call(t, cc, "Bearer zg_wrong"); code != codes.Unauthenticated {
			t.Fatalf("a bad token with a good certificate: %v", code)
		}
	})
}

// TestAnonymous: with AllowAnonymous, a call without credentials is
// Anonymous (Method "none"); bad credentials are still refused.
func TestAnonymous(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	os.WriteFile(path, nil, 0o600)
	w, err := auth.NewTokenWatcher(path, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, &auth.Authenticator{Tokens: w.Tokens, AllowAnonymous: true})
	cc := s.conn(t)
	if code, msg := s.call(t, cc, ""); code != codes.OK {
		t.Fatalf("anonymous: %v %s", code, msg)
	}
	s.wantPrincipal(t, auth.Principal{Name: auth.Anonymous, Method: "none"})
	if code, _ := s.call(t, cc, "Bearer zg_unknown"); code != codes.Unauthenticated {
		t.Fatalf("bad token with anonymous allowed: %v", code)
	}
	if code, msg := s.call(t, cc, fmt.Sprintf("Bearer %s", strings.Repeat("x", auth.MaxAuthorizationBytes))); code != codes.Unauthenticated || !strings.Contains(msg, "too large") {
		t.Fatalf("oversized: %v %s", code, msg)
	}
}
