package rpc_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/zarrgate/zarrgate/internal/rpc"
)

// startWorker serves the health service (the call the test makes) on addr.
func startWorker(t *testing.T, addr string) *rpc.Server {
	t.Helper()
	var lis net.Listener
	var err error
	for range 50 { // the port of a worker just stopped may take a moment to free
		if lis, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return srv
}

// TestTierFailsFast: with its only worker stopped, a call to a tier fails
// with Unavailable naming the tier and target after the tier's wait, later
// calls fail at once, the failure is logged as a warning, and calls work
// again once the worker is back.
func TestTierFailsFast(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	w := startWorker(t, addr)
	logs := &syncBuf{}
	tier := &rpc.Tier{Name: "store", Target: addr, Wait: time.Second, Logger: slog.New(slog.NewTextHandler(logs, nil))}
	cc, err := rpc.DialWorkers(addr, tier.DialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	h := healthpb.NewHealthClient(cc)
	ctx, cancelAll := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancelAll()
	if _, err := h.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}

	w.Stop()
	// A call racing the stop fails on the broken connection (Unavailable
	// too); the guard is for the calls after.
	cc.WaitForStateChange(ctx, connectivity.Ready)
	start := time.Now()
	_, err = h.Check(ctx, &healthpb.HealthCheckRequest{})
	took := time.Since(start)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "no ready store worker at "+addr+" after 1s") {
		t.Fatalf("call with the worker down: %v, want Unavailable naming the store tier", err)
	}
	if took > 2*time.Second {
		t.Errorf("call with the worker down failed after %v, want about the tier's wait (1s)", took)
	}
	start = time.Now()
	if _, err := h.Check(ctx, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.Unavailable || time.Since(start) > 200*time.Millisecond {
		t.Errorf("second call: %v after %v, want Unavailable at once", err, time.Since(start))
	}
	if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "tier=store") {
		t.Errorf("no warning naming the tier:\n%s", l)
	}

	// A call with a shorter deadline than the wait ends with its deadline.
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := h.Check(short, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.Unavailable && status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("call with a short deadline: %v", err)
	}

	startWorker(t, addr)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := h.Check(ctx, &healthpb.HealthCheckRequest{})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tier did not recover: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	if !strings.Contains(logs.String(), "ready again") {
		t.Errorf("recovery not logged:\n%s", logs)
	}
}
