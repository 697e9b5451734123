package remote_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"

	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/file"
	"github.com/zarrgate/zarrgate/storesvc/memory"
	"github.com/zarrgate/zarrgate/storesvc/remote"
	"github.com/zarrgate/zarrgate/storesvc/storetest"
)

// serve serves backend on a loopback port and returns a remote store
// talking to it over real TCP.
func serve(t testing.TB, backend storesvc.Store) *storesvc.Portable {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	storesvc.NewServer(backend).Register(srv)
	go srv.Serve(lis)
	cc, err := rpc.Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cc.Close()
		srv.Stop()
		backend.Close()
	})
	s, err := remote.New(context.Background(), cc)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformanceRemoteMemory(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storesvc.Store { return serve(t, memory.New()) })
}

func TestConformanceRemoteFile(t *testing.T) {
	large := int64(256 << 20)
	if testing.Short() {
		large = 16 << 20
	}
	storetest.Run(t, func(t *testing.T) storesvc.Store {
		fs, err := file.New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return serve(t, fs)
	}, storetest.Options{LargeValue: large})
}
