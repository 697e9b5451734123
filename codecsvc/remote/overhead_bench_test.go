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
// unix:///path).
func BenchmarkOffloadOverhead(b *testing.B) {
	for _, network := range []string{"tcp", "unix"} {
		offloadOverhead(b, network)
	}
}

// offloadOverhead is BenchmarkOffloadOverhead with the worker on network:
// loopback TCP (batch=N) or a unix socket (unix-batch=N).
func offloadOverhead(b *testing.B, network string) {
	ctx := context.Background()
	l := codecsvc.NewLocal()
	w := remote.New(serveWorkerOn(b, network))
	defer w.Close()
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
		if network != "tcp" {
			name = network + "-" + name
		}
		b.Run(name, func(b *testing.B) {
			run(w) // the stream is open before timing
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
			b.ReportMetric(float64(encBytes+n*256*256*4)/float64(n*256*256*4), "wire-B/B")
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
