package e2e

import (
	"strings"
	"testing"
)

// TestCLINoClientCertificate: the CLI against a server that requires
// client certificates (--client-ca), without --tls-cert/--tls-key, says
// so, rather than a bare transport error ("broken pipe", "connection
// reset", "error reading server preface").
func TestCLINoClientCertificate(t *testing.T) {
	f := newTLSFiles(t)
	s := startServer(t, "--root", t.TempDir(), "--tls-cert", f.cert, "--tls-key", f.key, "--client-ca", f.ca)
	for _, args := range [][]string{
		{"ls", "--addr", s.addr, "--timeout", "10s", "--tls-ca", f.ca},
		{"mkgroup", "g", "--addr", s.addr, "--timeout", "10s", "--tls-ca", f.ca},
		{"cat", "k", "--addr", s.addr, "--timeout", "10s", "--tls-ca", f.ca},
	} {
		_, errOut, code := zg(t, "", args...)
		t.Logf("%v: %s", args, errOut)
		if code != 1 || !strings.Contains(errOut, "requires a client certificate") || !strings.Contains(errOut, "--tls-cert") {
			t.Errorf("zarrgate %q: exit %d, %q; want exit 1 saying the server requires a client certificate (--tls-cert, --tls-key)", args, code, errOut)
		}
	}
}
