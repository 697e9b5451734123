package client_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"iter"
	"log/slog"
	"math/big"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zarrgate/zarrgate/client"
	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/gateway"
	"github.com/zarrgate/zarrgate/gateway/arrayserver"
	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/internal/testcerts"
	"github.com/zarrgate/zarrgate/internal/tlsconf"
	"github.com/zarrgate/zarrgate/storesvc/memory"
)

// tlsServer serves a gateway over an in-memory store with TLS from the
// files (and mTLS with clientCA), as `zarrgate serve --tls-cert ...` does,
// and returns its address.
func tlsServer(t *testing.T, certFile, keyFile, clientCA string) string {
	t.Helper()
	cfg, err := tlsconf.Server(certFile, keyFile, clientCA, slog.New(slog.NewTextHandler(io.Discard, nil)), "h2")
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)), rpc.ServerTLS(cfg))
	arrayserver.NewServer(gateway.New(memory.New(), codecsvc.NewLocal(), gateway.Config{})).Register(srv)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// pki is a CA, a server certificate of it for 127.0.0.1, and their files.
type pki struct {
	ca                *testcerts.CA
	dir               string
	caFile            string
	srvCert, srvKey   string
	serverCertificate *testcerts.Cert
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{ca: testcerts.NewCA(t, "zarrgate test CA"), dir: t.TempDir()}
	p.caFile = p.ca.WriteCA(t, p.dir, "ca.pem")
	p.serverCertificate = p.ca.Issue(t, testcerts.Server("127.0.0.1", "localhost"))
	p.srvCert, p.srvKey = p.serverCertificate.Write(t, p.dir)
	return p
}

// checkCall makes a call and checks its code.
func checkCall(t *testing.T, name string, c *client.Client, want codes.Code) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.List(ctx, "", true)
	if got := status.Code(err); got != want {
		t.Errorf("%s: List: code %v (%v), want %v", name, got, err, want)
	}
}

