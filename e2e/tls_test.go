package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/internal/testcerts"
)

// TestInsecureRule: plaintext on an address other hosts can reach needs
// --insecure (exit 2 without it, before anything is opened), and is then
// served with a warning; loopback stays plaintext by default (every other
// e2e test).
func TestInsecureRule(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"serve", "--root", dir, "--listen", "0.0.0.0:0"},
		{"serve", "--root", dir, "--listen", ":0"},
		{"store-worker", "--root", dir, "--listen", "[::]:0"},
		{"codec-worker", "--listen", "0.0.0.0:0"},
		{"gateway", "--store", "127.0.0.1:1", "--listen", "0.0.0.0:0"},
	} {
		start := time.Now()
		out, errOut, code := zgEnv(t, nil, "", args...)
		if code != 2 || !strings.Contains(errOut, "--insecure") || !strings.Contains(errOut, "TLS") {
			t.Errorf("zarrgate %q: exit %d, stdout %q, stderr %q; want exit 2 asking for TLS or --insecure", args, code, out, errOut)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("zarrgate %q: took %v to refuse", args, d)
		}
	}
	// ZARRGATE_INSECURE works as the flag does.
	s := startServer(t, "--root", dir, "--listen", "0.0.0.0:0", "--insecure")
	if logs := s.logs.String(); !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "--insecure") {
		t.Errorf("serving plaintext on 0.0.0.0 logged no warning:\n%s", logs)
	}
	port := s.addr[strings.LastIndex(s.addr, ":"):]
	if out, errOut, code := zg(t, "", "ls", "--addr", "127.0.0.1"+port); code != 0 {
		t.Errorf("ls against the --insecure server: exit %d\n%s%s", code, out, errOut)
	}
}

// tlsFiles makes a CA, a server certificate for 127.0.0.1 and a client
// certificate, as files in a temporary directory.
type tlsFiles struct {
	dir, ca, cert, key, clientCert, clientKey string
	authority                                 *testcerts.CA
}

func newTLSFiles(t *testing.T) tlsFiles {
	t.Helper()
	f := tlsFiles{dir: t.TempDir(), authority: testcerts.NewCA(t, "e2e CA")}
	f.ca = f.authority.WriteCA(t, f.dir, "ca.pem")
	f.cert, f.key = f.authority.Issue(t, testcerts.Server("127.0.0.1", "localhost")).Write(t, f.dir)
	f.clientCert, f.clientKey = f.authority.Issue(t, testcerts.Client("e2e-client")).WriteAs(t, f.dir, "client.pem", "client-key.pem")
	return f
}

// TestServeTLSTools: `serve --tls-cert --tls-key --client-ca` answers
// grpcurl with -cacert and a client certificate, and the CLI with
// --tls-ca (or ZARRGATE_TLS_CA) and --tls-cert/--tls-key; plaintext and
// certificate-less clients are refused.
func TestServeTLSTools(t *testing.T) {
	f := newTLSFiles(t)
	s := startServer(t, "--root", t.TempDir(), "--tls-cert", f.cert, "--tls-key", f.key, "--client-ca", f.ca)
	if !strings.Contains(s.logs.String(), "tls=true") {
		t.Errorf("serving log does not say TLS:\n%s", s.logs.String())
	}

	out, err := grpcurl(t, "", "-cacert", f.ca, "-cert", f.clientCert, "-key", f.clientKey, s.addr, "grpc.health.v1.Health/Check")
	if err != nil || !strings.Contains(out, "SERVING") {
		t.Fatalf("grpcurl -cacert -cert -key: %v\n%s", err, out)
	}
	if out, err := grpcurl(t, "", "-cacert", f.ca, s.addr, "grpc.health.v1.Health/Check"); err == nil {
		t.Errorf("grpcurl without a client certificate was served:\n%s", out)
	}
	if out, err := grpcurl(t, "", "-plaintext", s.addr, "grpc.health.v1.Health/Check"); err == nil {
		t.Errorf("grpcurl -plaintext was served:\n%s", out)
	}

	tlsArgs := []string{"--addr", s.addr, "--tls-ca", f.ca, "--tls-cert", f.clientCert, "--tls-key", f.clientKey}
	if out, errOut, code := zg(t, "", append([]string{"mkgroup", "g"}, tlsArgs...)...); code != 0 {
		t.Fatalf("mkgroup over mTLS: exit %d\n%s%s", code, out, errOut)
	}
	env := []string{"ZARRGATE_ADDR=" + s.addr, "ZARRGATE_TLS_CA=" + f.ca, "ZARRGATE_TLS_CERT=" + f.clientCert, "ZARRGATE_TLS_KEY=" + f.clientKey}
	if out, errOut, code := zgEnv(t, env, "", "ls", "-r"); code != 0 || !strings.Contains(out, "g") {
		t.Errorf("ls with ZARRGATE_TLS_*: exit %d\n%s%s", code, out, errOut)
	}
	for _, args := range [][]string{
		{"ls", "--addr", s.addr, "--timeout", "5s"},
		{"ls", "--addr", s.addr, "--timeout", "5s", "--tls-ca", f.ca},
	} {
		if out, errOut, code := zg(t, "", args...); code != 1 || !strings.Contains(errOut, "zarrgate ls: ") {
			t.Errorf("zarrgate %q: exit %d, want 1 with an error\n%s%s", args, code, out, errOut)
		}
	}
	if _, errOut, code := zg(t, "", "ls", "--addr", s.addr, "--tls-cert", f.clientCert); code != 2 {
		t.Errorf("--tls-cert without --tls-key: exit %d, want 2: %s", code, errOut)
	}
}

