package client_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/zarrgate/zarrgate/client"
	"github.com/zarrgate/zarrgate/gateway"
)

// BenchmarkReadShared reads a 64 MiB float32 array (256² chunks, on a file
// store, in the page cache; uncompressed, zstd, and zstd in 1024² shards) from an in-process gateway through shared
// memory: into a slice (ReadInto: the gateway copies each block into its
// segment, the client copies it out) and into a SharedBuffer (ReadShared:
// the gateway writes the slab into it, raw chunks read straight into their
// rows). cpu-ms/op is the process's CPU time (gateway and client) per
// read, steadier than MB/s on a busy machine.
// dialSharedFiles serves an in-process gateway with shared memory on a
// file store and dials it with shared memory on, until the benchmark ends.
func dialSharedFiles(b *testing.B) *client.Client {
	b.Helper()
	addr := serveFiles(b, gateway.Config{SharedMemory: true})
	c, err := client.Dial(context.Background(), addr, client.WithSharedMemory(true))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

func BenchmarkReadShared(b *testing.B) {
	ctx := context.Background()
	c := dialSharedFiles(b)
	const n = 4096
	data := make([]float32, n*n)
	for i := range data {
		data[i] = float32(i%1000) * 0.5
	}
	for _, layout := range []struct {
		name, codecs string
		shard        []int64
	}{
		{"uncompressed", `[{"name":"bytes","configuration":{"endian":"little"}}]`, nil},
		{"zstd", "", nil},
		{"sharded-zstd", "", []int64{1024, 1024}},
	} {
		a, err := c.CreateArray(ctx, layout.name, client.ArraySpec{Shape: []int64{n, n}, DataType: "float32", ChunkShape: []int64{256, 256}, ShardShape: layout.shard, Codecs: layout.codecs})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := client.Write(ctx, a, nil, data); err != nil {
			b.Fatal(err)
		}
		b.Run(layout.name+"/slice", func(b *testing.B) {
			dst := make([]float32, n*n)
			b.SetBytes(n * n * 4)
			defer reportCPU(b)()
			for b.Loop() {
				if err := client.ReadInto(ctx, a, nil, dst); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(layout.name+"/buffer", func(b *testing.B) {
			buf, err := client.NewSharedBuffer(n * n * 4)
			if err != nil {
				b.Fatal(err)
			}
			defer buf.Close()
			b.SetBytes(n * n * 4)
			defer reportCPU(b)()
			for b.Loop() {
				if _, err := client.ReadShared[float32](ctx, a, nil, buf); err != nil {
					b.Fatal(err)
				}
			}
			if ok, why := buf.InPlace(); !ok {
				b.Fatalf("not in place: %s", why)
			}
		})
	}
}

// BenchmarkWriteShared writes a 64 MiB float32 array (256² chunks, zstd,
// on a file store with its fsyncs) to an in-process gateway from a slice
// (Write: the slab travels over the socket) and from a SharedBuffer
// (WriteShared: the gateway reads it from the buffer itself). cpu-ms/op
// is the process's CPU time (gateway and client) per write.
func BenchmarkWriteShared(b *testing.B) {
	ctx := context.Background()
	c := dialSharedFiles(b)
	const n = 4096
	buf, err := client.NewSharedBuffer(n * n * 4)
	if err != nil {
		b.Fatal(err)
	}
	defer buf.Close()
	data := unsafe.Slice((*float32)(unsafe.Pointer(&buf.Bytes()[0])), n*n)
	for i := range data {
		data[i] = float32(i%1000) * 0.5
	}
	k := 0
	create := func() *client.Array {
		k++
		a, err := c.CreateArray(ctx, fmt.Sprintf("w%d", k), client.ArraySpec{Shape: []int64{n, n}, DataType: "float32", ChunkShape: []int64{256, 256}})
		if err != nil {
			b.Fatal(err)
		}
		return a
	}
	b.Run("slice", func(b *testing.B) {
		b.SetBytes(n * n * 4)
		defer reportCPU(b)()
		for b.Loop() {
			if _, err := client.Write(ctx, create(), nil, data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("buffer", func(b *testing.B) {
		b.SetBytes(n * n * 4)
		defer reportCPU(b)()
		for b.Loop() {
			if _, err := client.WriteShared[float32](ctx, create(), nil, buf); err != nil {
				b.Fatal(err)
			}
		}
		if ok, why := buf.InPlace(); !ok {
			b.Fatalf("not in place: %s", why)
		}
	})
}

// reportCPU reports the process's CPU time per op from now to the call
// of the function it returns.
func reportCPU(b *testing.B) func() {
	cpu0 := processCPU()
	return func() {
		b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/1e3/float64(b.N), "cpu-ms/op")
	}
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