func dialT(t *testing.T, addr string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.Dial(context.Background(), addr, append([]client.Option{client.WithRetries(0, time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestTLSServer(t *testing.T) {
	p := newPKI(t)
	addr := tlsServer(t, p.srvCert, p.srvKey, "")

	cfg, err := client.LoadTLS(p.caFile, "", "")
	if err != nil {
		t.Fatal(err)
	}
	var version uint16
	cfg.VerifyConnection = func(cs tls.ConnectionState) error { version = cs.Version; return nil }
	checkCall(t, "client with the CA", dialT(t, addr, client.WithTLS(cfg)), codes.OK)
	if version != tls.VersionTLS13 {
		t.Errorf("negotiated TLS version %x, want 1.3", version)
	}

	checkCall(t, "plaintext client", dialT(t, addr), codes.Unavailable)

	other := testcerts.NewCA(t, "another CA")
	wrong := &tls.Config{RootCAs: other.Pool()}
	checkCall(t, "client trusting another CA", dialT(t, addr, client.WithTLS(wrong)), codes.Unavailable)

	// TLS 1.1 and older are refused.
	old := &tls.Config{RootCAs: p.ca.Pool(), MaxVersion: tls.VersionTLS11, MinVersion: tls.VersionTLS10}
	checkCall(t, "TLS 1.1 client", dialT(t, addr, client.WithTLS(old)), codes.Unavailable)

	// A server name the certificate does not hold.
	other2 := &tls.Config{RootCAs: p.ca.Pool(), ServerName: "elsewhere.example"}
	checkCall(t, "client expecting another name", dialT(t, addr, client.WithTLS(other2)), codes.Unavailable)
}

func TestMTLS(t *testing.T) {
	p := newPKI(t)
	addr := tlsServer(t, p.srvCert, p.srvKey, p.caFile)

	clientFiles := func(c *testcerts.Cert, name string) (string, string) {
		return c.WriteAs(t, p.dir, name+".pem", name+"-key.pem")
	}
	good, goodKey := clientFiles(p.ca.Issue(t, testcerts.Client("alice")), "alice")
	cfg, err := client.LoadTLS(p.caFile, good, goodKey)
	if err != nil {
		t.Fatal(err)
	}
	checkCall(t, "client certificate of the CA", dialT(t, addr, client.WithTLS(cfg)), codes.OK)

	other := testcerts.NewCA(t, "another CA")
	bad, badKey := clientFiles(other.Issue(t, testcerts.Client("mallory")), "mallory")
	expired, expiredKey := clientFiles(p.ca.Issue(t, testcerts.Template{
		CommonName: "bob", ExtUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour),
	}), "expired")
	serverOnly, serverOnlyKey := clientFiles(p.ca.Issue(t, testcerts.Template{
		CommonName: "srv", ExtUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}), "serveronly")
	for _, tc := range []struct{ name, cert, key string }{
		{"client certificate of another CA", bad, badKey},
		{"expired client certificate", expired, expiredKey},
		{"certificate not for client authentication", serverOnly, serverOnlyKey},
	} {
		cfg, err := client.LoadTLS(p.caFile, tc.cert, tc.key)
		if err != nil {
			t.Fatal(err)
		}
		checkCall(t, tc.name, dialT(t, addr, client.WithTLS(cfg)), codes.Unavailable)
	}
	// Without a certificate, the call says that one is needed (not the
	// transport's "broken pipe" or "connection reset"), as Unauthenticated,
	// on unary calls and streams, with retries on.
	cfg, err = client.LoadTLS(p.caFile, "", "")
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.Dial(context.Background(), addr, client.WithTLS(cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err1 := c.List(ctx, "", true)
	_, err2 := c.GetNode(ctx, "")
	for _, err := range []error{err1, err2} {
		if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "the server requires a client certificate") {
			t.Errorf("no client certificate: %v; want Unauthenticated saying the server requires a client certificate", err)
		}
	}
	// A server that does not ask for one is not affected.
	plain := tlsServer(t, p.srvCert, p.srvKey, "")
	checkCall(t, "no client certificate, none asked", dialT(t, plain, client.WithTLS(cfg)), codes.OK)
	checkCall(t, "plaintext client", dialT(t, addr), codes.Unavailable)
}

// TestTLSRotation replaces the server's certificate files while a client
// streams a long read: the stream finishes on its connection, and new
// connections get the new certificate. A broken pair written meanwhile is
// ignored.
func TestTLSRotation(t *testing.T) {
	old := tlsconf.ReloadEvery
	tlsconf.ReloadEvery = 100 * time.Millisecond
	t.Cleanup(func() { tlsconf.ReloadEvery = old })

	p := newPKI(t)
	addr := tlsServer(t, p.srvCert, p.srvKey, "")
	var mu sync.Mutex
	var serials []*big.Int
	dialSerial := func() (*client.Client, *big.Int) {
		t.Helper()
		cfg, err := client.LoadTLS(p.caFile, "", "")
		if err != nil {
			t.Fatal(err)
		}
		var serial *big.Int
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			mu.Lock()
			defer mu.Unlock()
			serial = cs.PeerCertificates[0].SerialNumber
			serials = append(serials, serial)
			return nil
		}
		c := dialT(t, addr, client.WithTLS(cfg), client.WithSharedMemory(false))
		checkCall(t, "dial", c, codes.OK)
		mu.Lock()
		defer mu.Unlock()
		return c, serial
	}

	ctx := context.Background()
	c, first := dialSerial()
	if first.Cmp(p.serverCertificate.Leaf.SerialNumber) != 0 {
		t.Fatalf("first connection: serial %v, want %v", first, p.serverCertificate.Leaf.SerialNumber)
	}
	// 16 MiB of fill values: more than the stream's flow-control window,
	// so the server is still sending when the files change.
	a, err := c.CreateArray(ctx, "big", client.ArraySpec{Shape: []int64{2048, 2048}, DataType: "float32", ChunkShape: []int64{128, 2048}})
	if err != nil {
		t.Fatal(err)
	}
	_, blocks, err := a.Blocks(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	next, stop := iter.Pull2(blocks)
	defer stop()
	var got int64
	b, err, ok := next()
	if !ok || err != nil {
		t.Fatalf("first block: %v", err)
	}
	got += int64(len(b.Data))

	// A half-written rotation: a new certificate with the old key. It is
	// refused (and logged); the old pair stays.
	rotated := p.ca.Issue(t, testcerts.Server("127.0.0.1", "localhost"))
	(&testcerts.Cert{CertPEM: rotated.CertPEM, KeyPEM: p.serverCertificate.KeyPEM}).Write(t, p.dir)
	time.Sleep(3 * tlsconf.ReloadEvery)
	_, mid := dialSerial()
	if mid.Cmp(first) != 0 {
		t.Errorf("after a mismatched pair was written: serial %v, want the old %v", mid, first)
	}
	// The complete rotation.
	rotated.Write(t, p.dir)
	time.Sleep(3 * tlsconf.ReloadEvery)
	_, second := dialSerial()
	if second.Cmp(rotated.Leaf.SerialNumber) != 0 {
		t.Errorf("after rotation: serial %v, want the new %v", second, rotated.Leaf.SerialNumber)
	}

	for {
		b, err, ok := next()
		if !ok {
			break
		}
		if err != nil {
			t.Fatalf("stream broken by the rotation: %v", err)
		}
		got += int64(len(b.Data))
	}
	if want := int64(2048 * 2048 * 4); got != want {
		t.Errorf("streamed %d bytes, want %d", got, want)
	}
}
