package client_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/client"
)

// BenchmarkReadSocketSplit reads a 64 MiB zstd float32 array (4096², 256²
// chunks) through the socket (shared memory off) with 1, 2 and 4
// connections (WithConnections): wall time and the CPU time of the
// process, gateway and client together (cpu-ms/op).
//
//	go test -run '^$' -bench ReadSocketSplit -benchtime 5x -count 5 ./client/
func BenchmarkReadSocketSplit(b *testing.B) {
	ctx := context.Background()
	const n = 4096
	setup, err := client.Dial(ctx, addr)
	if err != nil {
		b.Fatal(err)
	}
	defer setup.Close()
	if _, err := setup.OpenArray(ctx, "bench-split"); err != nil {
		benchArray(b, setup, "bench-split", n)
	}
	got := make([]float32, n*n)
	for _, k := range []int{1, 2, 4} {
		c, err := client.Dial(ctx, addr, client.WithSharedMemory(false), client.WithConnections(k))
		if err != nil {
			b.Fatal(err)
		}
		ca, err := c.OpenArray(ctx, "bench-split")
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("conns=%d", k), func(b *testing.B) {
			b.SetBytes(n * n * 4)
			cpu0 := cpuTime()
			for b.Loop() {
				if err := client.ReadInto(ctx, ca, nil, got); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((cpuTime()-cpu0).Milliseconds())/float64(b.N), "cpu-ms/op")
		})
		c.Close()
	}
}

// cpuTime is the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchArray writes an n × n zstd float32 array (256² chunks) of
// compressible values at path through c.
func benchArray(b *testing.B, c *client.Client, path string, n int64) {
	ctx := context.Background()
	a, err := c.CreateArray(ctx, path, client.ArraySpec{Shape: []int64{n, n}, DataType: "float32", ChunkShape: []int64{256, 256},
		Codecs: `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":3}}]`})
	if err != nil {
		b.Fatal(err)
	}
	data := make([]float32, n*n)
	for i := range data {
		data[i] = float32(i%4099) * 0.37
	}
	if _, err := client.Write(ctx, a, nil, data); err != nil {
		b.Fatal(err)
	}
}
