package arrayserver

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"google.golang.org/protobuf/proto"

	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/gateway"
	"github.com/zarrgate/zarrgate/internal/bulk"
	"github.com/zarrgate/zarrgate/internal/shm"
	"github.com/zarrgate/zarrgate/storesvc/file"
	"github.com/zarrgate/zarrgate/zarr"
)

const (
	benchN     = 4096 // a benchN × benchN float32 array: 64 MiB
	plainBytes = `[{"name":"bytes","configuration":{"endian":"little"}}]`
	zstdBytes  = `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":3}}]`
)

// benchGateway returns an engine on a file store holding array "a": 64 MiB
// of float32 in 256×256 chunks with the given codecs, written in full.
func benchGateway(b *testing.B, codecs string) *gateway.Gateway {
	return benchGatewayConfig(b, codecs, gateway.Config{})
}

func benchGatewayConfig(b *testing.B, codecs string, cfg gateway.Config) *gateway.Gateway {
	return benchGatewayShape(b, codecs, []int64{256, 256}, cfg)
}

// benchGatewayShape is benchGatewayConfig with chunks (or shards) of the
// given shape.
func benchGatewayShape(b *testing.B, codecs string, chunks []int64, cfg gateway.Config) *gateway.Gateway {
	data := make([]byte, benchN*benchN*4)
	for i := range data {
		data[i] = byte(i*7/5) | 1 // no chunk is all fill value
	}
	return benchGatewayData(b, codecs, chunks, cfg, data)
}

// benchValues is the content of the side-by-side benchmark's array
// (e2e's benchValue: a smooth field with noise, compressing as real data
// does, 1.2–1.3 with zstd) for a benchN × benchN array of float32.
func benchValues() []byte {
	data := make([]byte, benchN*benchN*4)
	for i := range benchN {
		for j := range benchN {
			v := float32(math.Sin(float64(i)*0.001)*1000 + math.Cos(float64(j)*0.002)*100 + float64((i*131+j*71)%17))
			binary.LittleEndian.PutUint32(data[(i*benchN+j)*4:], math.Float32bits(v))
		}
	}
	return data
}

