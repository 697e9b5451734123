package authzgrpc_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zarrgate/zarrgate/client"
	"github.com/zarrgate/zarrgate/internal/auth"
	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/internal/security"
	"github.com/zarrgate/zarrgate/internal/testcerts"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/memory"
)

// This file drives the matrix of authzgrpc_test.go (allCases) through the
// real stack, in process: the server options built and chained by
// internal/security as `zarrgate serve` builds them (TLS, then
// authentication, then authorization), a token file of hashes as
// `zarrgate token new` writes it, a JWT issuer on 127.0.0.1 publishing a
// JWKS, client certificates, and the Go client's per-RPC credentials.

const jwtAudience = "zarrgate-matrix"

// jwtIssuer publishes the public half of its signing key as a JWKS on
// 127.0.0.1 and signs tokens.
type jwtIssuer struct {
	url string
	key jose.JSONWebKey
}

func newJWTIssuer(t *testing.T) *jwtIssuer {
	t.Helper()
	is := &jwtIssuer{key: newSigningKey(t, "k1")}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{is.key.Public()}})
	}))
	t.Cleanup(srv.Close)
	is.url = srv.URL
	return is
}

func newSigningKey(t *testing.T, kid string) jose.JSONWebKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return jose.JSONWebKey{Key: k, KeyID: kid, Algorithm: "ES256", Use: "sig"}
}

