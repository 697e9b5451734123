package e2e

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/status"

	"github.com/zarrgate/zarrgate/client"
)

// The load test of issue 12: `serve --memory-limit 512MiB` with a 256 MiB
// float32 array (zstd, 512² chunks of 1 MiB). Phase A: 4 concurrent full
// readers; phase B: 64 readers (a quarter full, the rest 1024² windows at
// random places, half of each through shared memory and half over the
// socket) and 16 writers of 16-row strips (partial chunks) into a second
// array. The server's RSS is sampled every 50 ms. Phase B must see no
// error at all (ResourceExhausted included: under the budget a call waits
// its turn), the server's peak RSS stays within the budget + 25 % (plus
// the idle binary), and phase B reads at least as fast as phase A.
const (
	loadRows, loadCols = 8192, 8192 // 256 MiB of float32
	loadChunk          = 512
	loadBudget         = 512 * MiB
	loadPhaseA         = 10 * time.Second
	loadPhaseB         = 15 * time.Second
	// loadTolerance: phase B's read throughput must be at least this
	// fraction of phase A's. The issue says "at least that of 4 readers";
	// on this 2-core machine, shared with other work, repeated runs of the
	// same phase differ by about 10 %, hence 0.9 rather than 1.
	loadTolerance = 0.9
)

// loadStats counts what a phase moved and what went wrong.
type loadStats struct {
	readBytes, writeBytes, reads, writes atomic.Int64
	mu                                   sync.Mutex
	errs                                 map[string]int
	firstErrs                            []string
}

func (s *loadStats) fail(what string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.errs == nil {
		s.errs = map[string]int{}
	}
	key := what + ": " + status.Code(err).String()
	s.errs[key]++
	if len(s.firstErrs) < 5 {
		s.firstErrs = append(s.firstErrs, fmt.Sprintf("%s: %v", what, err))
	}
}

func (s *loadStats) errors() (int, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	var keys []string
	for k, v := range s.errs {
		n += v
		keys = append(keys, fmt.Sprintf("%s ×%d", k, v))
	}
	sort.Strings(keys)
	return n, strings.Join(keys, ", ") + "; first: " + strings.Join(s.firstErrs, "; ")
}

