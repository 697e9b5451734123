package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/client"
	"github.com/zarrgate/zarrgate/internal/testenv"
)

// httpURLRE finds the store's URL in the "HTTP store endpoint up" line.
var httpURLRE = regexp.MustCompile(`http_url=(\S+)`)

// startHTTPServer runs `zarrgate serve --http-listen` on a free port over
// root, read-only, and returns the store's URL (http://host:port/zarr/).
func startHTTPServer(t *testing.T, root string, args ...string) (*server, string) {
	t.Helper()
	s := startServer(t, append([]string{"--root", root, "--read-only", "--http-listen", "127.0.0.1:0"}, args...)...)
	m := httpURLRE.FindStringSubmatch(s.logs.String())
	if m == nil {
		t.Fatalf("no http_url in the log:\n%s", s.logs.String())
	}
	return s, m[1]
}

// clientResult is what e2e/http's client scripts print.
type clientResult struct {
	Client   string   `json:"client"`
	Read     []string `json:"read"`
	Mismatch []string `json:"mismatch"`
	Skipped  []string `json:"skipped"`
}

func runClient(t *testing.T, cmd *exec.Cmd) clientResult {
	t.Helper()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var r clientResult
	if jerr := json.Unmarshal(bytes.TrimSpace(out), &r); jerr != nil || err != nil {
		t.Fatalf("%v: %v\nstdout: %s\nstderr: %s", cmd.Args, err, out, stderr.String())
	}
	if len(r.Mismatch) > 0 {
		t.Fatalf("%s read values that differ from the fixtures' (or failed): %v", r.Client, r.Mismatch)
	}
	return r
}

// needPython returns the test venv's python if it imports modules.
func needPython(t *testing.T, modules string) string {
	py := testenv.Python(t)
	if out, err := exec.Command(py, "-c", "import "+modules).CombinedOutput(); err != nil {
		if os.Getenv("ZARRGATE_INTEROP_REQUIRED") != "" {
			t.Fatalf("%s missing from %s but the interop checks are required: %s", modules, py, out)
		}
		t.Skipf("%s missing from %s: run scripts/deps.sh", modules, py)
	}
	return py
}

