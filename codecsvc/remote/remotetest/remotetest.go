// Package remotetest serves codec workers in a test's own process, for
// the tests and benchmarks of the codec workers' clients and of the
// gateway that offloads to them.
package remotetest

import (
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"

	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/internal/rpc"
)

// ServeWorker serves a codec worker (the codec service over the embedded
// codecs) on loopback TCP or, for "unix", on a unix socket in a temporary
// directory, and returns a connection to it; both end with the test.
func ServeWorker(tb testing.TB, network string) *grpc.ClientConn {
	tb.Helper()
	srv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	codecsvc.NewServer(codecsvc.NewLocal()).Register(srv)
	return Serve(tb, network, srv)
}

// Serve serves srv on Listen(tb, network) and returns a connection to it;
// both end with the test.
func Serve(tb testing.TB, network string, srv *rpc.Server) *grpc.ClientConn {
	tb.Helper()
	lis := Listen(tb, network)
	go srv.Serve(lis)
	target := lis.Addr().String()
	if network == "unix" {
		target = "unix://" + target
	}
	cc, err := rpc.Dial(target)
	if err != nil {
		srv.Stop()
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cc.Close(); srv.Stop() })
	return cc
}

// Listen listens on loopback TCP or, for "unix", on a unix socket in a
// temporary directory.
func Listen(tb testing.TB, network string) net.Listener {
	tb.Helper()
	addr := "127.0.0.1:0"
	if network == "unix" {
		addr = filepath.Join(tb.TempDir(), "w.sock")
	}
	lis, err := net.Listen(network, addr)
	if err != nil {
		tb.Fatal(err)
	}
	return lis
}
