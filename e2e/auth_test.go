package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/zarrgate/zarrgate/internal/testcerts"
)

// TestServeTokens: `serve --tokens FILE` with tokens made by `zarrgate
// token new`: the CLI authenticates with --token or ZARRGATE_TOKEN,
// grpcurl with -H 'authorization: Bearer …' (reflection included),
// health checks need nothing; the principal reaches the policy and the
// audit log; a token added to the file is usable without a restart.
func TestServeTokens(t *testing.T) {
	dir := t.TempDir()
	tokens, policy, audit := filepath.Join(dir, "tokens"), filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "audit.log")
	alice := strings.TrimSpace(mustZg(t, "", "token", "new", "--user", "alice", "--groups", "writers", "--append", tokens))
	out := mustZg(t, "", "token", "new", "--user", "bob")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[1], "sha256:") || !strings.HasSuffix(lines[1], "bob") {
		t.Fatalf("token new printed %q; want the token and the file entry", out)
	}
	bob := lines[0]
	f, _ := os.OpenFile(tokens, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(lines[1] + "\n")
	f.Close()
	if data, _ := os.ReadFile(tokens); strings.Contains(string(data), alice) || strings.Contains(string(data), bob) {
		t.Fatal("the token file holds a token")
	}
	writePolicy(t, policy, "rules:\n  - principals: [group:writers]\n    permissions: [read, write]\n    prefixes: [\"\"]\n  - principals: [user:bob]\n    permissions: [read]\n    prefixes: [\"\"]\n")
	s := startServer(t, "--root", filepath.Join(dir, "data"), "--tokens", tokens, "--policy", policy, "--audit-log", audit)
	if logs := s.logs.String(); !strings.Contains(logs, "authentication required") {
		t.Errorf("no log of the authentication in force:\n%s", logs)
	}

	if _, errOut, code := zg(t, "", "mkgroup", "g", "--addr", s.addr); code != 1 || !strings.Contains(errOut, "no credentials") {
		t.Errorf("mkgroup without a token: exit %d, %q", code, errOut)
	}
	bad := "zg_" + strings.Repeat("x", 43)
	if _, errOut, code := zg(t, "", "ls", "--addr", s.addr, "--token", bad); code != 1 || !strings.Contains(errOut, "unknown bearer token") || strings.Contains(errOut, bad) {
		t.Errorf("ls with an unknown token: exit %d, %q", code, errOut)
	}
	mustZg(t, "", "mkgroup", "g", "--addr", s.addr, "--token", alice)
	if out, errOut, code := zgEnv(t, []string{"ZARRGATE_TOKEN=" + bob, "ZARRGATE_ADDR=" + s.addr}, "", "ls", "-r"); code != 0 || !strings.Contains(out, "g") {
		t.Errorf("ls with ZARRGATE_TOKEN: exit %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code := zg(t, "", "mkgroup", "h", "--addr", s.addr, "--token", bob); code != 1 || !strings.Contains(errOut, "PermissionDenied") && !strings.Contains(errOut, "permission") {
		t.Errorf("bob's mkgroup: exit %d, %q; want a refusal by the policy", code, errOut)
	}
	if out, errOut, code := zg(t, "", "cp", "grpc://"+s.addr, filepath.Join(dir, "copy"), "--token", alice, "-q"); code != 0 {
		t.Errorf("cp with --token: exit %d\n%s%s", code, out, errOut)
	}
	recs, _ := os.ReadFile(audit)
	if !strings.Contains(string(recs), `"principal":"user:alice"`) || !strings.Contains(string(recs), `"principal":"user:bob"`) {
		t.Errorf("audit log does not name the authenticated principals:\n%s", recs)
	}

	// grpcurl: calls with -H; reflection and health without.
	h := "authorization: Bearer " + alice
	if out, err := grpcurl(t, "", "-plaintext", "-H", h, s.addr, "list"); err != nil || !strings.Contains(out, "zarrgate.store.v1.StoreService") {
		t.Errorf("grpcurl -H list: %v\n%s", err, out)
	}
	if out, err := grpcurl(t, "", "-plaintext", "-H", h, "-d", `{"path": "g"}`, s.addr, "zarrgate.gateway.v1.ArrayService/GetNode"); err != nil || !strings.Contains(out, "NODE_KIND_GROUP") {
		t.Errorf("grpcurl -H GetNode: %v\n%s", err, out)
	}
	if out, err := grpcurl(t, "", "-plaintext", s.addr, "list"); err != nil || !strings.Contains(out, "zarrgate.store.v1.StoreService") {
		t.Errorf("grpcurl list (reflection) without credentials: %v\n%s", err, out)
	}
	if out, err := grpcurl(t, "", "-plaintext", "-d", `{"path": "g"}`, s.addr, "zarrgate.gateway.v1.ArrayService/GetNode"); err == nil || !strings.Contains(out, "Unauthenticated") {
		t.Errorf("grpcurl GetNode without credentials: %v\n%s", err, out)
	}
	if out, err := grpcurl(t, "", "-plaintext", "-H", "authorization: Bearer "+bad, "-d", `{"path": "g"}`, s.addr, "zarrgate.gateway.v1.ArrayService/GetNode"); err == nil || !strings.Contains(out, "Unauthenticated") || strings.Contains(out, bad[5:]) {
		t.Errorf("grpcurl GetNode with a bad token: %v\n%s", err, out)
	}
	if out, err := grpcurl(t, "", "-plaintext", s.addr, "grpc.health.v1.Health/Check"); err != nil || !strings.Contains(out, "SERVING") {
		t.Errorf("health check without credentials: %v\n%s", err, out)
	}

	// A token appended to the file works without a restart.
	carol := strings.TrimSpace(mustZg(t, "", "token", "new", "--user", "carol", "--groups", "writers", "--append", tokens))
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, errOut, code := zg(t, "", "ls", "--addr", s.addr, "--token", carol)
		if code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a token added to the file is still refused: %s", errOut)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestServeJWT: `serve --oidc-issuer URL --jwt-audience AUD` accepts the
// issuer's tokens from the CLI and refuses expired ones and tokens of
// another audience.
func TestServeJWT(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	jwk := jose.JSONWebKey{Key: key, KeyID: "k1", Algorithm: "ES256", Use: "sig"}
	var iss *httptest.Server
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"issuer": iss.URL, "jwks_uri": iss.URL + "/keys"})
	})
	mux.HandleFunc("/keys", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{jwk.Public()}})
	})
	iss = httptest.NewServer(mux)
	defer iss.Close()
	sign := func(claims map[string]any) string {
		s, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jwk}, nil)
		p, _ := json.Marshal(claims)
		jws, _ := s.Sign(p)
		tok, _ := jws.CompactSerialize()
		return tok
	}
	now := time.Now()
	claims := func(aud string, exp time.Time) map[string]any {
		return map[string]any{"iss": iss.URL, "sub": "alice", "aud": aud, "exp": exp.Unix(), "iat": now.Unix()}
	}
	s := startServer(t, "--root", t.TempDir(), "--oidc-issuer", iss.URL, "--jwt-audience", "zarrgate")
	if out, errOut, code := zg(t, "", "mkgroup", "g", "--addr", s.addr, "--token", sign(claims("zarrgate", now.Add(time.Hour)))); code != 0 {
		t.Fatalf("mkgroup with a valid JWT: exit %d\n%s%s", code, out, errOut)
	}
	for name, c := range map[string]map[string]any{
		"expired":        claims("zarrgate", now.Add(-time.Minute)),
		"other audience": claims("other", now.Add(time.Hour)),
	} {
		if _, errOut, code := zg(t, "", "ls", "--addr", s.addr, "--token", sign(c)); code != 1 || !strings.Contains(errOut, "Unauthenticated") && !strings.Contains(errOut, "JWT") {
			t.Errorf("%s JWT: exit %d, %q", name, code, errOut)
		}
	}
}

