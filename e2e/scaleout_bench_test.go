package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/zarrgate/zarrgate/client"
)

// BenchmarkCodecWorkers reads the zstd benchmark layout (256×256 float32
// chunks; 8192×8192 = 256 MiB) through a gateway whose codecs run on N codec
// workers, N = 1, 2, 4, beside the embedded gateway (codecs in process).
// On this 2-core machine every process shares the same cores, so the
// numbers show the offloading overhead, not the scaling; docs/benchmarks.md
// gives the formula and the projection.
//
//	go test -run '^$' -bench CodecWorkers -benchtime 2x -timeout 30m ./e2e/
func BenchmarkCodecWorkers(b *testing.B) {
	root := b.TempDir()
	ctx := context.Background()
	const rows, cols = 8192, 8192
	embedded := startServer(b, "--root", root)
	c, err := client.Dial(ctx, embedded.addr)
	if err != nil {
		b.Fatal(err)
	}
	a, err := c.CreateArray(ctx, "z", client.ArraySpec{Shape: []int64{rows, cols}, DataType: "float32",
		ChunkShape: []int64{256, 256}, Codecs: benchLayouts[1].codecs})
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
	read := func(b *testing.B, addr string) {
		c, err := client.Dial(ctx, addr)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		a, err := c.OpenArray(ctx, "z")
		if err != nil {
			b.Fatal(err)
		}
		got := make([]float32, rows*cols)
		b.SetBytes(rows * cols * 4)
		for b.Loop() {
			if err := client.ReadInto(ctx, a, nil, got); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("embedded", func(b *testing.B) { read(b, embedded.addr) })
	store := startCommand(b, "store-worker", "--root", root)
	var workers []string
	for range 4 {
		workers = append(workers, startCommand(b, "codec-worker").addr)
	}
	for _, n := range []int{1, 2, 4} {
		gw := startCommand(b, "gateway", "--store", store.addr, "--codec", strings.Join(workers[:n], ","))
		b.Run(fmt.Sprintf("codec-workers=%d", n), func(b *testing.B) { read(b, gw.addr) })
	}
}