func TestLoadMemoryBudget(t *testing.T) {
	srv := startServer(t, append([]string{"--root", t.TempDir()}, memoryLimit("512MiB")...)...)
	pid := srv.cmd.Process.Pid
	// The idle server's RSS: code, runtime and gRPC, none of it the
	// per-call buffers the budget governs. It is allowed on top of the
	// budget's 125 %, and must itself stay small.
	baseline, err := statusBytes(pid, "VmRSS")
	if err != nil {
		t.Fatal(err)
	}
	if baseline > 64*MiB {
		t.Errorf("the idle server takes %s", mib(baseline))
	}
	watch := watchRSS(pid, 50*time.Millisecond, 4096*MiB)
	ctx := context.Background()
	shm, err := client.Dial(ctx, srv.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer shm.Close()
	sock, err := client.Dial(ctx, srv.addr, client.WithSharedMemory(false))
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()

	// Setup: the array read, written with benchValue (smooth data with
	// noise: zstd has work to do), and the array written.
	spec := client.ArraySpec{Shape: []int64{loadRows, loadCols}, DataType: "float32", ChunkShape: []int64{loadChunk, loadChunk}}
	src, err := shm.CreateArray(ctx, "r", spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := shm.CreateArray(ctx, "w", spec); err != nil {
		t.Fatal(err)
	}
	rowTerm, colTerm := make([]float64, loadRows), make([]float64, loadCols)
	for i := range rowTerm {
		rowTerm[i] = math.Sin(float64(i)*0.001) * 1000
	}
	for j := range colTerm {
		colTerm[j] = math.Cos(float64(j)*0.002) * 100
	}
	value := func(i, j int) float32 { return float32(rowTerm[i] + colTerm[j] + float64((i*131+j*71)%17)) }
	t0 := time.Now()
	for band := 0; band < loadRows; band += 2048 { // 64 MiB at a time
		data := make([]float32, 2048*loadCols)
		for i := range 2048 {
			for j := range loadCols {
				data[i*loadCols+j] = value(band+i, j)
			}
		}
		sel := client.Selection{{Start: int64(band), Stop: int64(band + 2048), Step: 1}, {Start: 0, Stop: loadCols, Step: 1}}
		if _, err := client.Write(ctx, src, sel, data); err != nil {
			t.Fatalf("writing the array: %v", err)
		}
	}
	runtime.GC()
	debug.FreeOSMemory()
	t.Logf("setup: 256 MiB written in %v", time.Since(t0))

	arrays := map[bool]*client.Array{}
	for on, c := range map[bool]*client.Client{true: shm, false: sock} {
		a, err := c.OpenArray(ctx, "r")
		if err != nil {
			t.Fatal(err)
		}
		arrays[on] = a
	}
	dst, err := shm.OpenArray(ctx, "w")
	if err != nil {
		t.Fatal(err)
	}

	// fullRead streams the whole array block by block, counting bytes as
	// they arrive (a read cut by the phase's end still counts what came)
	// and checking one element of each block.
	fullRead := func(ctx context.Context, a *client.Array, st *loadStats) error {
		_, blocks, err := a.Blocks(ctx, nil)
		if err != nil {
			return err
		}
		for b, err := range blocks {
			if err != nil {
				return err
			}
			st.readBytes.Add(int64(len(b.Data)))
			if len(b.Data) >= 4 {
				got := math.Float32frombits(uint32(b.Data[0]) | uint32(b.Data[1])<<8 | uint32(b.Data[2])<<16 | uint32(b.Data[3])<<24)
				if want := value(int(b.Origin[0]), int(b.Origin[1])); got != want {
					return fmt.Errorf("element %v = %v, want %v", b.Origin, got, want)
				}
			}
		}
		st.reads.Add(1)
		return nil
	}
	// windowRead reads a 1024² window at a random place (across chunk
	// boundaries) into buf and checks three of its elements.
	windowRead := func(ctx context.Context, a *client.Array, r *rand.Rand, buf []float32, st *loadStats) error {
		const w = 1024
		i0, j0 := r.IntN(loadRows-w), r.IntN(loadCols-w)
		sel := client.Selection{{Start: int64(i0), Stop: int64(i0 + w), Step: 1}, {Start: int64(j0), Stop: int64(j0 + w), Step: 1}}
		if err := client.ReadInto(ctx, a, sel, buf); err != nil {
			return err
		}
		for _, p := range [][2]int{{0, 0}, {w / 2, w/2 + 1}, {w - 1, w - 1}} {
			if got, want := buf[p[0]*w+p[1]], value(i0+p[0], j0+p[1]); got != want {
				return fmt.Errorf("window at (%d, %d): element %v = %v, want %v", i0, j0, p, got, want)
			}
		}
		st.readBytes.Add(w * w * 4)
		st.reads.Add(1)
		return nil
	}
	// stripWrite writes 16 rows × 2048 columns at a random place of the
	// writer's own row of chunks: partial chunks, read, merged and written
	// back, without contention between writers.
	stripWrite := func(ctx context.Context, k int, r *rand.Rand, data []float32, st *loadStats) error {
		i0 := k*loadChunk + 16*r.IntN(loadChunk/16)
		j0 := r.IntN(loadCols - 2048)
		sel := client.Selection{{Start: int64(i0), Stop: int64(i0 + 16), Step: 1}, {Start: int64(j0), Stop: int64(j0 + 2048), Step: 1}}
		if _, err := client.Write(ctx, dst, sel, data); err != nil {
			return err
		}
		st.writeBytes.Add(int64(len(data)) * 4)
		st.writes.Add(1)
		return nil
	}

	// phase runs the workers until d has passed, then cancels what is in
	// flight; errors after that are the cancellation's, not failures.
	phase := func(d time.Duration, workers []func(ctx context.Context, r *rand.Rand, st *loadStats) error) (*loadStats, time.Duration) {
		st := &loadStats{}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		start := time.Now()
		for i, w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(i), uint64(start.UnixNano())))
				for ctx.Err() == nil {
					if err := w(ctx, r, st); err != nil && ctx.Err() == nil {
						st.fail(fmt.Sprintf("worker %d", i), err)
						time.Sleep(10 * time.Millisecond) // do not spin on a failing call
					}
				}
			}()
		}
		time.Sleep(d)
		elapsed := time.Since(start)
		readBytes, writeBytes := st.readBytes.Load(), st.writeBytes.Load()
		cancel()
		wg.Wait()
		// What arrived after the phase's end does not count.
		st.readBytes.Store(readBytes)
		st.writeBytes.Store(writeBytes)
		return st, elapsed
	}
	mbps := func(n int64, d time.Duration) float64 { return float64(n) / 1e6 / d.Seconds() }

	// Phase A: 4 full readers, two through shared memory, two over the
	// socket.
	var workersA []func(context.Context, *rand.Rand, *loadStats) error
	for i := range 4 {
		a := arrays[i%2 == 0]
		workersA = append(workersA, func(ctx context.Context, _ *rand.Rand, st *loadStats) error { return fullRead(ctx, a, st) })
	}
	stA, dA := phase(loadPhaseA, workersA)
	if n, msg := stA.errors(); n > 0 {
		t.Errorf("phase A: %d errors: %s", n, msg)
	}
	hwmA, _ := statusBytes(pid, "VmHWM")

	// Phase B: 64 readers (every fourth a full reader, the others window
	// readers; half of each kind over the socket) and 16 writers.
	var workersB []func(context.Context, *rand.Rand, *loadStats) error
	for i := range 64 {
		a := arrays[(i/4)%2 == 0]
		if i%4 == 0 {
			workersB = append(workersB, func(ctx context.Context, _ *rand.Rand, st *loadStats) error { return fullRead(ctx, a, st) })
		} else {
			buf := make([]float32, 1024*1024)
			workersB = append(workersB, func(ctx context.Context, r *rand.Rand, st *loadStats) error { return windowRead(ctx, a, r, buf, st) })
		}
	}
	for k := range 16 {
		data := make([]float32, 16*2048)
		for i := range data {
			data[i] = float32(k*100000 + i)
		}
		workersB = append(workersB, func(ctx context.Context, r *rand.Rand, st *loadStats) error { return stripWrite(ctx, k, r, data, st) })
	}
	stB, dB := phase(loadPhaseB, workersB)
	nErrB, msgB := stB.errors()
	peak, killed := watch.finish()
	if hwm, err := statusBytes(pid, "VmHWM"); err == nil {
		peak = max(peak, hwm)
	}

	readA, readB, writeB := mbps(stA.readBytes.Load(), dA), mbps(stB.readBytes.Load(), dB), mbps(stB.writeBytes.Load(), dB)
	bound := loadBudget*5/4 + baseline
	t.Logf("\n| phase | clients | reads | read MB/s | writes | write MB/s | errors | peak RSS |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n"+
		"| A | 4 full readers | %d | %.0f | 0 | 0 | %d | %s |\n"+
		"| B | 16 full + 48 window readers, 16 strip writers | %d | %.0f | %d | %.1f | %d | %s |\n"+
		"budget %s (--memory-limit 512MiB), idle server %s, bound %s (budget + 25 %% + idle)",
		stA.reads.Load(), readA, 0, mib(hwmA),
		stB.reads.Load(), readB, stB.writes.Load(), writeB, nErrB, mib(peak),
		mib(loadBudget), mib(baseline), mib(bound))

	if killed || !srv.alive() {
		t.Fatalf("the server died or was killed (peak RSS %s): %s", mib(peak), crashReason(srv.logs.String()))
	}
	if nErrB > 0 {
		t.Errorf("phase B: %d errors: %s", nErrB, msgB)
	}
	if peak > bound {
		t.Errorf("peak RSS %s over the bound %s", mib(peak), mib(bound))
	}
	if readB < loadTolerance*readA {
		t.Errorf("phase B reads %.0f MB/s, less than %.1f × phase A's %.0f MB/s", readB, loadTolerance, readA)
	}
	if stB.writes.Load() == 0 {
		t.Error("phase B wrote nothing")
	}
}
