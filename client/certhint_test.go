package client

import (
	"context"
	"crypto/tls"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zarrgate/zarrgate/internal/testcerts"
)

// A call that failed on a connection the server refused for want of a
// client certificate is explained as such even while gRPC's reconnection,
// begun at once, is still in its handshake: the hint follows the last
// connection whose handshake completed, not the one under way.
func TestCertHintSurvivesReconnection(t *testing.T) {
	ca := testcerts.NewCA(t, "hint CA")
	srv := ca.Issue(t, testcerts.Server("127.0.0.1"))
	pair, err := tls.X509KeyPair(srv.CertPEM, srv.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	// A server that requires a client certificate, and one that never
	// answers a handshake (the reconnection under way).
	mtls, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool(), NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer mtls.Close()
	go func() {
		for {
			c, err := mtls.Accept()
			if err != nil {
				return
			}
			go func() { c.(*tls.Conn).Handshake(); c.Close() }()
		}
	}()
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()

	h := &certHint{}
	creds := h.credentials(&tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13})
	handshake := func(ctx context.Context, addr string) (net.Conn, error) {
		raw, err := net.Dial("tcp", addr)
		if err != nil {
			return nil, err
		}
		c, _, err := creds.ClientHandshake(ctx, "127.0.0.1", raw)
		if err != nil {
			raw.Close()
		}
		return c, err
	}
	c, err := handshake(context.Background(), mtls.Addr().String())
	if err != nil {
		t.Fatalf("TLS 1.3: the client's handshake completes before the server refuses: %v", err)
	}
	defer c.Close()
	failed := status.Error(codes.Unavailable, "write tcp: write: broken pipe")
	if got := h.explain(failed); status.Code(got) != codes.Unauthenticated {
		t.Fatalf("after the refused connection: %v, want Unauthenticated", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); handshake(ctx, silent.Addr().String()) }()
	time.Sleep(100 * time.Millisecond) // the reconnection's handshake is under way
	if got := h.explain(failed); status.Code(got) != codes.Unauthenticated {
		t.Errorf("during the reconnection's handshake: %v, want Unauthenticated", got)
	}
	cancel()
	<-done
}
