package tlsconf_test

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/internal/testcerts"
	"github.com/zarrgate/zarrgate/internal/tlsconf"
)

// TestServerReload follows what a listener's handshakes get as its files
// change: a new pair is taken, a broken or missing one is not (the old one
// stays), a new client CA bundle is taken, one without a certificate is
// not.
func TestServerReload(t *testing.T) {
	old := tlsconf.ReloadEvery
	tlsconf.ReloadEvery = 10 * time.Millisecond
	t.Cleanup(func() { tlsconf.ReloadEvery = old })

	dir := t.TempDir()
	ca := testcerts.NewCA(t, "CA")
	first := ca.Issue(t, testcerts.Server("127.0.0.1"))
	certFile, keyFile := first.Write(t, dir)
	caFile := ca.WriteCA(t, dir, "ca.pem")
	cfg, err := tlsconf.Server(certFile, keyFile, caFile, nil, "h2")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MinVersion != tls.VersionTLS12 {
		t.Errorf("MinVersion %x", cfg.MinVersion)
	}
	handshake := func() *tls.Config {
		t.Helper()
		time.Sleep(3 * tlsconf.ReloadEvery)
		c, err := cfg.GetConfigForClient(&tls.ClientHelloInfo{})
		if err != nil {
			t.Fatal(err)
		}
		if c.ClientAuth != tls.RequireAndVerifyClientCert || len(c.NextProtos) != 1 || c.NextProtos[0] != "h2" || c.MinVersion != tls.VersionTLS12 {
			t.Fatalf("handshake config: client auth %v, ALPN %q, min %x", c.ClientAuth, c.NextProtos, c.MinVersion)
		}
		return c
	}
	serial := func(c *tls.Config) string { return c.Certificates[0].Leaf.SerialNumber.String() }
	verifies := func(c *tls.Config, by *testcerts.CA) bool {
		leaf := by.Issue(t, testcerts.Client("x")).Leaf
		_, err := leaf.Verify(x509.VerifyOptions{Roots: c.ClientCAs, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		return err == nil
	}
	want := first.Leaf.SerialNumber.String()
	if got := serial(handshake()); got != want {
		t.Fatalf("serial %s, want %s", got, want)
	}
	// A key not of the new certificate: kept the old.
	second := ca.Issue(t, testcerts.Server("127.0.0.1"))
	os.WriteFile(certFile, second.CertPEM, 0o644)
	if got := serial(handshake()); got != want {
		t.Errorf("after a mismatched pair: serial %s, want the old %s", got, want)
	}
	// The key follows: taken.
	os.WriteFile(keyFile, second.KeyPEM, 0o600)
	want = second.Leaf.SerialNumber.String()
	if got := serial(handshake()); got != want {
		t.Errorf("after rotation: serial %s, want %s", got, want)
	}
	// Garbage, then a missing file: the loaded pair stays.
	os.WriteFile(certFile, []byte("-----BEGIN CERTIFICATE-----\ngarbage"), 0o644)
	if got := serial(handshake()); got != want {
		t.Errorf("after garbage: serial %s, want %s", got, want)
	}
	os.Remove(keyFile)
	if got := serial(handshake()); got != want {
		t.Errorf("after removing the key: serial %s, want %s", got, want)
	}

	// The client CA bundle: a new CA replaces the old.
	other := testcerts.NewCA(t, "other CA")
	if c := handshake(); !verifies(c, ca) || verifies(c, other) {
		t.Fatal("client CAs before rotation")
	}
	other.WriteCA(t, dir, "ca.pem")
	if c := handshake(); verifies(c, ca) || !verifies(c, other) {
		t.Error("client CAs after rotation: want only the new CA")
	}
	os.WriteFile(filepath.Join(dir, "ca.pem"), []byte("no certificate here, and a different size"), 0o644)
	if c := handshake(); !verifies(c, other) {
		t.Error("a CA bundle without a certificate replaced the loaded one")
	}
}
