package remote_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"testing"

	"golang.org/x/sync/errgroup"

	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/file"
	"github.com/zarrgate/zarrgate/storesvc/memory"
	"github.com/zarrgate/zarrgate/storesvc/remote"
	"github.com/zarrgate/zarrgate/storesvc/storeserver"
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
	storeserver.New(backend).Register(srv)
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

// TestConcurrentPartialValuesRecycle asks for many pooled values at once
// from several goroutines: the server recycles each value's buffer once
// gRPC has written every response holding a piece of it, and one
// recycled too early would show up here as another value's bytes.
func TestConcurrentPartialValuesRecycle(t *testing.T) {
	backend := memory.New()
	s := serve(t, backend)
	ctx := context.Background()
	const nkeys = 12
	val := func(k int) []byte {
		b := make([]byte, 100<<10+k*37<<10) // 100 KiB to ~1.9 MiB: split over frames
		for i := range b {
			b[i] = byte(k*31 + i%251)
		}
		return b
	}
	for k := range nkeys {
		if _, err := backend.Set(ctx, fmt.Sprintf("v/%d", k), bytes.NewReader(val(k)), storesvc.Condition{}); err != nil {
			t.Fatal(err)
		}
	}
	var g errgroup.Group
	for w := range 4 {
		g.Go(func() error {
			for round := range 4 {
				var reqs []storesvc.KeyRange
				for k := range nkeys {
					if (k+w+round)%3 != 0 {
						reqs = append(reqs, storesvc.KeyRange{Key: fmt.Sprintf("v/%d", k)})
					}
				}
				vals, err := s.GetPartialValues(ctx, reqs)
				if err != nil {
					return err
				}
				for i, r := range reqs {
					var k int
					fmt.Sscanf(r.Key, "v/%d", &k)
					if !bytes.Equal(vals[i].Data, val(k)) {
						return fmt.Errorf("round %d: %s came back wrong", round, r.Key)
					}
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}