// benchGatewayData is benchGatewayShape with the array's content given.
func benchGatewayData(b *testing.B, codecs string, chunks []int64, cfg gateway.Config, data []byte) *gateway.Gateway {
	fs, err := file.New(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	g := gateway.New(fs, codecsvc.NewLocal(), cfg)
	if _, err := g.CreateArray(ctx, "a", gateway.ArraySpec{Shape: []int64{benchN, benchN}, DataType: "float32", ChunkShape: chunks, Codecs: json.RawMessage(codecs)}); err != nil {
		b.Fatal(err)
	}
	blk := gateway.Block{Origin: []int64{0, 0}, Shape: []int64{benchN, benchN}, Data: data}
	if _, err := g.WriteSlab(ctx, "a", nil, nextFrom([]gateway.Block{blk})); err != nil {
		b.Fatal(err)
	}
	return g
}

// drain reads a ReadSlab stream to its end.
func drain(b *testing.B, c gatewayv1.ArrayServiceClient, req *gatewayv1.ReadSlabRequest) {
	rs, err := c.ReadSlab(ctx, req)
	if err != nil {
		b.Fatal(err)
	}
	for {
		if _, err := rs.Recv(); err != nil {
			return
		}
	}
}

// BenchmarkRPCReadSlab is the engine's BenchmarkEngineReadSlab
// (uncompressed) through ArrayService on loopback.
func BenchmarkRPCReadSlab(b *testing.B) {
	c := serveGatewayB(b, benchGateway(b, plainBytes))
	b.SetBytes(benchN * benchN * 4)
	for b.Loop() {
		drain(b, c, &gatewayv1.ReadSlabRequest{Path: "a"})
	}
}

// BenchmarkRPCReadSlabShared is BenchmarkRPCReadSlab with block data
// through a shared-memory segment (ReadSlabShared), the client's side
// played by hand: every block copied out of the segment into a slab-sized
// buffer, releases every eighth of the ring.
func BenchmarkRPCReadSlabShared(b *testing.B) {
	if !shm.Supported {
		b.Skip("no shared memory on this platform")
	}
	for name, codecs := range map[string]string{"uncompressed": plainBytes, "zstd": zstdBytes} {
		c := serveGatewayB(b, benchGatewayConfig(b, codecs, gateway.Config{SharedMemory: true}))
		dst := make([]byte, benchN*benchN*4)
		b.Run(name, func(b *testing.B) {
			b.SetBytes(benchN * benchN * 4)
			for b.Loop() {
				readShared(b, c, dst)
			}
		})
	}
}

// readShared reads all of "a" through ReadSlabShared into dst (block after
// block, not in place).
func readShared(b *testing.B, c gatewayv1.ArrayServiceClient, dst []byte) {
	off := 0
	err := readAllShared(b, c, nil, func(_ *gatewayv1.Block, data []byte) { off += copy(dst[off:], data) })
	if err != nil || off != len(dst) {
		b.Fatalf("read %d of %d bytes: %v", off, len(dst), err)
	}
}

// shardedZstd stores 256×256 chunks compressed with zstd in 1024×1024
// shards.
const shardedZstd = `[{"name":"sharding_indexed","configuration":{"chunk_shape":[256,256],"codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":3}}],"index_codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}],"index_location":"end"}}]`

// BenchmarkSmallRead reads random 64×64 boxes (up to four chunks each):
// the latency of small reads, in the engine alone and through ArrayService
// on loopback, streamed (rpc: ReadSlab), in one unary call (rpc-small:
// ReadSlabSmall) or over a small-reads connection (conn-small:
// OpenSmallReads); and cpu-µs/op, the CPU time of the process (client and
// server) per read, steadier than the latency on a busy machine. The
// arrays hold the side-by-side benchmark's values (benchValues). The
// uncompressed array's cases carry no layout prefix (as before zstd and
// sharded zstd were added).
func BenchmarkSmallRead(b *testing.B) {
	for _, lay := range []struct{ name, codecs string }{{"", plainBytes}, {"zstd/", zstdBytes}, {"sharded/", shardedZstd}} {
		// The array is written when a case of its layout first runs, and
		// removed when the benchmark ends.
		var (
			g *gateway.Gateway
			c gatewayv1.ArrayServiceClient
		)
		setup := func(*testing.B) { // on the parent b: the array outlives the case
			if g != nil {
				return
			}
			chunks := []int64{256, 256}
			if lay.codecs == shardedZstd {
				chunks = []int64{1024, 1024}
			}
			g = benchGatewayData(b, lay.codecs, chunks, gateway.Config{}, benchValues())
			c = serveGatewayBulkB(b, g)
		}
		r := rand.New(rand.NewPCG(1, 2))
		box := func() (int64, int64) { return r.Int64N(benchN - 64), r.Int64N(benchN - 64) }
		b.Run(lay.name+"engine", func(b *testing.B) {
			setup(b)
			defer reportCPU(b)()
			for b.Loop() {
				y, x := box()
				err := g.ReadSlab(ctx, "a", []zarr.Range{{Start: y, Stop: y + 64, Step: 1}, {Start: x, Stop: x + 64, Step: 1}}, func(gateway.SlabInfo) error { return nil }, func(gateway.Block) error { return nil })
				if err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(lay.name+"rpc", func(b *testing.B) {
			setup(b)
			defer reportCPU(b)()
			for b.Loop() {
				y, x := box()
				drain(b, c, &gatewayv1.ReadSlabRequest{Path: "a", Selection: []*gatewayv1.Slice{{Start: uint64(y), Stop: uint64(y + 64)}, {Start: uint64(x), Stop: uint64(x + 64)}}})
			}
		})
		b.Run(lay.name+"rpc-small", func(b *testing.B) {
			setup(b)
			defer reportCPU(b)()
			for b.Loop() {
				y, x := box()
				if _, err := c.ReadSlabSmall(ctx, &gatewayv1.ReadSlabSmallRequest{Path: "a", Selection: []*gatewayv1.Slice{{Start: uint64(y), Stop: uint64(y + 64)}, {Start: uint64(x), Stop: uint64(x + 64)}}}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(lay.name+"conn-small", func(b *testing.B) {
			setup(b)
			conn := openSmallReadsB(b, c)
			r, w := bulk.NewReader(conn, 0), bulk.NewWriter(conn)
			defer reportCPU(b)()
			for b.Loop() {
				y, x := box()
				m := &gatewayv1.SmallReadsRequest{Read: &gatewayv1.ReadSlabSmallRequest{Path: "a", Selection: []*gatewayv1.Slice{{Start: uint64(y), Stop: uint64(y + 64)}, {Start: uint64(x), Stop: uint64(x + 64)}}}}
				if err := w.Write(m, nil); err != nil {
					b.Fatal(err)
				}
				raw, err := r.Next(false)
				if err != nil {
					b.Fatal(err)
				}
				var out gatewayv1.SmallReadsResponse
				if err := proto.Unmarshal(raw, &out); err != nil || out.GetCode() != 0 {
					b.Fatal(err, out.GetMessage())
				}
			}
		})
	}
}

// reportCPU starts counting the process's CPU time; the function it
// returns reports it per iteration as cpu-µs/op.
func reportCPU(b *testing.B) func() {
	cpu0, _ := processCPU(b)
	return func() {
		cpu, _ := processCPU(b)
		b.ReportMetric(float64((cpu-cpu0).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
	}
}