// npmCI installs e2e/http's node_modules as its package-lock.json pins
// them, unless a stamp says they already are (offline from then on).
func npmCI(t *testing.T, dir string) {
	t.Helper()
	if _, err := exec.LookPath("npm"); err != nil {
		if os.Getenv("ZARRGATE_INTEROP_REQUIRED") != "" {
			t.Fatal("node and npm are missing but the interop checks are required")
		}
		t.Skip("node and npm are missing")
	}
	h := sha256.New()
	for _, f := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		h.Write(b)
	}
	want := hex.EncodeToString(h.Sum(nil))
	stamp := filepath.Join(dir, "node_modules", ".zarrgate-lock-stamp")
	if got, _ := os.ReadFile(stamp); string(got) == want {
		return
	}
	cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
	}
	if err := os.WriteFile(stamp, []byte(want), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Unmodified HTTP Zarr readers — zarr-python through fsspec's HTTP
// filesystem, tensorstore's http kvstore, zarrita.js's FetchStore under
// Node — read the arrays zarr-python wrote (testdata/zarrpython) from
// `zarrgate serve --http-listen`, and get the values zarr-python recorded.
func TestHTTPClientsReadFixtures(t *testing.T) {
	fx, err := filepath.Abs(fixtures)
	if err != nil {
		t.Fatal(err)
	}
	_, url := startHTTPServer(t, filepath.Join(fx, "data"), "--http-consolidate")
	mustRead := func(t *testing.T, r clientResult, min int, paths ...string) {
		t.Helper()
		if len(r.Read) < min {
			t.Errorf("%s read only %d arrays, want at least %d: %v", r.Client, len(r.Read), min, r.Read)
		}
		for _, p := range paths {
			if !slices.Contains(r.Read, p) {
				t.Errorf("%s did not read %s", r.Client, p)
			}
		}
		t.Logf("%s read %d arrays (skipped as unsupported by the client: %v)", r.Client, len(r.Read), r.Skipped)
	}
	t.Run("zarr-python/fsspec", func(t *testing.T) {
		py := needPython(t, "zarr, fsspec, aiohttp")
		r := runClient(t, exec.Command(py, "http/read_python.py", "zarr", url, fx))
		// Every v3 array, strings and sharding included, and a group's
		// members found through the virtual consolidated metadata.
		mustRead(t, r, 56, "v3/dtypes/string", "v3/shard/strings", "v3/shard/nested", "v3/shard/partial[corner]", "v3/codecs/blosc-zstd-bitshuffle",
			"v3/shard members:end,nested,partial,start,strings")
	})
	t.Run("tensorstore", func(t *testing.T) {
		py := needPython(t, "tensorstore")
		r := runClient(t, exec.Command(py, "http/read_python.py", "tensorstore", url, fx))
		mustRead(t, r, 49, "v3/dtypes/float64", "v3/shard/start", "v3/shard/start[corner]", "v3/shard/nested", "v3/codecs/zstd-checksum")
	})
	t.Run("zarrita.js", func(t *testing.T) {
		npmCI(t, "http")
		r := runClient(t, exec.Command("node", "http/read_zarrita.mjs", url, fx))
		mustRead(t, r, 42, "v3/dtypes/string", "v3/shard/strings", "v3/shard/end", "v3/codecs/transpose", "v3/dtypes/int64")
	})
}

func httpDo(t *testing.T, c *http.Client, method, url, token, body string, hdr ...string) (int, string, http.Header) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// TestHTTPListenSecurity: the HTTP listener of `serve` takes the gRPC
// listener's tokens, policy and audit log (--tokens, --policy,
// --audit-log), writes only with --http-writes, and its TLS with mTLS
// identities (--tls-cert, --client-ca); a plaintext address other hosts
// can reach is refused without --insecure.
func TestHTTPListenSecurity(t *testing.T) {
	dir := t.TempDir()
	tokens, policy, audit := filepath.Join(dir, "tokens"), filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "audit.log")
	alice := strings.TrimSpace(mustZg(t, "", "token", "new", "--user", "alice", "--append", tokens))
	bob := strings.TrimSpace(mustZg(t, "", "token", "new", "--user", "bob", "--append", tokens))
	writePolicy(t, policy, "rules:\n  - principals: [user:alice]\n    permissions: [read, write, delete]\n    prefixes: [\"\"]\n  - principals: [user:bob]\n    permissions: [read]\n    prefixes: [a]\n")
	s := startServer(t, "--root", filepath.Join(dir, "data"), "--tokens", tokens, "--policy", policy, "--audit-log", audit, "--http-listen", "127.0.0.1:0", "--http-writes")
	url := httpURLRE.FindStringSubmatch(s.logs.String())[1]
	c := http.DefaultClient
	for _, step := range []struct {
		method, key, token, body string
		want                     int
	}{
		{"PUT", "a/k", alice, "hello", 204},
		{"PUT", "b/k", alice, "secret", 204},
		{"GET", "a/k", "", "", 401},
		{"GET", "a/k", "zg_" + strings.Repeat("x", 43), "", 401},
		{"GET", "a/k", bob, "", 200},
		{"GET", "b/k", bob, "", 403},
		{"PUT", "a/k", bob, "x", 403},
		{"DELETE", "a/k", bob, "", 403},
		{"GET", "b/k", alice, "", 200},
		{"DELETE", "b/k", alice, "", 204},
		{"GET", "b/k", alice, "", 404},
	} {
		code, body, _ := httpDo(t, c, step.method, url+step.key, step.token, step.body)
		if code != step.want {
			t.Errorf("%s %s: %d, want %d (%s)", step.method, step.key, code, step.want, body)
		}
	}
	// The gRPC side sees what HTTP wrote.
	if out := mustZg(t, "", "get", "a/k", "--addr", s.addr, "--token", bob); out != "hello" {
		t.Errorf("zarrgate get over gRPC: %q", out)
	}
	recs, _ := os.ReadFile(audit)
	if !strings.Contains(string(recs), `"method":"HTTP PUT"`) || !strings.Contains(string(recs), `"principal":"user:bob"`) {
		t.Errorf("audit log lacks the HTTP writes and refusals:\n%s", recs)
	}

	// Without --http-writes: 405.
	ro := startServer(t, "--root", filepath.Join(dir, "data"), "--http-listen", "127.0.0.1:0")
	rurl := httpURLRE.FindStringSubmatch(ro.logs.String())[1]
	if code, _, h := httpDo(t, c, "PUT", rurl+"a/k", "", "x"); code != 405 || h.Get("Allow") != "GET, HEAD, OPTIONS" {
		t.Errorf("PUT without --http-writes: %d Allow %q", code, h.Get("Allow"))
	}

	// TLS with client certificates: the certificate's identity meets the policy.
	f := newTLSFiles(t)
	tp := filepath.Join(f.dir, "policy.yaml")
	writePolicy(t, tp, "rules:\n  - principals: [user:e2e-client]\n    permissions: [read]\n    prefixes: [\"\"]\n")
	ts := startServer(t, "--root", filepath.Join(dir, "data"), "--tls-cert", f.cert, "--tls-key", f.key, "--client-ca", f.ca, "--policy", tp, "--http-listen", "127.0.0.1:0")
	turl := httpURLRE.FindStringSubmatch(ts.logs.String())[1]
	if !strings.HasPrefix(turl, "https://") {
		t.Fatalf("TLS listener's URL %q", turl)
	}
	caPEM, _ := os.ReadFile(f.ca)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	cert, err := tls.LoadX509KeyPair(f.clientCert, f.clientKey)
	if err != nil {
		t.Fatal(err)
	}
	mtls := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}}
	if code, body, _ := httpDo(t, mtls, "GET", turl+"a/k", "", ""); code != 200 || body != "hello" {
		t.Errorf("GET with a client certificate: %d %q", code, body)
	}
	noCert := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if _, err := noCert.Get(turl + "a/k"); err == nil {
		t.Error("a client without a certificate was served")
	}
	// (Go's TLS server answers a plaintext request with a 400 of its own.)
	if code, body, _ := httpDo(t, c, "GET", strings.Replace(turl, "https://", "http://", 1)+"a/k", "", ""); code != 400 || strings.Contains(body, "hello") {
		t.Errorf("plaintext on the TLS listener: %d %q", code, body)
	}

	// Plaintext on an address other hosts reach: refused at start-up.
	if _, errOut, code := zg(t, "", "serve", "--root", dir, "--http-listen", "0.0.0.0:0"); code != 2 || !strings.Contains(errOut, "--http-listen") || !strings.Contains(errOut, "--insecure") {
		t.Errorf("plaintext --http-listen 0.0.0.0: exit %d, %q", code, errOut)
	}
}

