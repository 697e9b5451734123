package e2e

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/client"
)

// The benchmark array: 512 MiB of float32 in 256×256 chunks.
const (
	benchRows, benchCols = 16384, 8192
	benchChunk           = 256
	benchShard           = 4096
)

var benchLayouts = []struct {
	name   string
	codecs string
	shards []int64
}{
	{"uncompressed", `[{"name":"bytes","configuration":{"endian":"little"}}]`, nil},
	{"zstd", `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":3,"checksum":false}}]`, nil},
	{"sharded-zstd", `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":3,"checksum":false}}]`, []int64{benchShard, benchShard}},
}

// benchValue is the array's content: a smooth field with noise, so that
// zstd has work to do but no trivial runs.
func benchValue(i, j int) float32 {
	return float32(math.Sin(float64(i)*0.001)*1000 + math.Cos(float64(j)*0.002)*100 + float64((i*131+j*71)%17))
}

// BenchmarkGatewaySlabs measures ReadSlab and WriteSlab through a real
// `zarrgate serve` on loopback, for the three layouts, and a raw read of
// the uncompressed chunk files for scale. Full reads run twice: "read" as
// a client on the gateway's host gets it by default (block data through
// shared memory), "read-socket" with shared memory off (block data through
// the gRPC stream, as for a client on another host). With ZARRGATE_PYTHON set (a
// python with zarr and tensorstore), the same operations run in
// zarr-python and tensorstore on the same directory, side by side.
//
//	go test -run '^$' -bench GatewaySlabs -benchtime 3x -timeout 30m ./e2e/
func BenchmarkGatewaySlabs(b *testing.B) {
	root := b.TempDir()
	s := startServer(b, "--root", root)
	ctx := context.Background()
	c, err := client.Dial(ctx, s.addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	// The same reads with shared memory off: block data through the socket.
	sc, err := client.Dial(ctx, s.addr, client.WithSharedMemory(false))
	if err != nil {
		b.Fatal(err)
	}
	defer sc.Close()
	data := make([]float32, benchRows*benchCols)
	for i := range benchRows {
		for j := range benchCols {
			data[i*benchCols+j] = benchValue(i, j)
		}
	}
	const size = benchRows * benchCols * 4
	for _, l := range benchLayouts {
		a, err := c.CreateArray(ctx, l.name, client.ArraySpec{Shape: []int64{benchRows, benchCols}, DataType: "float32",
			ChunkShape: []int64{benchChunk, benchChunk}, ShardShape: l.shards, Codecs: l.codecs})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(l.name+"/write", func(b *testing.B) {
			b.SetBytes(size)
			for b.Loop() {
				if _, err := client.Write(ctx, a, nil, data); err != nil {
					b.Fatal(err)
				}
			}
		})
		got := make([]float32, len(data))
		b.Run(l.name+"/read", func(b *testing.B) { timedReads(b, a, got, data) })
		b.Run(l.name+"/read-socket", func(b *testing.B) {
			sa, err := sc.OpenArray(ctx, l.name)
			if err != nil {
				b.Fatal(err)
			}
			timedReads(b, sa, got, data)
		})
		b.Run(l.name+"/random64", func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 2))
			lat := make([]time.Duration, 0, 1000)
			buf := make([]float32, 64*64)
			for b.Loop() {
				lat = lat[:0]
				for range 1000 {
					y, x := r.Int64N(benchRows-64), r.Int64N(benchCols-64)
					t0 := time.Now()
					if err := client.ReadInto(ctx, a, client.Selection{{Start: y, Stop: y + 64, Step: 1}, {Start: x, Stop: x + 64, Step: 1}}, buf); err != nil {
						b.Fatal(err)
					}
					lat = append(lat, time.Since(t0))
					if buf[0] != data[y*benchCols+x] {
						b.Fatal("random read differs")
					}
				}
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
	// The socket reads again from a second server on the same directory,
	// over a Unix socket.
	sock := filepath.Join(b.TempDir(), "zg.sock")
	us := startServer(b, "--root", root, "--listen", "unix://"+sock)
	uc, err := client.Dial(ctx, us.addr, client.WithSharedMemory(false))
	if err != nil {
		b.Fatal(err)
	}
	defer uc.Close()
	got := make([]float32, len(data))
	for _, l := range benchLayouts {
		a, err := uc.OpenArray(ctx, l.name)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(l.name+"/read-unix-socket", func(b *testing.B) { timedReads(b, a, got, data) })
	}
	b.Run("uncompressed/raw-file-read", func(b *testing.B) {
		buf := make([]byte, 1<<20)
		b.SetBytes(size)
		best := time.Duration(math.MaxInt64)
		for b.Loop() {
			t0 := time.Now()
			var n int64
			filepath.WalkDir(filepath.Join(root, "uncompressed", "c"), func(p string, d os.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				f, err := os.Open(p)
				if err != nil {
					return err
				}
				m, _ := io.CopyBuffer(io.Discard, struct{ io.Reader }{f}, buf)
				n += m
				return f.Close()
			})
			if n != size {
				b.Fatalf("read %d bytes of chunk files", n)
			}
			best = min(best, time.Since(t0))
		}
		b.ReportMetric(size/best.Seconds()/1e6, "best-MB/s")
	})
	if py := os.Getenv("ZARRGATE_PYTHON"); py != "" {
		cmd := exec.Command(py, "../bench/zarr_bench.py", root)
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			b.Fatalf("python benchmarks: %v", err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			b.Log(line)
			fmt.Println(line)
		}
	}
}

// timedReads reads the whole array into got once untimed, as the Python
// side does (it faults got's pages in and warms both processes), then
// b.N times, and reports the best read: this machine's timings vary by
// ±30% from run to run, and the table compares best with best.
func timedReads(b *testing.B, a *client.Array, got, want []float32) {
	ctx := context.Background()
	b.SetBytes(int64(len(want)) * 4)
	if err := client.ReadInto(ctx, a, nil, got); err != nil {
		b.Fatal(err)
	}
	best := time.Duration(math.MaxInt64)
	for b.Loop() {
		t0 := time.Now()
		if err := client.ReadInto(ctx, a, nil, got); err != nil {
			b.Fatal(err)
		}
		best = min(best, time.Since(t0))
	}
	b.ReportMetric(float64(len(want))*4/best.Seconds()/1e6, "best-MB/s")
	if !slices.Equal(got, want) {
		b.Fatal("read back differs")
	}
}

// reopen starts a fresh `zarrgate serve` on root and opens the array at
// path through a client (with opts) closed with the benchmark.
func reopen(b *testing.B, root, path string, opts ...client.Option) (*server, *client.Array) {
	s := startServer(b, "--root", root)
	c, err := client.Dial(context.Background(), s.addr, opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	a, err := c.OpenArray(context.Background(), path)
	if err != nil {
		b.Fatal(err)
	}
	return s, a
}

// BenchmarkGatewayMemory4GiB streams a 4 GiB slab (a 16-times-larger
// sharded zstd array) block by block out of a separate `zarrgate serve`,
// through the socket and then through shared memory (each from a fresh
// server), and reports the server's peak resident memory for each; the
// issue's bound is 256 MiB.
//
//	go test -run '^$' -bench GatewayMemory -benchtime 1x -timeout 30m ./e2e/
func BenchmarkGatewayMemory4GiB(b *testing.B) {
	root := b.TempDir()
	s := startServer(b, "--root", root)
	ctx := context.Background()
	c, err := client.Dial(ctx, s.addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	const rows, cols = 4 * benchRows, 2 * benchCols // 4 GiB of float32
	a, err := c.CreateArray(ctx, "big", client.ArraySpec{Shape: []int64{rows, cols}, DataType: "float32",
		ChunkShape: []int64{benchChunk, benchChunk}, ShardShape: []int64{benchShard, benchShard}, Codecs: benchLayouts[1].codecs})
	if err != nil {
		b.Fatal(err)
	}
	band := make([]float32, benchShard*cols)
	for r0 := int64(0); r0 < rows; r0 += benchShard {
		for i := range benchShard {
			for j := range cols {
				band[i*cols+j] = benchValue(int(r0)+i, j)
			}
		}
		if _, err := client.Write(ctx, a, client.Selection{{Start: r0, Stop: r0 + benchShard, Step: 1}, {Start: 0, Stop: cols, Step: 1}}, band); err != nil {
			b.Fatal(err)
		}
	}
	// A fresh server for each read, so that what came before does not
	// count in its peak.
	for b.Loop() {
		for _, shared := range []bool{false, true} {
			s.cmd.Process.Kill()
			s, a = reopen(b, root, "big", client.WithSharedMemory(shared))
			t0 := time.Now()
			_, blocks, err := a.Blocks(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			var n int64
			var last float32
			for blk, err := range blocks {
				if err != nil {
					b.Fatal(err)
				}
				n += int64(len(blk.Data))
				if blk.Origin[0]+blk.Shape[0] == rows && blk.Origin[1]+blk.Shape[1] == cols {
					last = math.Float32frombits(binary.LittleEndian.Uint32(blk.Data[len(blk.Data)-4:]))
				}
			}
			if n != rows*cols*4 || last != benchValue(rows-1, cols-1) {
				b.Fatalf("streamed %d bytes, last element %v", n, last)
			}
			name := map[bool]string{false: "socket", true: "shared"}[shared]
			b.ReportMetric(float64(rows*cols*4)/time.Since(t0).Seconds()/1e6, name+"-MB/s")
			b.ReportMetric(float64(procStatus(b, s.cmd.Process.Pid, "VmHWM"))/1024, name+"-server-peak-rss-MiB")
		}
	}
}
