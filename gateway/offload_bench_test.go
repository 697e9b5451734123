package gateway

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"syscall"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/codecsvc/remote"
	"github.com/zarrgate/zarrgate/codecsvc/remote/remotetest"
	"github.com/zarrgate/zarrgate/storesvc/file"
	"github.com/zarrgate/zarrgate/zarr"
)

// BenchmarkReadSlabOffloadOverhead measures what offloading adds per
// 256 KiB chunk to a real slab read: ReadSlabTo (as the gRPC transports
// call it, each block freed once used) of a 64-chunk float32 zstd
// array (256×256 chunks, 16 MiB) from a file store (page cache), each
// iteration read embedded (codecs in process) and then through one codec
// worker in this process, one after the other so that the machine's load
// falls on both alike; it reports the difference per chunk in wall-clock
// time (added-µs/chunk) and in the process's CPU time, gateway and worker
// together (added-cpu-µs/chunk), and the share of chunks that came back
// through shared memory (shm-chunks/chunk). The worker listens on loopback
// TCP (tcp) or a unix socket (unix), with the gateway's default shared
// memory (-shm) or without.
func BenchmarkReadSlabOffloadOverhead(b *testing.B) {
	// The streams' attach lines would break the benchmark's output.
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	store, err := file.New(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	const side, chunk = 2048, 256
	writer := New(store, codecsvc.NewLocal(), Config{})
	spec := ArraySpec{Shape: []int64{side, side}, DataType: "float32", ChunkShape: []int64{chunk, chunk},
		Codecs:    json.RawMessage(`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":1}}]`),
		FillValue: json.RawMessage("0")}
	if _, err := writer.CreateArray(context.Background(), "a", spec); err != nil {
		b.Fatal(err)
	}
	all := []zarr.Range{{Start: 0, Stop: side, Step: 1}, {Start: 0, Stop: side, Step: 1}}
	data := make([]byte, side*side*4)
	for i := range side * side { // smooth floats: zstd takes them to about half
		v := math.Float32bits(float32(math.Sin(float64(i)/97) * 1000))
		data[4*i], data[4*i+1], data[4*i+2], data[4*i+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
	}
	if _, err := writer.WriteSlab(context.Background(), "a", all, nextFrom([]Block{{Origin: []int64{0, 0}, Shape: []int64{side, side}, Data: data}})); err != nil {
		b.Fatal(err)
	}
	const chunks = (side / chunk) * (side / chunk)
	read := func(g *Gateway) (time.Duration, time.Duration) {
		c0, t0 := benchCPU(b), time.Now()
		var n int
		// As the gRPC transports read: each block freed once used.
		err := g.ReadSlabTo(context.Background(), "a", all, func(SlabInfo) error { return nil }, nil, func(bl Block) error {
			n += len(bl.Data)
			bl.Free()
			return nil
		})
		if err != nil || n != len(data) {
			b.Fatalf("read %d bytes: %v", n, err)
		}
		return time.Since(t0), benchCPU(b) - c0
	}
	embedded := New(store, codecsvc.NewLocal(), Config{})
	for _, shared := range []bool{false, true} {
		for _, network := range []string{"tcp", "unix"} {
			name := network
			if shared {
				name += "-shm"
			}
			b.Run(name, func(b *testing.B) {
				w := localWorker(b, network)
				if shared {
					w.SetSharedMemory(remote.DefaultSharedMemoryBytes, nil)
				}
				offloaded := New(store, w, Config{})
				// Streams open, and their offers answered, before timing.
				for range 3 {
					read(offloaded)
				}
				// Streams open as load asks, up to 4 (remote.New's): give
				// them a few reads to, but not forever (shm-chunks/chunk
				// says how many chunks went through shared memory).
				for i := 0; shared && i < 50; i++ {
					if a, _ := w.SharedStreams(); a == 4 {
						break
					}
					read(offloaded)
				}
				_, via0 := w.SharedStreams()
				var wall, cpu time.Duration
				for range b.N {
					lw, lc := read(embedded)
					rw, rc := read(offloaded)
					wall += rw - lw
					cpu += rc - lc
				}
				per := float64(b.N * chunks)
				_, via := w.SharedStreams()
				b.ReportMetric(float64(wall.Microseconds())/per, "added-µs/chunk")
				b.ReportMetric(float64(cpu.Microseconds())/per, "added-cpu-µs/chunk")
				b.ReportMetric(float64(via-via0)/per, "shm-chunks/chunk")
			})
		}
	}
}

// localWorker serves a codec worker in this process on loopback TCP or a
// unix socket.
func localWorker(tb testing.TB, network string) *remote.Client {
	w := remote.New(remotetest.ServeWorker(tb, network))
	tb.Cleanup(func() { w.Close() })
	return w
}

// benchCPU is the CPU time (user and system) this process has used.
func benchCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