// TestGatewayPeerMTLS: a gateway dials its store and codec workers with
// mTLS (--peer-ca, --peer-cert, --peer-key; the workers with --tls-cert,
// --tls-key, --client-ca) and serves through them; a codec worker whose
// certificate is of another CA is refused, and calls needing it fail with
// UNAVAILABLE naming the codec tier and the TLS failure.
func TestGatewayPeerMTLS(t *testing.T) {
	f := newTLSFiles(t)
	workerTLS := []string{"--tls-cert", f.cert, "--tls-key", f.key, "--client-ca", f.ca}
	peer := []string{"--peer-ca", f.ca, "--peer-cert", f.clientCert, "--peer-key", f.clientKey}
	root := t.TempDir()
	sw := startCommand(t, "store-worker", append([]string{"--root", root}, workerTLS...)...)
	cw := startCommand(t, "codec-worker", workerTLS...)
	gw := startCommand(t, "gateway", append([]string{"--store", sw.addr, "--codec", cw.addr}, peer...)...)

	if out, errOut, code := zg(t, "", "mkarray", "a", "--shape", "4,4", "--chunks", "2,2", "--dtype", "int32", "--addr", gw.addr); code != 0 {
		t.Fatalf("mkarray through the gateway: exit %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code := zg(t, "", "cat", "a", "--addr", gw.addr); code != 0 {
		t.Fatalf("cat through the gateway: exit %d\n%s%s", code, out, errOut)
	}

	rogue := testcerts.NewCA(t, "rogue CA")
	rc, rk := rogue.Issue(t, testcerts.Server("127.0.0.1")).WriteAs(t, f.dir, "rogue.pem", "rogue-key.pem")
	bad := startCommand(t, "codec-worker", "--tls-cert", rc, "--tls-key", rk, "--client-ca", f.ca)
	gw2 := startCommand(t, "gateway", append([]string{"--store", sw.addr, "--codec", bad.addr, "--tier-wait", "1s"}, peer...)...)
	// A stored chunk: reading it needs the codec tier.
	if out, errOut, code := zg(t, "not zstd", "put", "a/c/0/0", "--addr", gw.addr); code != 0 {
		t.Fatalf("put: exit %d\n%s%s", code, out, errOut)
	}
	start := time.Now()
	_, errOut, code := zg(t, "", "cat", "a", "--addr", gw2.addr, "--timeout", "20s")
	if code != 1 || !strings.Contains(errOut, "codec") || !strings.Contains(errOut, "TLS") || !strings.Contains(errOut, "unknown authority") {
		t.Errorf("cat through a gateway whose codec worker has a rogue certificate: exit %d, stderr %q; want UNAVAILABLE naming the codec tier and the TLS failure", code, errOut)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("refusal took %v", d)
	}
}
