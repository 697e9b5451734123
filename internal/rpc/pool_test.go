package rpc_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/health/grpc_health_v1"

	"github.com/zarrgate/zarrgate/internal/rpc"
)

// poolWorker is a worker serving the test service, counting its calls.
type poolWorker struct {
	addr  string
	srv   *rpc.Server
	calls atomic.Int64
}

func startPoolWorker(t *testing.T) *poolWorker {
	t.Helper()
	w := &poolWorker{}
	w.srv = rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	w.srv.RegisterService(testService(func(context.Context) error { w.calls.Add(1); return nil }), struct{}{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w.addr = lis.Addr().String()
	go w.srv.Serve(lis)
	t.Cleanup(w.srv.Stop)
	return w
}

// waitReady waits until the pool's ready workers are want (the pool
// follows connections and health checks, which take a moment).
func waitReady(t *testing.T, p *rpc.Pool, want ...string) {
	t.Helper()
	slices.Sort(want)
	var got []string
	for range 500 {
		if got, _ = p.Ready(); slices.Equal(got, want) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("ready workers %v, want %v", got, want)
}

// TestPoolFollowsWorkers: a pool dialled on a file:/// list follows the
// file (read again every refresh) and the workers' health: its ready set
// gains a worker added to the file, loses one whose health says
// NOT_SERVING and one removed from the file; a call pinned to a ready
// worker goes to it, one pinned to a worker not ready goes to a ready one
// and says so; unpinned calls spread over the ready workers.
func TestPoolFollowsWorkers(t *testing.T) {
	a, b := startPoolWorker(t), startPoolWorker(t)
	list := filepath.Join(t.TempDir(), "workers")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(list+".tmp", []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(list+".tmp", list); err != nil {
			t.Fatal(err)
		}
	}
	write("# the workers\n" + a.addr + "\n")
	cc, pool, err := rpc.DialPool("file://"+list, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cc.Connect()
	waitReady(t, pool, a.addr)
	_, v1 := pool.Ready()
	ctx := context.Background()

	// Pinned to B, not listed yet: placed on A, which is reported.
	pctx, placed := pool.On(ctx, b.addr)
	if err := callUnary(pctx, cc); err != nil {
		t.Fatal(err)
	}
	if placed() != a.addr || a.calls.Load() != 1 || b.calls.Load() != 0 {
		t.Fatalf("a call pinned to an unlisted worker: placed on %q, calls A %d B %d", placed(), a.calls.Load(), b.calls.Load())
	}

	write(a.addr + ", " + b.addr + " # both\n")
	waitReady(t, pool, a.addr, b.addr)
	if _, v2 := pool.Ready(); v2 == v1 {
		t.Fatal("the ready set changed but not its version")
	}
	for range 5 {
		pctx, placed := pool.On(ctx, b.addr)
		if err := callUnary(pctx, cc); err != nil {
			t.Fatal(err)
		}
		if placed() != b.addr {
			t.Fatalf("a call pinned to B was placed on %q", placed())
		}
	}
	if a.calls.Load() != 1 || b.calls.Load() != 5 {
		t.Fatalf("pinned calls: A %d, B %d; want 1, 5", a.calls.Load(), b.calls.Load())
	}
	for range 10 {
		if err := callUnary(ctx, cc); err != nil {
			t.Fatal(err)
		}
	}
	if da, db := a.calls.Load()-1, b.calls.Load()-5; da != 5 || db != 5 {
		t.Fatalf("10 unpinned calls in turn: A %d, B %d; want 5 each", da, db)
	}

	// B's health says it is draining: out, though still listed.
	b.srv.Health.SetServingStatus("", grpc_health_v1.HealthCheckResponse_NOT_SERVING)
	waitReady(t, pool, a.addr)
	b.srv.Health.SetServingStatus("", grpc_health_v1.HealthCheckResponse_SERVING)
	waitReady(t, pool, a.addr, b.addr)

	// A removed from the list.
	write(strings.Join([]string{b.addr}, "\n"))
	waitReady(t, pool, b.addr)

	// A list that cannot be read leaves the last one in place.
	if err := os.Remove(list); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // several refreshes
	if got, _ := pool.Ready(); !slices.Equal(got, []string{b.addr}) {
		t.Fatalf("after the list was removed, ready workers %v, want %v", got, []string{b.addr})
	}
}

// TestDialPoolRefusesBadLists: a file target must be absolute, exist and
// list an address.
func TestDialPoolRefusesBadLists(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty")
	os.WriteFile(empty, []byte("# nobody\n\n"), 0o644)
	for _, target := range []string{"file://relative/list", "file:///no/such/file", "file://" + empty} {
		if cc, _, err := rpc.DialPool(target, 0); err == nil {
			cc.Close()
			t.Errorf("DialPool(%q) succeeded", target)
		}
	}
}