// TestGatewayHTTPListen: `gateway --http-listen` serves its store tier's
// data over HTTP, and a write over HTTP (--http-writes) is seen at once
// by the gateway's array calls: it goes through the gateway's raw store,
// which drops the metadata it had cached.
func TestGatewayHTTPListen(t *testing.T) {
	root := t.TempDir()
	sw := startCommand(t, "store-worker", "--root", root)
	gw := startCommand(t, "gateway", "--store", sw.addr, "--http-listen", "127.0.0.1:0", "--http-writes", "--metadata-ttl", "1h")
	m := httpURLRE.FindStringSubmatch(gw.logs.String())
	if m == nil {
		t.Fatalf("no http_url in the gateway's log:\n%s", gw.logs.String())
	}
	url := m[1]
	mustZg(t, "", "mkgroup", "g", "--addr", gw.addr)
	code, body, h := httpDo(t, http.DefaultClient, "GET", url+"g/zarr.json", "", "")
	if code != 200 || !strings.Contains(body, `"node_type":"group"`) && !strings.Contains(body, `"node_type": "group"`) {
		t.Fatalf("GET g/zarr.json from the gateway: %d %s", code, body)
	}
	// Cached by the gateway (ls), then replaced over HTTP with attributes.
	mustZg(t, "", "ls", "g", "--addr", gw.addr)
	doc := `{"zarr_format":3,"node_type":"group","attributes":{"from":"http"}}`
	if code, body, _ := httpDo(t, http.DefaultClient, "PUT", url+"g/zarr.json", "", doc, "If-Match", h.Get("ETag")); code != 204 {
		t.Fatalf("PUT g/zarr.json: %d %s", code, body)
	}
	if out := mustZg(t, "", "info", "g", "--addr", gw.addr); !strings.Contains(out, "http") {
		t.Errorf("the gateway still shows the old metadata after an HTTP write:\n%s", out)
	}
}

