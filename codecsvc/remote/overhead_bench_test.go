package remote_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/codecsvc/remote"
)

// BenchmarkOffloadOverhead measures what offloading adds per 256 KiB
// chunk (float32, zstd): each iteration decodes the same batch in process
// and through a codec worker on loopback, one after the other (so that
// the machine's load falls on both alike), and reports the difference per
// chunk in wall-clock time (added-µs/chunk) and in the CPU time of the
// whole process, caller and worker together (added-cpu-µs/chunk), and the
// bytes each chunk puts on the wire (request and response, per decoded
// byte: wire-B/B). The caller releases every decoded chunk, as the gateway
// does. The worker listens on loopback TCP (batch=N), then on a unix
// socket (unix-batch=N), which a codec worker on the gateway's host can
// use instead (gateway --codec unix:///path, codec-worker --listen
// unix:///path); then both again with chunks through a shared-memory
// segment per stream (shm-batch=N, unix-shm-batch=N: the gateway's
// default for a worker on its host, --codec-shared-memory-bytes), where
// wire-B/B counts what still goes on the socket.
func BenchmarkOffloadOverhead(b *testing.B) {
	for _, shared := range []bool{false, true} {
		for _, network := range []string{"tcp", "unix"} {
			offloadOverhead(b, network, shared)
		}
	}
}

// offloadOverhead is BenchmarkOffloadOverhead with the worker on network:
// loopback TCP (batch=N) or a unix socket (unix-batch=N), with shared
// memory or without.
func offloadOverhead(b *testing.B, network string, shared bool) {
	ctx := context.Background()
	l := codecsvc.NewLocal()
	w := remote.New(serveWorkerOn(b, network))
	defer w.Close()
	if shared {
		w.SetSharedMemory(remote.DefaultSharedMemoryBytes, nil)
	}
	s := spec(zstdChain, 256, 256)
	for _, n := range []int{1, 16} {
		chunks := make([]codec.Chunk, n)
		for i := range chunks {
			chunks[i] = codec.Chunk{Data: floats(256*256, float64(i))}
		}
		enc, _ := l.Encode(ctx, s, chunks)
		var encBytes int
		for _, e := range enc {
			encBytes += len(e)
		}
		run := func(e codec.Engine) (time.Duration, time.Duration) {
			c0, t0 := cpuTime(b), time.Now()
			out, err := e.Decode(ctx, s, enc)
			if err != nil {
				b.Fatal(err)
			}
			for _, c := range out {
				c.Release()
			}
			return time.Since(t0), cpuTime(b) - c0
		}
		name := fmt.Sprintf("batch=%d", n)
		if shared {
			name = "shm-" + name
		}
		if network != "tcp" {
			name = network + "-" + name
		}
		b.Run(name, func(b *testing.B) {
			// The streams (4, one per batch in turn) are open before
			// timing, and with shared memory their offers answered.
			for range 4 {
				run(w)
			}
			for shared {
				if a, _ := w.SharedStreams(); a == 4 {
					break
				}
				time.Sleep(time.Millisecond)
			}
			_, via0 := w.SharedStreams()
			var wall, cpu time.Duration
			for range b.N {
				lw, lc := run(l)
				rw, rc := run(w)
				wall += rw - lw
				cpu += rc - lc
			}
			per := float64(b.N * n)
			b.ReportMetric(float64(wall.Microseconds())/per, "added-µs/chunk")
			b.ReportMetric(float64(cpu.Microseconds())/per, "added-cpu-µs/chunk")
			wire := float64(encBytes + n*256*256*4)
			if _, via := w.SharedStreams(); shared && via-via0 == uint64(b.N*n) {
				wire = 0 // every chunk, there and back, through the segment
			} else if shared {
				b.Fatalf("%d of %d chunks through shared memory", via-via0, b.N*n)
			}
			b.ReportMetric(wire/float64(n*256*256*4), "wire-B/B")
		})
	}
}

// cpuTime is the CPU time (user and system) this process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
