package rpc_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	storev1 "github.com/zarrgate/zarrgate/gen/zarrgate/store/v1"

	"github.com/zarrgate/zarrgate/internal/rpc"
)

// capStore answers GetCapabilities: after block is closed when it is
// set, and with Unavailable for the first fail calls.
type capStore struct {
	storev1.UnimplementedStoreServiceServer
	block chan struct{}
	fail  atomic.Int32
	calls atomic.Int32
}

func (s *capStore) GetCapabilities(ctx context.Context, _ *storev1.GetCapabilitiesRequest) (*storev1.GetCapabilitiesResponse, error) {
	s.calls.Add(1)
	if s.fail.Add(-1) >= 0 {
		return nil, status.Error(codes.Unavailable, "not yet")
	}
	if s.block != nil {
		select {
		case <-s.block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return &storev1.GetCapabilitiesResponse{}, nil
}

type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func serveStore(t *testing.T, s *capStore) (*rpc.Server, string, *logBuf) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var logs logBuf
	srv := rpc.NewServer(slog.New(slog.NewTextHandler(&logs, nil)))
	storev1.RegisterStoreServiceServer(srv, s)
	srv.Health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return srv, lis.Addr().String(), &logs
}

// Shutdown's phases: during the drain delay the health service says
// NOT_SERVING and new calls are still served; then the call in flight is
// waited for and the server stops gracefully; a close of hard while a call
// runs stops at once, cutting it.
func TestShutdownPhases(t *testing.T) {
	ctx := context.Background()
	for _, hardStop := range []bool{false, true} {
		s := &capStore{block: make(chan struct{})}
		srv, addr, logs := serveStore(t, s)
		cc, err := rpc.Dial(addr)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		sc, hc := storev1.NewStoreServiceClient(cc), healthpb.NewHealthClient(cc)
		inflight := make(chan error, 1)
		go func() {
			_, err := sc.GetCapabilities(ctx, &storev1.GetCapabilitiesRequest{})
			inflight <- err
		}()
		for s.calls.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		hard := make(chan struct{})
		result := make(chan bool, 1)
		start := time.Now()
		go func() { result <- srv.Shutdown(300*time.Millisecond, 5*time.Second, hard) }()

		time.Sleep(50 * time.Millisecond)
		h, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Fatalf("health during the drain: %v, %v; want NOT_SERVING", h, err)
		}
		// A call arriving during the drain is served.
		late := make(chan error, 1)
		go func() {
			_, err := sc.GetCapabilities(ctx, &storev1.GetCapabilitiesRequest{})
			late <- err
		}()
		time.Sleep(400 * time.Millisecond) // past the delay: stopping, the calls still run
		select {
		case g := <-result:
			t.Fatalf("Shutdown returned %v with calls in flight", g)
		default:
		}
		if hardStop {
			close(hard)
		} else {
			close(s.block)
		}
		select {
		case graceful := <-result:
			if graceful == hardStop {
				t.Errorf("hard=%v: Shutdown reported graceful=%v", hardStop, graceful)
			}
		case <-time.After(3 * time.Second):
			t.Fatalf("hard=%v: Shutdown did not return", hardStop)
		}
		errIn, errLate := <-inflight, <-late
		if hardStop {
			if status.Code(errIn) != codes.Unavailable {
				t.Errorf("the call cut by a hard stop got %v", errIn)
			}
		} else if errIn != nil || errLate != nil {
			t.Errorf("calls during a graceful drain failed: in flight %v, arrived during the delay %v", errIn, errLate)
		}
		want := []string{"draining: reporting NOT_SERVING", "stopping: taking no new calls", "stopped: every call finished"}
		if hardStop {
			want[2] = "stopping now: asked again"
		}
		for _, w := range want {
			if !strings.Contains(logs.String(), w) {
				t.Errorf("hard=%v: no %q in the log:\n%s", hardStop, w, logs.String())
			}
		}
		t.Logf("hard=%v: stopped after %v", hardStop, time.Since(start).Round(time.Millisecond))
	}
}

// gRPC itself does not repeat a worker's UNAVAILABLE answer: the gateway
// is the one layer that retries its calls to workers, within the tier's
// retry budget (gateway/retry.go, docs/limits.md "Retries"). The Tier
// still counts and logs what gRPC repeats on its own (transparent retries
// of calls that never reached a worker), which the drain test asserts is
// zero; this checks that nothing else is repeated below the gateway.
func TestTierNoGRPCRetryPolicy(t *testing.T) {
	s := &capStore{}
	s.fail.Store(2)
	_, addr, _ := serveStore(t, s)
	var logs logBuf
	tier := &rpc.Tier{Name: "store", Target: addr, Wait: 5 * time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	cc, err := rpc.DialWorkers(addr, tier.DialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	_, err = storev1.NewStoreServiceClient(cc).GetCapabilities(context.Background(), &storev1.GetCapabilitiesRequest{})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("GetCapabilities answered UNAVAILABLE by the worker returned %v", err)
	}
	if n, r := s.calls.Load(), tier.Retries(); n != 1 || r != 0 {
		t.Fatalf("the worker saw %d calls and the tier counted %d retries; want 1 and 0 (gRPC must not retry below the gateway), log:\n%s", n, r, logs.String())
	}
}
