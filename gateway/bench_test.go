package gateway

import (
	"encoding/json"
	"testing"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/storesvc/file"
	"github.com/zarrgate/zarrgate/zarr"
)

// BenchmarkEngineReadSlab reads a whole 64 MiB float32 array (256×256
// chunks) through the engine on a file store, without gRPC: the cost of the
// gateway itself.
func BenchmarkEngineReadSlab(b *testing.B) {
	for _, codecs := range []string{
		`[{"name":"bytes","configuration":{"endian":"little"}}]`,
		`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":3}}]`,
	} {
		fs, err := file.New(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		g := New(fs, codecsvc.NewLocal(), Config{})
		const n = 4096
		if _, err := g.CreateArray(ctx, "a", ArraySpec{Shape: []int64{n, n}, DataType: "float32", ChunkShape: []int64{256, 256}, Codecs: json.RawMessage(codecs)}); err != nil {
			b.Fatal(err)
		}
		data := make([]byte, n*n*4)
		for i := range data {
			data[i] = byte(i * 7 / 5)
		}
		blk := Block{Origin: []int64{0, 0}, Shape: []int64{n, n}, Data: data}
		if _, err := g.WriteSlab(ctx, "a", nil, nextFrom([]Block{blk})); err != nil {
			b.Fatal(err)
		}
		b.Run(codecs[:40], func(b *testing.B) {
			b.SetBytes(n * n * 4)
			for b.Loop() {
				err := g.ReadSlab(ctx, "a", []zarr.Range{{Start: 0, Stop: n, Step: 1}, {Start: 0, Stop: n, Step: 1}}, func(SlabInfo) error { return nil }, func(Block) error { return nil })
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRPCReadSlab is BenchmarkEngineReadSlab through ArrayService on
// loopback.
func BenchmarkRPCReadSlab(b *testing.B) {
	fs, err := file.New(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	g := New(fs, codecsvc.NewLocal(), Config{})
	const n = 4096
	if _, err := g.CreateArray(ctx, "a", ArraySpec{Shape: []int64{n, n}, DataType: "float32", ChunkShape: []int64{256, 256}, Codecs: json.RawMessage(`[{"name":"bytes","configuration":{"endian":"little"}}]`)}); err != nil {
		b.Fatal(err)
	}
	data := make([]byte, n*n*4)
	for i := range data {
		data[i] = byte(i * 7 / 5)
	}
	blk := Block{Origin: []int64{0, 0}, Shape: []int64{n, n}, Data: data}
	if _, err := g.WriteSlab(ctx, "a", nil, nextFrom([]Block{blk})); err != nil {
		b.Fatal(err)
	}
	c := serveGatewayB(b, g)
	b.SetBytes(n * n * 4)
	for b.Loop() {
		rs, err := c.ReadSlab(ctx, &gatewayv1.ReadSlabRequest{Path: "a"})
		if err != nil {
			b.Fatal(err)
		}
		for {
			if _, err := rs.Recv(); err != nil {
				break
			}
		}
	}
}
