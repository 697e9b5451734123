package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	storev1 "github.com/zarrgate/zarrgate/gen/zarrgate/store/v1"

	"github.com/zarrgate/zarrgate/client"
	"github.com/zarrgate/zarrgate/internal/rpc"
)

// freeAddr returns a loopback address nobody listens on, for a worker that
// must come back at the same address.
func freeAddr(t *testing.T) string {
	t.Helper()
	// Below the kernel's ephemeral range (32768 and up by default), so
	// that a process listening on port 0 meanwhile (a worker's admin
	// endpoint) cannot be given the same port before it is used.
	for range 1000 {
		lis, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", 20000+rand.IntN(12000)))
		if err != nil {
			continue
		}
		addr := lis.Addr().String()
		lis.Close()
		return addr
	}
	t.Fatal("no free port in 20000–31999")
	return ""
}

// waitFor polls cond every 50ms until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// A gateway whose only store worker dies answers UNAVAILABLE naming the
// store tier within --tier-wait (ReadSlab) and within --tier-wait plus the
// callers' own retries (cat), logs a warning, and serves again once the
// worker is back; the codec tier likewise. The worker removes the
// temporary files of killed writes at start-up, and no call reads one.
func TestTierDownFailsFast(t *testing.T) {
	const wait = 2 * time.Second
	root := t.TempDir()
	old := time.Now().Add(-time.Hour)
	plant := func(rel string, mtime time.Time) string {
		p := filepath.Join(root, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte("secret torn value"), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chtimes(p, mtime, mtime)
		return p
	}
	killed := plant("old/.zarrgate-tmp-0123456789abcdef", old)
	justKilled := plant("new/.zarrgate-tmp-0000000000000001", time.Now())
	// A live write's temporary file: its writer holds a flock on it (here
	// this test process, as another zarrgate sharing the directory would).
	live := plant("new/.zarrgate-tmp-fedcba9876543210", time.Now())
	lf, err := os.Open(live)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}

	addr := freeAddr(t)
	worker := startCommand(t, "store-worker", "--root", root, "--listen", addr)
	codec := startCommand(t, "codec-worker")
	gw := startCommand(t, "gateway", "--store", addr, "--tier-wait", wait.String())
	gwSlow := startCommand(t, "gateway", "--store", addr, "--tier-wait", "1m")
	gwCodec := startCommand(t, "gateway", "--store", addr, "--codec", codec.addr, "--tier-wait", wait.String())

	for _, p := range []string{killed, justKilled} {
		if !waitFor(10*time.Second, func() bool { _, err := os.Stat(p); return os.IsNotExist(err) }) {
			t.Errorf("the temporary file of a killed write %s is still there:\n%s", p, worker.logs)
		}
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("a live write's temporary file was removed: %v", err)
	}
	if !strings.Contains(worker.logs.String(), "removed temporary files") {
		t.Errorf("the removal is not logged:\n%s", worker.logs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// No call reads a temporary file, on the gateway or on the worker.
	for _, a := range []string{gw.addr, addr} {
		cc, err := rpc.Dial(a)
		if err != nil {
			t.Fatal(err)
		}
		s, err := storev1.NewStoreServiceClient(cc).Get(ctx, &storev1.GetRequest{Key: "new/.zarrgate-tmp-fedcba9876543210"})
		if err == nil {
			_, err = s.Recv()
		}
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "reserved") {
			t.Errorf("Get of a temporary file at %s: %v, want InvalidArgument", a, err)
		}
		cc.Close()
	}

	c, err := client.Dial(ctx, gw.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, err := c.CreateArray(ctx, "a", client.ArraySpec{Shape: []int64{100}, DataType: "int32", ChunkShape: []int64{10}})
	if err != nil {
		t.Fatal(err)
	}
	vals := make([]int32, 100) // not the fill value: chunks are stored and decoded
	for i := range vals {
		vals[i] = int32(i + 1)
	}
	if _, err := client.Write(ctx, a, nil, vals); err != nil {
		t.Fatal(err)
	}

	// The codec tier down: reads through the gateway that uses it fail
	// fast naming it.
	cgc, err := client.Dial(ctx, gwCodec.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cgc.Close()
	ca, err := cgc.OpenArray(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := client.Read[int32](ctx, ca, nil); err != nil {
		t.Fatal(err)
	}
	codec.cmd.Process.Signal(syscall.SIGKILL)
	<-codec.done
	start := time.Now()
	_, _, err = client.Read[int32](ctx, ca, nil)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "no ready codec worker at "+codec.addr) {
		t.Errorf("read with the codec tier down: %v, want Unavailable naming the codec tier", err)
	}
	t.Logf("ReadSlab with the codec tier down: %v after %v", status.Code(err), time.Since(start).Round(time.Millisecond))
	if took := time.Since(start); took > wait+1500*time.Millisecond {
		t.Errorf("read with the codec tier down took %v, want at most about --tier-wait (%v)", took, wait)
	}

	worker.cmd.Process.Signal(syscall.SIGKILL)
	<-worker.done
	start = time.Now()
	_, _, err = client.Read[int32](ctx, a, nil)
	took := time.Since(start)
	t.Logf("ReadSlab with the store tier down: %v after %v", status.Code(err), took.Round(time.Millisecond))
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "no ready store worker at "+addr) {
		t.Errorf("read with the store tier down: %v, want Unavailable naming the store tier", err)
	}
	if took > wait+1500*time.Millisecond {
		t.Errorf("read with the store tier down took %v, want about --tier-wait (%v)", took, wait)
	}
	// cat: the client retries a metadata call on Unavailable, and the
	// gateway retries its store calls, so the answer comes a little after
	// --tier-wait.
	start = time.Now()
	out, errOut, code := zg(t, "", "cat", "--addr", gw.addr, "a")
	took = time.Since(start)
	t.Logf("cat with the store tier down: exit %d after %v: %s", code, took.Round(time.Millisecond), strings.TrimSpace(errOut))
	if code != 1 || !strings.Contains(errOut, "no ready store worker at "+addr) {
		t.Errorf("cat with the store tier down: exit %d\n%s%s", code, out, errOut)
	}
	if took > wait+4*time.Second {
		t.Errorf("cat with the store tier down took %v", took)
	}
	if l := gw.logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, `msg="no ready worker: failing calls" tier=store`) {
		t.Errorf("the gateway did not warn:\n%s", l)
	}
	// --timeout bounds a command whose gateway would wait longer.
	start = time.Now()
	_, errOut, code = zg(t, "", "cat", "--addr", gwSlow.addr, "--timeout", "1s", "a")
	if code != 1 || !strings.Contains(errOut, "timed out") || time.Since(start) > 5*time.Second {
		t.Errorf("cat --timeout 1s: exit %d after %v: %s", code, time.Since(start), errOut)
	}

	startCommand(t, "store-worker", "--root", root, "--listen", addr)
	if !waitFor(15*time.Second, func() bool {
		_, _, code := zg(t, "", "cat", "--addr", gw.addr, "a")
		return code == 0
	}) {
		t.Fatalf("the gateway did not recover:\n%s", gw.logs)
	}
	if !waitFor(5*time.Second, func() bool { return strings.Contains(gw.logs.String(), "ready again") }) {
		t.Errorf("recovery not logged:\n%s", gw.logs)
	}
}
