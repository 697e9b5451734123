package rpc_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/internal/testcerts"
	"github.com/zarrgate/zarrgate/internal/tlsconf"
)

// startTLSWorker serves the health service with TLS from the files,
// requiring client certificates of clientCA, as `zarrgate store-worker
// --tls-cert --tls-key --client-ca` does.
func startTLSWorker(t *testing.T, certFile, keyFile, clientCA string) string {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg, err := tlsconf.Server(certFile, keyFile, clientCA, logger, "h2")
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(logger, rpc.ServerTLS(cfg))
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// TestTierPeerMTLS: a gateway's tier dials its workers with mTLS: a worker
// whose certificate verifies against the peer CA is used; one presenting a
// certificate of another CA, or for another name, is refused, and so is
// the gateway by a worker when it presents no certificate of the workers'
// client CA: the calls fail with Unavailable naming the tier and the TLS
// failure, within the tier's wait.
func TestTierPeerMTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "peer CA")
	caFile := ca.WriteCA(t, dir, "ca.pem")
	wCert, wKey := ca.Issue(t, testcerts.Server("127.0.0.1")).WriteAs(t, dir, "worker.pem", "worker-key.pem")
	gCert, gKey := ca.Issue(t, testcerts.Client("gateway")).WriteAs(t, dir, "gw.pem", "gw-key.pem")
	other := testcerts.NewCA(t, "other CA")
	oCert, oKey := other.Issue(t, testcerts.Server("127.0.0.1")).WriteAs(t, dir, "rogue.pem", "rogue-key.pem")
	nCert, nKey := ca.Issue(t, testcerts.Server("worker.elsewhere")).WriteAs(t, dir, "named.pem", "named-key.pem")
	oClient, oClientKey := other.Issue(t, testcerts.Client("gateway")).WriteAs(t, dir, "ogw.pem", "ogw-key.pem")

	good := startTLSWorker(t, wCert, wKey, caFile)
	rogue := startTLSWorker(t, oCert, oKey, caFile)
	misnamed := startTLSWorker(t, nCert, nKey, caFile)

	call := func(target, cert, key, serverName string) error {
		t.Helper()
		cfg, err := tlsconf.ClientReloading(caFile, cert, key, serverName, nil)
		if err != nil {
			t.Fatal(err)
		}
		// Wait: 2 s, not less: a refused client certificate is known
		// only from the alert the worker sends after a TLS 1.3 handshake,
		// and under -race beside other packages' tests (CI) the first
		// handshake and its alert took longer than 500 ms.
		tier := &rpc.Tier{Name: "store", Target: target, Wait: 2 * time.Second,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), TLS: cfg}
		cc, err := rpc.DialWorkers(target, tier.DialOptions()...)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	if err := call(good, gCert, gKey, ""); err != nil {
		t.Fatalf("worker with a certificate of the peer CA: %v", err)
	}
	if err := call(misnamed, gCert, gKey, "worker.elsewhere"); err != nil {
		t.Fatalf("worker named by --peer-server-name: %v", err)
	}
	for _, tc := range []struct {
		name, target, cert, key, want string
	}{
		{"worker presenting a certificate of another CA", rogue, gCert, gKey, "certificate signed by unknown authority"},
		{"worker presenting a certificate for another name", misnamed, gCert, gKey, "cannot validate certificate for 127.0.0.1"},
		{"gateway presenting no client certificate", good, "", "", "certificate required"},
		{"gateway presenting a client certificate of another CA", good, oClient, oClientKey, "tls: "},
	} {
		start := time.Now()
		err := call(tc.target, tc.cert, tc.key, "")
		msg := status.Convert(err).Message()
		if status.Code(err) != codes.Unavailable || !strings.Contains(msg, "store worker") ||
			!strings.Contains(msg, "TLS handshake") || !strings.Contains(msg, tc.want) {
			t.Errorf("%s: %v; want Unavailable naming the store tier and %q", tc.name, err, tc.want)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s: took %v", tc.name, d)
		}
	}
}

// TestServerConfigRefusesBadFiles: a listener's configuration is not made
// from files that do not hold a matching pair or a CA.
func TestServerConfigRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "CA")
	a := ca.Issue(t, testcerts.Server("127.0.0.1"))
	b := ca.Issue(t, testcerts.Server("127.0.0.1"))
	cert, _ := a.WriteAs(t, dir, "a.pem", "a-key.pem")
	_, bKey := b.WriteAs(t, dir, "b.pem", "b-key.pem")
	caFile := ca.WriteCA(t, dir, "ca.pem")
	for _, tc := range []struct{ name, cert, key, ca string }{
		{"key of another certificate", cert, bKey, ""},
		{"missing file", cert, dir + "/nope.pem", ""},
		{"key file given as CA", cert, dir + "/a-key.pem", bKey},
		{"certificate as key", cert, cert, ""},
		{"CA file without a certificate", cert, dir + "/a-key.pem", dir + "/a-key.pem"},
	} {
		if _, err := tlsconf.Server(tc.cert, tc.key, tc.ca, nil, "h2"); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
	if _, err := tlsconf.Server(cert, dir+"/a-key.pem", caFile, nil, "h2"); err != nil {
		t.Errorf("good files: %v", err)
	}
}

// TestTierPeerCARotation: the gateway's --peer-ca is reloaded when the
// file changes, as its --peer-cert is and as a worker's --client-ca is.
// The workers move to certificates of a new CA; the gateway, still
// trusting only the old one, refuses them; once the new CA is written
// over the peer CA file, the same connection reconnects and the calls go
// through, without a restart.
func TestTierPeerCARotation(t *testing.T) {
	defer func(d time.Duration) { tlsconf.ReloadEvery = d }(tlsconf.ReloadEvery)
	tlsconf.ReloadEvery = 50 * time.Millisecond
	dir := t.TempDir()
	oldCA, newCA := testcerts.NewCA(t, "old CA"), testcerts.NewCA(t, "new CA")
	peerCA := oldCA.WriteCA(t, dir, "peer-ca.pem")
	gCert, gKey := oldCA.Issue(t, testcerts.Client("gateway")).WriteAs(t, dir, "gw.pem", "gw-key.pem")
	wCert, wKey := newCA.Issue(t, testcerts.Server("127.0.0.1")).WriteAs(t, dir, "worker.pem", "worker-key.pem")
	worker := startTLSWorker(t, wCert, wKey, oldCA.WriteCA(t, dir, "client-ca.pem")) // it takes the gateway's certificate of the old CA

	cfg, err := tlsconf.ClientReloading(peerCA, gCert, gKey, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	tier := &rpc.Tier{Name: "store", Target: worker, Wait: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), TLS: cfg}
	fast := grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1, MaxDelay: 50 * time.Millisecond}, MinConnectTimeout: time.Second})
	cc, err := rpc.DialWorkers(worker, append(tier.DialOptions(), fast)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	check := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	if err := check(); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Fatalf("worker of the new CA before the rotation: %v; want Unavailable, unknown authority", err)
	}

	tmp := newCA.WriteCA(t, dir, "peer-ca.new")
	if err := os.Rename(tmp, filepath.Join(dir, "peer-ca.pem")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := check()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker of the new CA after the peer CA file was rotated: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
