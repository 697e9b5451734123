package e2e

import (
	"context"
	"encoding/binary"
	"iter"
	"math"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/client"
)

// drainArgs are the stopped workers' shutdown flags: a drain delay well
// over the time NOT_SERVING takes to reach the gateway (milliseconds on
// loopback), and a grace that in-flight work never needs here.
var drainArgs = []string{"--drain-delay", "1s", "--shutdown-grace", "20s"}

// A gateway over 2 store workers and 2 codec workers. One codec worker and
// one store worker get SIGTERM while a 64 MiB ReadSlab is in flight, then
// the other two while a WriteSlab is: both slabs complete with the right
// data, each stopped worker exits 0 having finished every call (no call
// cut at the end of its grace), and the gateway retried nothing, neither
// itself nor through gRPC, and saw no UNAVAILABLE.
func TestWorkerDrainMidSlabNoRetry(t *testing.T) {
	root := t.TempDir()
	// The second codec worker starts after the first slab has opened the
	// gateway's codec streams, so that the first worker, stopped first,
	// surely holds streams with batches in flight.
	codecB := freeAddr(t)
	storeA := startCommand(t, "store-worker", append([]string{"--root", root}, drainArgs...)...)
	storeB := startCommand(t, "store-worker", append([]string{"--root", root}, drainArgs...)...)
	codecA := startCommand(t, "codec-worker", drainArgs...)
	gw := startCommand(t, "gateway", "--store", storeA.addr+","+storeB.addr, "--codec", codecA.addr+","+codecB)
	ctx := context.Background()
	c, err := client.Dial(ctx, gw.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const rows, cols, chunk = 4096, 4096, 256 // 64 MiB of float32, 256 zstd chunks
	a, err := c.CreateArray(ctx, "t", client.ArraySpec{Shape: []int64{rows, cols}, DataType: "float32", ChunkShape: []int64{chunk, chunk}})
	if err != nil {
		t.Fatal(err)
	}
	value := func(i int) float32 { return float32(math.Sin(float64(i)*1e-4) * 100) }
	data := make([]float32, rows*cols)
	for i := range data {
		data[i] = value(i)
	}
	if _, err := client.Write(ctx, a, nil, data); err != nil {
		t.Fatal(err)
	}
	codecBs := startCommand(t, "codec-worker", append([]string{"--listen", codecB}, drainArgs...)...)
	// Let the gateway connect to it (its reconnection backoff is 3 s at
	// most); were it not ready yet, new work would wait for it, not fail.
	time.Sleep(2 * time.Second)

	// Read, slowly (the gateway waits for the client), stopping workers as
	// blocks arrive.
	_, blocks, err := a.Blocks(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]float32, rows*cols)
	n := 0
	var stoppedAt time.Time
	for b, err := range blocks {
		if err != nil {
			t.Fatalf("the client saw an error after %d blocks: %v", n, err)
		}
		n++
		if n == 40 {
			stoppedAt = time.Now()
			codecA.cmd.Process.Signal(syscall.SIGTERM)
			storeA.cmd.Process.Signal(syscall.SIGTERM)
		}
		for r := range b.Shape[0] {
			for k := range b.Shape[1] {
				i := (b.Origin[0]+r)*cols + b.Origin[1] + k
				got[i] = math.Float32frombits(binary.LittleEndian.Uint32(b.Data[4*(r*b.Shape[1]+k):]))
			}
		}
		// Slow enough that the read outlasts the drain delay: the
		// workers stop taking calls (GOAWAY) mid-read too.
		time.Sleep(8 * time.Millisecond)
	}
	readFor := time.Since(stoppedAt)
	for i := range got {
		if got[i] != data[i] {
			t.Fatalf("element %d = %v, want %v after the drain", i, got[i], data[i])
		}
	}
	if readFor < 1200*time.Millisecond {
		t.Fatalf("the read went on only %v after the signal: the workers' drain was not mid-read", readFor)
	}
	t.Logf("the read went on %v after the signal", readFor.Round(time.Millisecond))
	checkDrained(t, "codec worker", codecA, true)
	checkDrained(t, "store worker", storeA, false)

	// Write, slowly, while the two others stop: bring the first two back
	// on their addresses first, for the work to move to.
	startCommand(t, "store-worker", "--root", root, "--listen", storeA.addr)
	startCommand(t, "codec-worker", "--listen", codecA.addr)
	time.Sleep(2 * time.Second)
	for i := range data {
		data[i] = -data[i]
	}
	if _, err := a.WriteBlocks(ctx, nil, rowBlocks(data, rows, cols, chunk, func(row int) {
		if row == 3 {
			stoppedAt = time.Now()
			codecBs.cmd.Process.Signal(syscall.SIGTERM)
			storeB.cmd.Process.Signal(syscall.SIGTERM)
		}
		time.Sleep(200 * time.Millisecond)
	})); err != nil {
		t.Fatalf("write during the drain: %v", err)
	}
	if d := time.Since(stoppedAt); d < 1200*time.Millisecond {
		t.Fatalf("the write went on only %v after the signal: the workers' drain was not mid-write", d)
	} else {
		t.Logf("the write went on %v after the signal", d.Round(time.Millisecond))
	}
	checkDrained(t, "codec worker", codecBs, true)
	checkDrained(t, "store worker", storeB, false)
	back, _, err := client.Read[float32](ctx, a, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range back {
		if back[i] != data[i] {
			t.Fatalf("element %d = %v after the write, want %v: a chunk was lost or torn", i, back[i], data[i])
		}
	}

	logs := gw.logs.String()
	for _, bad := range []string{"retrying a store or codec call", "gRPC retried", "navailable", "UNAVAILABLE"} {
		if strings.Contains(logs, bad) {
			t.Errorf("the gateway logged %q:\n%s", bad, logs)
		}
	}
}

// rowBlocks yields data a row of chunks at a time, calling between(row)
// after each.
func rowBlocks(data []float32, rows, cols, chunk int, between func(row int)) iter.Seq2[client.Block, error] {
	return func(yield func(client.Block, error) bool) {
		for r := 0; r < rows; r += chunk {
			buf := make([]byte, 4*chunk*cols)
			for i, v := range data[r*cols : (r+chunk)*cols] {
				binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
			}
			if !yield(client.Block{Origin: []int64{int64(r), 0}, Shape: []int64{int64(chunk), int64(cols)}, Data: buf}, nil) {
				return
			}
			between(r / chunk)
		}
	}
}

var drainedStreams = regexp.MustCompile(`told the Process streams open to finish and close.* streams=(\d+)`)

// checkDrained waits for a worker sent SIGTERM to exit, and checks that it
// exited 0 having finished every call; a codec worker must have had
// streams to drain.
func checkDrained(t *testing.T, what string, s *server, codec bool) {
	t.Helper()
	select {
	case err := <-s.done:
		if err != nil {
			t.Fatalf("%s exited with %v after SIGTERM:\n%s", what, err, s.logs.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("%s still running 15s after SIGTERM:\n%s", what, s.logs.String())
	}
	logs := s.logs.String()
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "drain") || strings.Contains(l, "stop") {
			t.Logf("%s: %s", what, l)
		}
	}
	if !strings.Contains(logs, "stopped: every call finished") {
		t.Errorf("%s did not finish every call:\n%s", what, logs)
	}
	if codec {
		m := drainedStreams.FindStringSubmatch(logs)
		if m == nil || m[1] == "0" {
			t.Errorf("%s had no stream to drain: the test did not drain work in flight:\n%s", what, logs)
		}
	}
}