// TestHTTPSlabAndUIServed: `serve --http-listen` also serves the slab
// endpoint (/slab/) and the browser view (/ui/), behind the listener's
// authentication and the policy: a reader gets the .npy of what it may
// read, 403 for what it may not, 401 without a token; the view's tree
// leaves out the nodes the caller may not read.
func TestHTTPSlabAndUIServed(t *testing.T) {
	dir := t.TempDir()
	tokens, policy := filepath.Join(dir, "tokens"), filepath.Join(dir, "policy.yaml")
	alice := strings.TrimSpace(mustZg(t, "", "token", "new", "--user", "alice", "--append", tokens))
	bob := strings.TrimSpace(mustZg(t, "", "token", "new", "--user", "bob", "--append", tokens))
	writePolicy(t, policy, "rules:\n  - principals: [user:alice]\n    permissions: [read, write, delete]\n    prefixes: [\"\"]\n  - principals: [user:bob]\n    permissions: [read]\n    prefixes: [a]\n")
	s := startServer(t, "--root", filepath.Join(dir, "data"), "--tokens", tokens, "--policy", policy, "--http-listen", "127.0.0.1:0")
	base := strings.TrimSuffix(httpURLRE.FindStringSubmatch(s.logs.String())[1], "/zarr/")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, s.addr, client.WithToken(alice))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want := make([]int32, 4*6)
	for i := range want {
		want[i] = int32(i*7 - 5)
	}
	for _, p := range []string{"a/x", "b/y"} {
		a, err := c.CreateArray(ctx, p, client.ArraySpec{Shape: []int64{4, 6}, DataType: "int32", ChunkShape: []int64{2, 3}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := client.Write(ctx, a, nil, want); err != nil {
			t.Fatal(err)
		}
	}

	hc := http.DefaultClient
	code, body, hdr := httpDo(t, hc, "GET", base+"/slab/a/x?sel=1:3,0:6", bob, "")
	if code != 200 || !strings.HasPrefix(body, "\x93NUMPY") {
		t.Fatalf("GET /slab/a/x as bob: %d %q", code, body[:min(len(body), 80)])
	}
	var wantBytes bytes.Buffer
	binary.Write(&wantBytes, binary.LittleEndian, want[6:18])
	if !strings.HasSuffix(body, wantBytes.String()) || !strings.Contains(body, "'shape': (2, 6)") {
		t.Errorf("GET /slab/a/x?sel=1:3,0:6: .npy does not hold rows 1..2 (Content-Type %s, %d bytes)", hdr.Get("Content-Type"), len(body))
	}
	if code, body, _ := httpDo(t, hc, "GET", base+"/slab/b/y", bob, ""); code != 403 {
		t.Errorf("GET /slab/b/y as bob: %d, want 403 (%s)", code, body)
	}
	if code, body, _ := httpDo(t, hc, "GET", base+"/slab/a/x", "", ""); code != 401 {
		t.Errorf("GET /slab/a/x without a token: %d, want 401 (%s)", code, body)
	}
	// The page's own files hold no data and need no token (a browser
	// loads them, then sends the token it is given with the data
	// requests); its data API does, and an unclean path is not public.
	for _, f := range []string{"/ui/", "/ui/app.js", "/ui/style.css"} {
		if code, body, _ := httpDo(t, hc, "GET", base+f, "", ""); code != 200 || len(body) == 0 {
			t.Errorf("GET %s without a token: %d, want the page's file", f, code)
		}
	}
	for _, f := range []string{"/ui/api/tree", "/ui/api/node?path=a/x", "/ui/api/slab/a/x", "/ui/x/../api/tree"} {
		if code, body, _ := httpDo(t, hc, "GET", base+f, "", ""); code != 401 {
			t.Errorf("GET %s without a token: %d, want 401 (%.80s)", f, code, body)
		}
	}
	code, body, _ = httpDo(t, hc, "GET", base+"/ui/api/tree", bob, "")
	if code != 200 || !strings.Contains(body, `a/x"`) || strings.Contains(body, `b/y"`) {
		t.Errorf("GET /ui/api/tree as bob: %d %s; want a/x and not b/y", code, body)
	}
	if code, _, _ := httpDo(t, hc, "GET", base+"/ui/api/tree", alice, ""); code != 200 {
		t.Errorf("GET /ui/api/tree as alice: %d", code)
	}

	// In a browser (Debian's headless chromium): the page loads without a
	// token, meets the 401 of its data requests and asks for a token.
	bin := testenv.Chromium(t)
	bctx, bcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer bcancel()
	cmd := exec.CommandContext(bctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
		"--user-data-dir="+t.TempDir(), "--virtual-time-budget=10000", "--dump-dom", base+"/ui/")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	dom, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.Bytes())
	}
	if !bytes.Contains(dom, []byte(`id="login"`)) || !bytes.Contains(dom, []byte("needs a token")) {
		t.Errorf("the page on a server with tokens does not ask for one; its DOM:\n%s", dom)
	}
}
