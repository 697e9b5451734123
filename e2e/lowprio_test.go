package e2e

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"
	"github.com/zarrgate/zarrgate/internal/testenv"
)

// TestStalledSlabsBoundLoweredThreads: clients that open many big reads at
// once and never take their blocks cannot make the real server start a
// thread per worker without end. Ten ReadSlab calls of the 1 GiB fairness
// array, each on a connection of its own, are left unread, so that the
// server's workers (2 per call: --parallelism 2) wait with the calls
// sharing the gateway: at most 4 × 2 of them run on threads of lower
// priority (--background-nice), the rest keep the process's; once the
// calls are cancelled none is left lowered.
func TestStalledSlabsBoundLoweredThreads(t *testing.T) {
	s, _ := fairSetup(t, "--parallelism", "2")
	pid := s.cmd.Process.Pid
	nice := serverNice(t, pid)
	lowered := min(19, nice+10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const calls = 10
	for range calls {
		cc, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		st, err := gatewayv1.NewArrayServiceClient(cc).ReadSlab(ctx, &gatewayv1.ReadSlabRequest{Path: "big"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil { // the header: the call runs
			t.Fatal(err)
		}
	}
	most, threads := 0, 0
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		n := testenv.ThreadNices(t, pid)
		most = max(most, n[lowered])
		all := 0
		for _, c := range n {
			all += c
		}
		threads = max(threads, all)
	}
	if most == 0 || most > 8 {
		t.Errorf("%d stalled slab reads of 2 workers each: at most %d of the server's threads at nice %d, want 1 to 8", calls, most, lowered)
	}
	t.Logf("%d stalled slab reads: at most %d threads lowered, %d threads in all", calls, most, threads)
	cancel()
	awaitNoneLowered(t, pid, nice, "after the calls were cancelled")
}

// serverNice is the nice value of every thread of the process pid, which
// leaves room to lower a thread's priority.
func serverNice(t *testing.T, pid int) int {
	t.Helper()
	base := testenv.ThreadNices(t, pid)
	if len(base) != 1 {
		t.Fatalf("the server's threads by nice value: %v, want one value", base)
	}
	var nice int
	for n := range base {
		nice = n
	}
	if nice >= 19 {
		t.Fatalf("the server runs at nice %d: no room to lower a thread's priority", nice)
	}
	return nice
}

// awaitNoneLowered waits up to 10 s for every thread of the process pid to
// be at nice again.
func awaitNoneLowered(t *testing.T, pid, nice int, when string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for n := testenv.ThreadNices(t, pid); len(n) != 1 || n[nice] == 0; n = testenv.ThreadNices(t, pid) {
		if time.Now().After(deadline) {
			t.Fatalf("%s, the server's threads by nice value: %v", when, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