// claims are a valid token's claims for sub and groups, valid for an hour.
func (is *jwtIssuer) claims(sub string, groups ...string) map[string]any {
	now := time.Now()
	c := map[string]any{"iss": is.url, "aud": jwtAudience, "sub": sub, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	if len(groups) > 0 {
		c["groups"] = groups
	}
	return c
}

func signJWT(t *testing.T, key jose.JSONWebKey, claims map[string]any) string {
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

// credential is one way of calling: the server mode it calls and what it
// presents. Accepted credentials name the identity (a column of
// rpcCase.want); refused ones the code and the message every call gets.
type credential struct {
	name   string
	mode   string // "bearer", "anonymous" or "mtls": see fixture.serverConfig
	token  string // bearer token sent, "" none
	cert   string // client certificate presented (fixture.certs), "" none
	who    string // accepted: the identity's column
	refuse bool   // refused, whatever the call, with code and a message matching msg
	code   codes.Code
	msg    *regexp.Regexp
	alert  string // refused at the TLS handshake with this alert
}

// fixture is what the servers of the test share: files and credentials.
type fixture struct {
	dir                       string
	tokenFile, policyFile     string
	serverCert, serverKey, ca string // files
	clientCAs                 *tls.Config
	certs                     map[string]tls.Certificate
	issuer                    *jwtIssuer
	seedCred                  map[string]credential // per mode: a member of ops
	creds                     []credential
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{dir: t.TempDir(), certs: map[string]tls.Certificate{}}

	// The token file, as `zarrgate token new --append` writes it: hashes.
	f.tokenFile = filepath.Join(f.dir, "tokens")
	tokens := map[string]string{}
	var lines []string
	for _, u := range []struct {
		name   string
		groups []string
	}{{"root", []string{"ops"}}, {alice, nil}, {bob, nil}, {carol, nil}} {
		tok, hash, err := auth.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		line, err := auth.TokenLine(hash, u.name, u.groups)
		if err != nil {
			t.Fatal(err)
		}
		tokens[u.name], lines = tok, append(lines, line)
	}
	writeFile(t, f.tokenFile, strings.Join(lines, "\n")+"\n")
	f.policyFile = filepath.Join(f.dir, "policy.yaml")
	writeFile(t, f.policyFile, testPolicy)

	// The server's certificate, and client certificates of the client CA
	// (their DNS SAN is the identity; O= the groups) and of another CA.
	ca := testcerts.NewCA(t, "matrix CA")
	f.serverCert, f.serverKey = ca.Issue(t, testcerts.Server("127.0.0.1")).Write(t, f.dir)
	f.ca = ca.WriteCA(t, f.dir, "ca.pem")
	f.clientCAs = &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
	for _, n := range []string{alice, bob, carol} {
		f.certs[n] = ca.Issue(t, testcerts.Client(n)).TLS(t)
	}
	root := testcerts.Client("root")
	root.Orgs = []string{"ops"}
	f.certs["root"] = ca.Issue(t, root).TLS(t)
	f.certs["stranger"] = testcerts.NewCA(t, "another CA").Issue(t, testcerts.Client(alice)).TLS(t)

	// JWTs: of the issuer the servers trust, and the ways one goes wrong.
	f.issuer = newJWTIssuer(t)
	is := f.issuer
	jwt := func(sub string) string { return signJWT(t, is.key, is.claims(sub)) }
	expired := is.claims(alice)
	expired["iat"], expired["exp"] = time.Now().Add(-2*time.Hour).Unix(), time.Now().Add(-time.Hour).Unix()
	other := newJWTIssuer(t) // a real issuer, not the one the servers trust
	wrongAud := is.claims(alice)
	wrongAud["aud"] = "another-service"
	unknownToken, _, _ := auth.NewToken()

	unauth := func(name, mode, token, msg string) credential {
		return credential{name: name, mode: mode, token: token, refuse: true, code: codes.Unauthenticated, msg: regexp.MustCompile(msg)}
	}
	refusedHandshake := func(name, cert string, alert string, code codes.Code, msg string) credential {
		// The server refuses the handshake and sees no call. The client's
		// transport error is whatever it met first (the alert, a broken
		// pipe or a reset: with TLS 1.3 the client's side of the handshake
		// is over before the server checks the certificate), so the alert
		// is checked on a raw TLS connection (checkHandshake). A client
		// that was asked for a certificate and had none says so
		// (client/certhint.go).
		return credential{name: name, mode: "mtls", cert: cert, refuse: true, code: code, msg: regexp.MustCompile(msg), alert: alert}
	}
	f.creds = []credential{
		unauth("none", "bearer", "", `^no credentials: this server needs an 'authorization: Bearer TOKEN' header`),
		unauth("malformed-token", "bearer", "zg_not!base64url", `malformed bearer token`),
		unauth("unknown-token", "bearer", unknownToken, `^unknown bearer token$`),
		unauth("malformed-jwt", "bearer", "eyJhbGciOi.e30.c2ln", `^malformed JWT$`),
		unauth("expired-jwt", "bearer", signJWT(t, is.key, expired), `^JWT expired at `),
		unauth("wrong-issuer-jwt", "bearer", signJWT(t, other.key, other.claims(alice)), `^JWT issued by another issuer \(iss "`+regexp.QuoteMeta(other.url)+`", want `+regexp.QuoteMeta(is.url)+`\)`),
		// Signed by a key the issuer does not publish (under a published kid).
		unauth("unknown-key-jwt", "bearer", signJWT(t, newSigningKey(t, "k1"), is.claims(alice)), `^JWT: the signature does not verify with any key of the issuer`),
		unauth("wrong-audience-jwt", "bearer", signJWT(t, is.key, wrongAud), `^JWT not meant for this service: its audience lacks "`+jwtAudience+`"$`),
		{name: "carol-token", mode: "bearer", token: tokens[carol], who: carol},
		{name: "carol-jwt", mode: "bearer", token: jwt(carol), who: carol},
		{name: "bob-token", mode: "bearer", token: tokens[bob], who: bob},
		{name: "bob-jwt", mode: "bearer", token: jwt(bob), who: bob},
		{name: "alice-token", mode: "bearer", token: tokens[alice], who: alice},
		{name: "alice-jwt", mode: "bearer", token: jwt(alice), who: alice},
		// --allow-anonymous: no credentials are the anonymous caller; bad
		// ones are still refused.
		{name: "none", mode: "anonymous", who: anon},
		unauth("expired-jwt", "anonymous", signJWT(t, is.key, expired), `^JWT expired at `),
		// --client-ca: the certificate is the identity.
		{name: "carol-cert", mode: "mtls", cert: carol, who: carol},
		{name: "bob-cert", mode: "mtls", cert: bob, who: bob},
		{name: "alice-cert", mode: "mtls", cert: alice, who: alice},
		refusedHandshake("no-cert", "", "tls: certificate required", codes.Unauthenticated, `^the server requires a client certificate \(mTLS\) and none was presented`),
		refusedHandshake("other-ca-cert", "stranger", "tls: unknown certificate authority", codes.Unavailable, `.`),
	}
	f.seedCred = map[string]credential{
		"bearer":    {name: "root-token", token: tokens["root"]},
		"anonymous": {name: "root-jwt", token: signJWT(t, is.key, is.claims("root", "ops"))},
		"mtls":      {name: "root-cert", cert: "root"},
	}
	return f
}

// presenting returns what gives the server the certificate name whatever
// CAs the server asks for (with Certificates, crypto/tls would send none
// that the server's CAs did not issue: the server would not see it).
func (f *fixture) presenting(name string) func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	c := f.certs[name]
	return func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &c, nil }
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// serverConfig is the security of a server mode, as the flags of
// `zarrgate serve` would set it:
//
//	bearer:    --tls-cert --tls-key --tokens --jwks-url --jwt-issuer --jwt-audience --policy --audit-log
//	anonymous: the same and --allow-anonymous
//	mtls:      --tls-cert --tls-key --client-ca --policy --audit-log
func (f *fixture) serverConfig(mode string) (security.TLS, security.Authentication, security.Authorization) {
	tlsc := security.TLS{CertFile: f.serverCert, KeyFile: f.serverKey}
	authn := security.Authentication{TokensFile: f.tokenFile,
		JWT: &auth.JWTConfig{JWKSURL: f.issuer.url, Issuer: f.issuer.url, Audience: jwtAudience, UserClaim: "sub", GroupsClaim: "groups"}}
	switch mode {
	case "anonymous":
		authn.AllowAnonymous = true
	case "mtls":
		tlsc.ClientCAFile = f.ca
		authn = security.Authentication{MTLS: true}
	}
	return tlsc, authn, security.Authorization{PolicyFile: f.policyFile, AuditLog: filepath.Join(f.dir, "audit-"+mode+".log")}
}

// realEnv is a server of one kind and mode over a memory store, and the
// connections of the credentials that call it.
type realEnv struct {
	f     *fixture
	store *storesvc.Portable // the store, read directly
	addr  string
	conns map[string]*grpc.ClientConn // by credential name
	calls *methodRecorder
	close []func() error // of the clients
}

func newRealEnv(t *testing.T, f *fixture, kind, mode string) *realEnv {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background()) // the watchers of the token file and the policy
	t.Cleanup(cancel)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	tlsc, authn, authz := f.serverConfig(mode)
	tlsOpts, err := tlsc.ServerOptions(logger)
	if err != nil {
		t.Fatal(err)
	}
	authnOpts, authzOpts, release, err := security.Auth(ctx, logger, authn, authz)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	e := &realEnv{f: f, store: storesvc.Wrap(memory.New()), conns: map[string]*grpc.ClientConn{}, calls: &methodRecorder{}}
	srv := rpc.NewServer(logger, security.Chain(tlsOpts, authnOpts, authzOpts)...)
	register(t, srv, e.store, kind)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	// The clients live as long as the server: a shared server's outlive
	// the subtest that dialled them.
	t.Cleanup(func() {
		for _, cl := range e.close {
			cl()
		}
	})
	e.addr = lis.Addr().String()
	seed(t, context.Background(), e.conn(t, f.seedCred[mode]), kind)
	return e
}

