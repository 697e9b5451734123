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
// float32 array (zstd, 512² chunks of 1 MiB). After a warm-up, phase A: 4
// concurrent full readers over the socket, taking turns with phase B0: 64
// full readers over the socket; then phase AW: 4
// readers beside 16 writers of 16-row strips (partial chunks) into a second
// array, taking turns with phase B: 64 readers (a quarter full, the rest
// 1024² windows at random places, half of each through shared memory and
// half over the socket) beside the 16 writers. The
// server's RSS is sampled every 50 ms. No phase may see an error
// (ResourceExhausted included: under the budget a call waits its turn),
// the server's peak RSS stays within the budget + 25 % (plus the idle
// binary), and 64 readers read at least as fast as 4 under the same load
// (B0 against A, B against AW).
const (
	loadRows, loadCols = 8192, 8192 // 256 MiB of float32
	loadChunk          = 512
	loadBudget         = 512 * MiB
	loadWarmUp         = 2 * time.Second
	loadPhaseA         = 6 * time.Second // A and B0 each, in loadRounds turns
	loadTurn           = 4 * time.Second // 3 turns of 4 + 64 readers beside the writers
	loadRounds         = 3
	// loadTolerance: B's read throughput must be at least this fraction
	// of AW's. The issue says "at least that of 4 readers"; on this 2-core
	// machine, shared with other work, the same load run in both turns
	// (4 readers in each) gave B/AW ratios of 0.93, 1.23 and 1.01, hence
	// 0.8 rather than 1. Today's collapse (64 readers at 50 MB/s where 4
	// read 350) is far below it.
	loadTolerance = 0.8
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

func TestLoadMemoryBudget(t *testing.T) { runLoad(t) }

// BenchmarkLoadMemoryBudget runs the load test's phases once per
// iteration and reports them: read MB/s of each phase, the 64-to-4 reader
// ratios and the server's peak RSS (go test -run '^$' -bench
// LoadMemoryBudget -benchtime 1x ./e2e/).
func BenchmarkLoadMemoryBudget(b *testing.B) {
	for b.Loop() {
		r := runLoad(b)
		b.ReportMetric(r.readA, "A-MB/s")
		b.ReportMetric(r.readB0, "B0-MB/s")
		b.ReportMetric(r.readAW, "AW-MB/s")
		b.ReportMetric(r.readB, "B-MB/s")
		b.ReportMetric(r.readB0/r.readA, "B0/A")
		b.ReportMetric(r.readB/r.readAW, "B/AW")
		b.ReportMetric(float64(r.peak)/MiB, "peak-RSS-MiB")
	}
}

// loadResult is what one run of the load phases measured.
type loadResult struct {
	readA, readB0, readAW, readB float64 // MB/s
	peak                         int64   // the server's RSS, bytes
}

func runLoad(t testing.TB) loadResult {
	t.Helper()
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
	// The set-up (256 MiB written) is watched only to stop a runaway
	// server; the bound applies to the load phases, from a fresh peak.
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
	setupPeak, killed := watch.finish()
	if hwm, err := statusBytes(pid, "VmHWM"); err == nil {
		setupPeak = max(setupPeak, hwm)
	}
	if killed {
		t.Fatalf("the server was killed during the set-up at %s", mib(setupPeak))
	}
	t.Logf("setup: 256 MiB written in %v, peak RSS %s", time.Since(t0), mib(setupPeak))
	if err := resetPeak(pid); err != nil {
		t.Fatal(err)
	}
	watch = watchRSS(pid, 50*time.Millisecond, 4096*MiB)

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

	// run starts the workers, each calling its function in a loop; stop
	// cancels what is in flight and returns what they moved until then
	// (errors after the stop are the cancellation's, not failures).
	run := func(workers []func(ctx context.Context, r *rand.Rand, st *loadStats) error) (stop func() (*loadStats, time.Duration)) {
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
		return func() (*loadStats, time.Duration) {
			elapsed := time.Since(start)
			out := &loadStats{}
			out.readBytes.Store(st.readBytes.Load())
			out.writeBytes.Store(st.writeBytes.Load())
			out.reads.Store(st.reads.Load())
			out.writes.Store(st.writes.Load())
			cancel()
			wg.Wait()
			st.mu.Lock()
			out.errs, out.firstErrs = st.errs, st.firstErrs
			st.mu.Unlock()
			return out, elapsed
		}
	}
	phase := func(d time.Duration, workers []func(ctx context.Context, r *rand.Rand, st *loadStats) error) (*loadStats, time.Duration) {
		stop := run(workers)
		time.Sleep(d)
		return stop()
	}
	mbps := func(n int64, d time.Duration) float64 { return float64(n) / 1e6 / d.Seconds() }

	type worker = func(context.Context, *rand.Rand, *loadStats) error
	// 4 full readers, two through shared memory, two over the socket.
	var readers4 []worker
	for i := range 4 {
		a := arrays[i%2 == 0]
		readers4 = append(readers4, func(ctx context.Context, _ *rand.Rand, st *loadStats) error { return fullRead(ctx, a, st) })
	}
	// 64 readers: every fourth a full reader, the others window readers;
	// half of each kind over the socket.
	var readers64 []worker
	for i := range 64 {
		a := arrays[(i/4)%2 == 0]
		if i%4 == 0 {
			readers64 = append(readers64, func(ctx context.Context, _ *rand.Rand, st *loadStats) error { return fullRead(ctx, a, st) })
		} else {
			buf := make([]float32, 1024*1024)
			readers64 = append(readers64, func(ctx context.Context, r *rand.Rand, st *loadStats) error { return windowRead(ctx, a, r, buf, st) })
		}
	}
	// For phases A and B0, 4 and 64 full readers over the socket: the same
	// reads on the same path, so that their throughput compares. (A window
	// read decodes up to 9 chunks for 4 MiB of output; and only 4 reads
	// at a time get a shared-memory segment, the others go inline, so a
	// mix of paths would compare 2 fast readers of 4 with 4 of 64.)
	full := func(n int) []worker {
		var ws []worker
		for range n {
			ws = append(ws, func(ctx context.Context, _ *rand.Rand, st *loadStats) error { return fullRead(ctx, arrays[false], st) })
		}
		return ws
	}
	socket4, socket64 := full(4), full(64)
	var writers16 []worker
	for k := range 16 {
		data := make([]float32, 16*2048)
		for i := range data {
			data[i] = float32(k*100000 + i)
		}
		writers16 = append(writers16, func(ctx context.Context, r *rand.Rand, st *loadStats) error { return stripWrite(ctx, k, r, data, st) })
	}

	// A warm-up, not measured: the first reads after the setup pay for
	// its garbage and for cold caches, and made phase A up to 45 % slower
	// than the same load a moment later.
	phase(loadWarmUp, readers4)
	// Phase A: 4 readers alone. Then the 16 writers start, and beside
	// them 4 readers (AW) and 64 readers (B) take turns, three rounds
	// each.
	//
	// B's reads are compared with AW's, not A's: on this 2-core machine
	// the writers' work (decode, merge and re-encode 1 MiB zstd chunks for
	// every 128 KiB strip) halves the read throughput by itself (measured:
	// 4 readers 512 MB/s alone, 240 MB/s beside the writers), whatever
	// the gateway's concurrency; what the issue asks, that 64 readers get
	// at least what 4 get, is a question of the same load with more
	// readers. Taking turns spreads the machine's drifts (other work on
	// it) over both: back-to-back phases of the same load differed by up
	// to 40 %.
	add := func(sum *loadStats, st *loadStats) {
		sum.readBytes.Add(st.readBytes.Load())
		sum.reads.Add(st.reads.Load())
		if sum.errs == nil {
			sum.errs = map[string]int{}
		}
		for k, v := range st.errs {
			sum.errs[k] += v
		}
		sum.firstErrs = append(sum.firstErrs, st.firstErrs...)
	}
	// Phase A and B0: 4 and 64 readers alone, taking turns.
	stA, stB0 := &loadStats{}, &loadStats{}
	var dA, dB0 time.Duration
	for range loadRounds {
		st, d := phase(loadPhaseA/loadRounds, socket4)
		add(stA, st)
		dA += d
		st, d = phase(loadPhaseA/loadRounds, socket64)
		add(stB0, st)
		dB0 += d
	}
	hwmA, _ := statusBytes(pid, "VmHWM")
	stopWriters := run(writers16)
	stAW, stB := &loadStats{}, &loadStats{}
	var dAW, dB time.Duration
	for range loadRounds {
		st, d := phase(loadTurn, readers4)
		add(stAW, st)
		dAW += d
		st, d = phase(loadTurn, readers64)
		add(stB, st)
		dB += d
	}
	stW, dW := stopWriters()
	peak, killed := watch.finish()
	if hwm, err := statusBytes(pid, "VmHWM"); err == nil {
		peak = max(peak, hwm)
	}

	bound := loadBudget*5/4 + baseline
	var b strings.Builder
	b.WriteString("\n| phase | clients | reads | read MB/s | errors | peak RSS so far |\n| --- | --- | --- | --- | --- | --- |\n")
	for _, p := range []struct {
		name, clients string
		st            *loadStats
		d             time.Duration
		hwm           int64
	}{
		{"A", "4 full readers, socket", stA, dA, hwmA},
		{"B0", "64 full readers, socket", stB0, dB0, hwmA},
		{"AW", "4 full readers beside the writers", stAW, dAW, peak},
		{"B", "16 full + 48 window readers beside the writers", stB, dB, peak},
	} {
		n, _ := p.st.errors()
		fmt.Fprintf(&b, "| %s | %s | %d | %.0f | %d | %s |\n", p.name, p.clients, p.st.reads.Load(), mbps(p.st.readBytes.Load(), p.d), n, mib(p.hwm))
	}
	nW, _ := stW.errors()
	fmt.Fprintf(&b, "writers: 16, %d strips of 128 KiB in %.0f s (%.1f MB/s), %d errors\n", stW.writes.Load(), dW.Seconds(), mbps(stW.writeBytes.Load(), dW), nW)
	fmt.Fprintf(&b, "budget %s (--memory-limit 512MiB), idle server %s, bound %s (budget + 25 %% + idle)", mib(loadBudget), mib(baseline), mib(bound))
	t.Log(b.String())

	if killed || !srv.alive() {
		t.Fatalf("the server died or was killed (peak RSS %s): %s", mib(peak), crashReason(srv.logs.String()))
	}
	for name, st := range map[string]*loadStats{"A": stA, "B0": stB0, "AW": stAW, "B": stB, "writers": stW} {
		if n, msg := st.errors(); n > 0 {
			t.Errorf("phase %s: %d errors: %s", name, n, msg)
		}
	}
	if peak > bound {
		t.Errorf("peak RSS %s over the bound %s", mib(peak), mib(bound))
	}
	readA, readB0 := mbps(stA.readBytes.Load(), dA), mbps(stB0.readBytes.Load(), dB0)
	if readB0 < loadTolerance*readA {
		t.Errorf("64 readers read %.0f MB/s, less than %.1f × the %.0f MB/s of 4 readers", readB0, loadTolerance, readA)
	}
	readAW, readB := mbps(stAW.readBytes.Load(), dAW), mbps(stB.readBytes.Load(), dB)
	if readB < loadTolerance*readAW {
		t.Errorf("64 readers read %.0f MB/s, less than %.1f × the %.0f MB/s of 4 readers (both beside the 16 writers)", readB, loadTolerance, readAW)
	}
	if stW.writes.Load() == 0 {
		t.Error("phase B wrote nothing")
	}
	return loadResult{readA: readA, readB0: readB0, readAW: readAW, readB: readB, peak: peak}
}