// TestAuthFlagErrors: authentication flags that do not go together are
// usage errors (exit 2), a bad token file or an unreachable issuer fails
// start-up (exit 1), and the CLI will not send a token in plaintext to
// another host.
func TestAuthFlagErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "tokens")
	os.WriteFile(bad, []byte("zg_cleartexttoken alice\n"), 0o600)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"serve", "--root", dir, "--jwks-url", "http://127.0.0.1:1/keys", "--jwt-audience", "a"}, 2, "--jwt-issuer"},
		{[]string{"serve", "--root", dir, "--oidc-issuer", "http://127.0.0.1:1"}, 2, "--jwt-audience"},
		{[]string{"serve", "--root", dir, "--oidc-issuer", "http://127.0.0.1:1", "--jwks-url", "http://x", "--jwt-audience", "a"}, 2, "--oidc-issuer"},
		{[]string{"serve", "--root", dir, "--allow-anonymous"}, 2, "--allow-anonymous"},
		{[]string{"serve", "--root", dir, "--jwt-audience", "a"}, 2, "--jwt-audience"},
		{[]string{"serve", "--root", dir, "--listen", "127.0.0.1:0", "--tokens", bad}, 1, "line 1"},
		{[]string{"serve", "--root", dir, "--listen", "127.0.0.1:0", "--tokens", filepath.Join(dir, "missing")}, 1, "--tokens"},
		{[]string{"serve", "--root", dir, "--listen", "127.0.0.1:0", "--oidc-issuer", "http://127.0.0.1:1", "--jwt-audience", "a"}, 1, "discovery"},
		{[]string{"token", "new"}, 2, "--user"},
		{[]string{"token", "new", "--user", "anonymous"}, 2, "anonymous"},
		{[]string{"ls", "--addr", "192.0.2.1:50051", "--token", "zg_x", "--timeout", "5s"}, 1, "TLS"},
	} {
		out, errOut, code := zg(t, "", c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) || strings.Contains(errOut, "cleartexttoken") {
			t.Errorf("zarrgate %q: exit %d (want %d), stderr %q (want %q)\n%s", c.args, code, c.code, errOut, c.want, out)
		}
	}
}