// conn is the Go client's connection with c's credentials: over TLS,
// with c's client certificate and c's token as per-RPC credentials.
// Calls are not retried: a refusal is seen as it is.
func (e *realEnv) conn(t *testing.T, c credential) *grpc.ClientConn {
	t.Helper()
	if cc, ok := e.conns[c.name]; ok {
		return cc
	}
	cfg := e.f.clientCAs.Clone()
	if c.cert != "" {
		cfg.GetClientCertificate = e.f.presenting(c.cert)
	}
	opts := []client.Option{client.WithTLS(cfg), client.WithRetries(0, 0), client.WithDialOptions(e.calls.dialOptions()...)}
	if c.token != "" {
		opts = append(opts, client.WithToken(c.token))
	}
	cl, err := client.Dial(context.Background(), e.addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	e.close = append(e.close, cl.Close)
	e.conns[c.name] = cl.Conn()
	return cl.Conn()
}

// denial is what PERMISSION_DENIED says: the method, the caller, the
// permission and the key or prefix.
var denial = regexp.MustCompile(`^\w+: (user:\w+|anonymous) (needs|has no) "(read|write|delete|admin)(\+(read|write|delete|admin))*" permission on "[^"]*"`)

// TestMatrixRealCredentials calls every case of the matrix (every RPC of
// StoreService, directly and through the gateway's pass-through,
// ArrayService and CodecService) with every credential: none, malformed,
// unknown, expired, of another issuer, signed by an unknown key, for
// another audience (UNAUTHENTICATED saying which), anonymous where
// allowed, identities without any permission, with permission on a
// sibling prefix and with permission, each from the token file, a JWT and
// a client certificate (the codes of TestMatrix's table, PERMISSION_DENIED
// naming the caller, permission and prefix), and certificates the server
// refuses at the handshake. After every refusal the store, read directly,
// is unchanged.
//
// Refusals share one server per kind and mode (they change nothing, which
// is checked); a call expected to succeed gets a fresh server, as it may
// change the store.
func TestMatrixRealCredentials(t *testing.T) {
	f := newFixture(t)
	shared := map[[2]string]*realEnv{}
	for kind := range services {
		for _, mode := range []string{"bearer", "anonymous", "mtls"} {
			shared[[2]string{kind, mode}] = newRealEnv(t, f, kind, mode)
		}
	}
	for _, cr := range f.creds {
		if cr.alert != "" {
			checkHandshake(t, f, shared[[2]string{"store", cr.mode}].addr, cr)
		}
	}
	cv := coverage{}
	defer cv.check(t)
	for _, c := range allCases() {
		for _, cr := range f.creds {
			t.Run(c.kind+"/"+c.name+"/"+cr.mode+"/"+cr.name, func(t *testing.T) {
				want := cr.code
				if !cr.refuse {
					want = c.want[cr.who]
					// A caller that presented no credentials and is refused
					// by the policy, on a server that authenticates, is told
					// to present some (UNAUTHENTICATED naming the refusal).
					if cr.who == anon && want == codes.PermissionDenied {
						want = codes.Unauthenticated
					}
				}
				var e *realEnv
				if want == codes.OK {
					e = newRealEnv(t, f, c.kind, cr.mode)
				} else {
					e = shared[[2]string{c.kind, cr.mode}]
				}
				conn := e.conn(t, cr)
				before := snapshotOf(t, e.store)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				e.calls.take()
				err := c.call(ctx, conn)
				cv.add(t, c, e.calls.take())
				st := status.Convert(err)
				switch {
				case st.Code() != want:
					t.Errorf("code %v (%v), want %v", st.Code(), err, want)
				case cr.refuse && !cr.msg.MatchString(st.Message()):
					t.Errorf("message %q does not say what is wrong (want %v)", st.Message(), cr.msg)
				case want == codes.PermissionDenied && !denial.MatchString(st.Message()):
					t.Errorf("denial %q does not name the caller, the permission and the prefix", st.Message())
				case want == codes.PermissionDenied && !strings.Contains(st.Message(), " "+caller(cr.who)+" "):
					t.Errorf("denial %q does not name the caller %s", st.Message(), caller(cr.who))
				case want == codes.Unauthenticated && !cr.refuse && !strings.Contains(st.Message(), "CodecService accepts only authenticated callers") &&
					!(strings.HasPrefix(st.Message(), "no credentials: ") && denial.MatchString(strings.TrimPrefix(st.Message(), "no credentials: ")) && strings.HasSuffix(st.Message(), "this server needs an 'authorization: Bearer TOKEN' header")):
					t.Errorf("message %q", st.Message())
				}
				if want != codes.OK {
					if after := snapshotOf(t, e.store); !maps(before, after) {
						t.Errorf("a refused call changed the store:\nbefore %v\nafter  %v", before, after)
					}
				}
			})
		}
	}
}

// caller is how messages name the identity who.
func caller(who string) string {
	if who == anon {
		return "anonymous"
	}
	return "user:" + who
}

// checkHandshake checks that the server at addr refuses cr's TLS
// handshake with cr.alert: the first read after the client's side of the
// handshake gets the server's alert.
func checkHandshake(t *testing.T, f *fixture, addr string, cr credential) {
	t.Helper()
	cfg := f.clientCAs.Clone()
	cfg.NextProtos = []string{"h2"}
	if cr.cert != "" {
		cfg.GetClientCertificate = f.presenting(cr.cert)
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, cfg)
	if err == nil {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		_, err = c.Read(make([]byte, 1))
		c.Close()
	}
	if err == nil || !strings.Contains(err.Error(), cr.alert) {
		t.Errorf("%s: the handshake ended with %v, want the alert %q", cr.name, err, cr.alert)
	}
}

// snapshotOf is every key of store with its value.
func snapshotOf(t *testing.T, store *storesvc.Portable) map[string]string {
	t.Helper()
	return (&env{store: store}).snapshot(t)
}
