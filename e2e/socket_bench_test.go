package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/client"
)

// BenchmarkSocketConnections reads the zstd array of BenchmarkGatewaySlabs
// (512 MiB float32, 256² chunks) through a real `zarrgate serve` on
// loopback with shared memory off (block data through the socket, as for
// a client on another host), by clients with 1, 2 and 4 connections
// (client.WithConnections), interleaved: each round reads once with each.
// Reported per connection count: the best and median MB/s over the rounds
// and the CPU time per read of the client and of the gateway's process.
//
//	go test -run '^$' -bench SocketConnections -benchtime 1x -timeout 30m ./e2e/
func BenchmarkSocketConnections(b *testing.B) {
	rounds := 7
	if v, err := strconv.Atoi(os.Getenv("ZARRGATE_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	ctx := context.Background()
	s := startServer(b, "--root", b.TempDir())
	c, err := client.Dial(ctx, s.addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	l := benchLayouts[1]
	a, err := c.CreateArray(ctx, l.name, client.ArraySpec{Shape: []int64{benchRows, benchCols}, DataType: "float32",
		ChunkShape: []int64{benchChunk, benchChunk}, Codecs: l.codecs})
	if err != nil {
		b.Fatal(err)
	}
	data := make([]float32, benchRows*benchCols)
	for i := range benchRows {
		for j := range benchCols {
			data[i*benchCols+j] = benchValue(i, j)
		}
	}
	if _, err := client.Write(ctx, a, nil, data); err != nil {
		b.Fatal(err)
	}
	ks := []int{1, 2, 4}
	arrays := make([]*client.Array, len(ks))
	for i, k := range ks {
		sc, err := client.Dial(ctx, s.addr, client.WithSharedMemory(false), client.WithConnections(k))
		if err != nil {
			b.Fatal(err)
		}
		defer sc.Close()
		if arrays[i], err = sc.OpenArray(ctx, l.name); err != nil {
			b.Fatal(err)
		}
	}
	got := make([]float32, len(data))
	rate := make([][]float64, len(ks))
	cpuC := make([]time.Duration, len(ks))
	cpuS := make([]time.Duration, len(ks))
	for b.Loop() {
		for r := range rounds + 1 {
			for i := range ks {
				c0, s0 := selfCPU(b), procCPU(b, s.cmd.Process.Pid)
				t0 := time.Now()
				if err := client.ReadInto(ctx, arrays[i], nil, got); err != nil {
					b.Fatal(err)
				}
				el := time.Since(t0)
				if r == 0 { // warm-up
					continue
				}
				cpuC[i] += selfCPU(b) - c0
				cpuS[i] += procCPU(b, s.cmd.Process.Pid) - s0
				rate[i] = append(rate[i], float64(len(data))*4/el.Seconds()/1e6)
			}
		}
	}
	if !slices.Equal(got, data) {
		b.Fatal("read back differs")
	}
	for i, k := range ks {
		slices.Sort(rate[i])
		n := float64(len(rate[i]))
		b.ReportMetric(rate[i][len(rate[i])-1], fmt.Sprintf("conns%d-best-MB/s", k))
		b.ReportMetric(rate[i][len(rate[i])/2], fmt.Sprintf("conns%d-median-MB/s", k))
		b.ReportMetric(float64(cpuC[i].Milliseconds())/n, fmt.Sprintf("conns%d-client-cpu-ms", k))
		b.ReportMetric(float64(cpuS[i].Milliseconds())/n, fmt.Sprintf("conns%d-server-cpu-ms", k))
	}
}
