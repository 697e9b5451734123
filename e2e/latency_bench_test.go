package e2e

import (
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/client"
)

// procCPU is the CPU time (user + system) a process has used so far.
func procCPU(b *testing.B, pid int) time.Duration {
	b.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command name (which may hold spaces): utime and
	// stime are the 14th and 15th fields, in clock ticks (100 per second).
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * 10 * time.Millisecond
}

// BenchmarkLatencyBoundWorkers measures how a gateway's throughput scales
// with the number of workers of a tier when each worker, not the CPU, is
// the limit: every worker runs with --inject-latency 20ms (a codec worker
// takes 20 ms per batch, a store worker 20 ms per call, one at a time), so
// one worker serves 50 batches of 8 chunks a second whatever the cores.
// The array is small zstd chunks (64×64 float32, 16 KiB; 8192×2048, 64
// MiB, 4096 chunks), so that the CPU each chunk costs stays small beside
// the injected latency, and many (512 batches), so that 16 workers get 32
// batches each per read and the read's fixed costs (its first fetch, its
// last batch's way to the client: ≈ 70–90 ms, which a 16 MiB array's 8
// batches a worker did not amortise) weigh little beside them; one read
// with one worker takes 10.5 s. The gateway runs with --parallelism 64, enough
// batches in flight for 16 workers. codec-workers=N: N delayed codec
// workers over one plain store worker; store-workers=N: N delayed store
// workers, codecs in the gateway. Reported beside MB/s: gateway-cores and
// workers-cores, the CPU the gateway and all the tier's workers used per
// second of reading (2 cores on the machine the numbers in
// docs/benchmarks.md come from), and spread, the least busy worker's
// chunks decoded (codec) or calls (store) over the busiest's.
//
//	go test -run '^$' -bench LatencyBoundWorkers -benchtime 3x -timeout 30m ./e2e/
func BenchmarkLatencyBoundWorkers(b *testing.B) {
	root := b.TempDir()
	ctx := context.Background()
	const rows, cols, chunk = 8192, 2048, 64
	embedded := startServer(b, "--root", root)
	c, err := client.Dial(ctx, embedded.addr)
	if err != nil {
		b.Fatal(err)
	}
	a, err := c.CreateArray(ctx, "z", client.ArraySpec{Shape: []int64{rows, cols}, DataType: "float32",
		ChunkShape: []int64{chunk, chunk}, Codecs: benchLayouts[1].codecs})
	if err != nil {
		b.Fatal(err)
	}
	data := make([]float32, rows*cols)
	for i := range rows {
		for j := range cols {
			data[i*cols+j] = benchValue(i, j)
		}
	}
	if _, err := client.Write(ctx, a, nil, data); err != nil {
		b.Fatal(err)
	}
	c.Close()
	embedded.cmd.Process.Kill()
	<-embedded.done

	counts := []int{1, 2, 4, 8, 16}
	const delay = "20ms"
	// work is what each worker has done: chunks decoded (codec), calls
	// (store).
	work := func(b *testing.B, w *adminProc) float64 {
		n := 0.0
		for k, v := range w.scrape(b) {
			if strings.HasPrefix(k, "zarrgate_codec_chunks_total{") && strings.Contains(k, `op="decode"`) ||
				strings.HasPrefix(k, "zarrgate_store_calls_total{") {
				n += v
			}
		}
		return n
	}
	run := func(b *testing.B, gw *server, workers []*adminProc) {
		c, err := client.Dial(ctx, gw.addr)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		a, err := c.OpenArray(ctx, "z")
		if err != nil {
			b.Fatal(err)
		}
		got := make([]float32, rows*cols)
		// One read first: every worker connected, caches warm.
		if err := client.ReadInto(ctx, a, nil, got); err != nil {
			b.Fatal(err)
		}
		cpu := func() (gwCPU, wCPU time.Duration) {
			gwCPU = procCPU(b, gw.cmd.Process.Pid)
			for _, w := range workers {
				wCPU += procCPU(b, w.cmd.Process.Pid)
			}
			return
		}
		var before []float64
		for _, w := range workers {
			before = append(before, work(b, w))
		}
		g0, w0 := cpu()
		start := time.Now()
		b.SetBytes(rows * cols * 4)
		for b.Loop() {
			if err := client.ReadInto(ctx, a, nil, got); err != nil {
				b.Fatal(err)
			}
		}
		wall := time.Since(start)
		g1, w1 := cpu()
		b.ReportMetric((g1-g0).Seconds()/wall.Seconds(), "gateway-cores")
		b.ReportMetric((w1-w0).Seconds()/wall.Seconds(), "workers-cores")
		b.ReportMetric(float64((g1-g0).Milliseconds())/float64(b.N), "gateway-cpu-ms/op")
		// spread: the least busy worker's work over the busiest's (1:
		// even).
		least, most := math.Inf(1), 0.0
		for i, w := range workers {
			d := work(b, w) - before[i]
			least, most = min(least, d), max(most, d)
		}
		b.ReportMetric(least/most, "spread")
	}
	stop := func(ss ...*server) {
		for _, s := range ss {
			s.cmd.Process.Kill()
			<-s.done
		}
	}
	// startWorkers starts the most workers of a kind, delayed, with their
	// admin endpoints.
	startWorkers := func(b *testing.B, sub string, args ...string) (ws []*adminProc, addrs []string) {
		for range counts[len(counts)-1] {
			w := startWithAdmin(b, sub, true, append(args, "--inject-latency", delay)...)
			ws, addrs = append(ws, w), append(addrs, w.addr)
		}
		return ws, addrs
	}

	b.Run("codec", func(b *testing.B) {
		store := startCommand(b, "store-worker", "--root", root)
		codecs, addrs := startWorkers(b, "codec-worker")
		for _, n := range counts {
			gw := startCommand(b, "gateway", "--parallelism", "64", "--store", store.addr, "--codec", strings.Join(addrs[:n], ","))
			b.Run(fmt.Sprintf("codec-workers=%d", n), func(b *testing.B) { run(b, gw, codecs[:n]) })
			stop(gw)
		}
		for _, w := range codecs {
			stop(w.server)
		}
		stop(store)
	})
	b.Run("store", func(b *testing.B) {
		stores, addrs := startWorkers(b, "store-worker", "--root", root)
		for _, n := range counts {
			gw := startCommand(b, "gateway", "--parallelism", "64", "--store", strings.Join(addrs[:n], ","))
			b.Run(fmt.Sprintf("store-workers=%d", n), func(b *testing.B) { run(b, gw, stores[:n]) })
			stop(gw)
		}
		for _, w := range stores {
			stop(w.server)
		}
	})
}