// TestServeMTLSIdentity: with --client-ca, the caller is the client
// certificate's identity (its DNS SAN here): the policy grants it by
// name, and another certificate of the same CA gets only what it is
// granted.
func TestServeMTLSIdentity(t *testing.T) {
	f := newTLSFiles(t)
	otherCert, otherKey := f.authority.Issue(t, testcerts.Client("reader")).WriteAs(t, f.dir, "reader.pem", "reader-key.pem")
	policy := filepath.Join(f.dir, "policy.yaml")
	writePolicy(t, policy, "rules:\n  - principals: [user:e2e-client]\n    permissions: [read, write]\n    prefixes: [\"\"]\n  - principals: [user:reader]\n    permissions: [read]\n    prefixes: [\"\"]\n")
	s := startServer(t, "--root", t.TempDir(), "--tls-cert", f.cert, "--tls-key", f.key, "--client-ca", f.ca, "--policy", policy)
	if logs := s.logs.String(); !strings.Contains(logs, "mtls=true") {
		t.Errorf("no log of mTLS authentication:\n%s", logs)
	}
	writer := []string{"--addr", s.addr, "--tls-ca", f.ca, "--tls-cert", f.clientCert, "--tls-key", f.clientKey}
	reader := []string{"--addr", s.addr, "--tls-ca", f.ca, "--tls-cert", otherCert, "--tls-key", otherKey}
	mustZg(t, "", append([]string{"mkgroup", "g"}, writer...)...)
	if out, errOut, code := zg(t, "", append([]string{"ls"}, reader...)...); code != 0 || !strings.Contains(out, "g") {
		t.Errorf("reader's ls: exit %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code := zg(t, "", append([]string{"mkgroup", "h"}, reader...)...); code != 1 || !strings.Contains(errOut, "user:reader") {
		t.Errorf("reader's mkgroup: exit %d, %q; want a refusal naming user:reader", code, errOut)
	}
}

// TestPolicyLetsAnonymousIn: a server that takes tokens and has a policy
// granting anonymous needs no --allow-anonymous: callers without
// credentials get what the policy grants anonymous, and a refusal tells
// them to present credentials (UNAUTHENTICATED, not PERMISSION_DENIED);
// bad credentials are still refused. Once the policy grants anonymous
// nothing, callers without credentials are refused before the policy,
// as without a policy.
func TestPolicyLetsAnonymousIn(t *testing.T) {
	dir := t.TempDir()
	tokens, policy := filepath.Join(dir, "tokens"), filepath.Join(dir, "policy.yaml")
	alice := strings.TrimSpace(mustZg(t, "", "token", "new", "--user", "alice", "--append", tokens))
	writePolicy(t, policy, "rules:\n  - principals: [user:alice]\n    permissions: [admin]\n    prefixes: [\"\"]\n  - principals: [anonymous]\n    permissions: [read]\n    prefixes: [public]\n")
	s := startServer(t, "--root", filepath.Join(dir, "data"), "--tokens", tokens, "--policy", policy)
	mustZg(t, "", "mkgroup", "public/g", "--addr", s.addr, "--token", alice)
	mustZg(t, "", "mkgroup", "secret/g", "--addr", s.addr, "--token", alice)

	if out, errOut, code := zg(t, "", "ls", "public", "--addr", s.addr); code != 0 || !strings.Contains(out, "g") {
		t.Errorf("anonymous ls public: exit %d\n%s%s", code, out, errOut)
	}
	for _, args := range [][]string{{"ls", "secret"}, {"mkgroup", "public/h"}} {
		_, errOut, code := zg(t, "", append(args, "--addr", s.addr)...)
		if code != 1 || !strings.Contains(errOut, "no credentials") || !strings.Contains(errOut, "authorization: Bearer") {
			t.Errorf("anonymous %v: exit %d, %q; want a refusal asking for a token", args, code, errOut)
		}
	}
	if out, err := grpcurl(t, "", "-plaintext", "-d", `{"path": "secret/g"}`, s.addr, "zarrgate.gateway.v1.ArrayService/GetNode"); err == nil || !strings.Contains(out, "Unauthenticated") {
		t.Errorf("grpcurl GetNode secret/g without credentials: %v\n%s", err, out)
	}
	bad := "zg_" + strings.Repeat("x", 43)
	if _, errOut, code := zg(t, "", "ls", "public", "--addr", s.addr, "--token", bad); code != 1 || !strings.Contains(errOut, "unknown bearer token") {
		t.Errorf("ls public with an unknown token: exit %d, %q", code, errOut)
	}

	// No more grants to anonymous: refused by authentication, whatever
	// the call, once the new policy is in force.
	writePolicy(t, policy, "rules:\n  - principals: [user:alice]\n    permissions: [admin]\n    prefixes: [\"\"]\n")
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, errOut, code := zg(t, "", "ls", "public", "--addr", s.addr)
		if code == 1 && strings.Contains(errOut, "no credentials: this server needs an 'authorization: Bearer TOKEN' header") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("anonymous ls public after the policy dropped anonymous: exit %d, %q", code, errOut)
		}
		time.Sleep(200 * time.Millisecond)
	}
	mustZg(t, "", "ls", "public", "--addr", s.addr, "--token", alice)
}
