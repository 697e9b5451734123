package gateway

import (
	"encoding/json"
	"testing"

	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/storesvc/file"
)

const (
	benchN     = 4096 // a benchN × benchN float32 array: 64 MiB
	plainBytes = `[{"name":"bytes","configuration":{"endian":"little"}}]`
	zstdBytes  = `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":3}}]`
)

// benchGateway returns an engine on a file store holding array "a": 64 MiB
// of float32 in 256×256 chunks with the given codecs, written in full.
func benchGateway(b *testing.B, codecs string) *Gateway {
	return benchGatewayConfig(b, codecs, Config{})
}

func benchGatewayConfig(b *testing.B, codecs string, cfg Config) *Gateway {
	fs, err := file.New(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	g := New(fs, codecsvc.NewLocal(), cfg)
	if _, err := g.CreateArray(ctx, "a", ArraySpec{Shape: []int64{benchN, benchN}, DataType: "float32", ChunkShape: []int64{256, 256}, Codecs: json.RawMessage(codecs)}); err != nil {
		b.Fatal(err)
	}
	data := make([]byte, benchN*benchN*4)
	for i := range data {
		data[i] = byte(i*7/5) | 1 // no chunk is all fill value
	}
	blk := Block{Origin: []int64{0, 0}, Shape: []int64{benchN, benchN}, Data: data}
	if _, err := g.WriteSlab(ctx, "a", nil, nextFrom([]Block{blk})); err != nil {
		b.Fatal(err)
	}
	return g
}

// BenchmarkEngineReadSlab reads the whole array through the engine on a
// file store, without gRPC: the cost of the gateway itself.
func BenchmarkEngineReadSlab(b *testing.B) {
	for name, codecs := range map[string]string{"uncompressed": plainBytes, "zstd": zstdBytes} {
		g := benchGateway(b, codecs)
		b.Run(name, func(b *testing.B) {
			b.SetBytes(benchN * benchN * 4)
			for b.Loop() {
				err := g.ReadSlab(ctx, "a", nil, func(SlabInfo) error { return nil }, func(Block) error { return nil })
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEngineWriteSlab writes the whole array through the engine on a
// file store, without gRPC: what a full WriteSlab costs the server (the
// file store's temporary files, fsyncs and renames included), with each
// durability, and the fsyncs it made per call.
//
//	go test -run '^$' -bench EngineWriteSlab -benchtime 3x -cpuprofile /tmp/w.prof ./gateway/
func BenchmarkEngineWriteSlab(b *testing.B) {
	data := make([]byte, benchN*benchN*4)
	for i := range data {
		data[i] = byte(i*7/5) | 1
	}
	for _, c := range []struct{ name, codecs string }{{"uncompressed", plainBytes}, {"zstd", zstdBytes}} {
		for _, d := range []file.Durability{file.DurabilityFsync, file.DurabilityNone} {
			b.Run(c.name+"/"+d.String(), func(b *testing.B) {
				fs, err := file.New(b.TempDir())
				if err != nil {
					b.Fatal(err)
				}
				fs.SetDurability(d)
				g := New(fs, codecsvc.NewLocal(), Config{})
				if _, err := g.CreateArray(ctx, "a", ArraySpec{Shape: []int64{benchN, benchN}, DataType: "float32", ChunkShape: []int64{256, 256}, Codecs: json.RawMessage(c.codecs)}); err != nil {
					b.Fatal(err)
				}
				f0, d0 := fs.Syncs()
				b.SetBytes(benchN * benchN * 4)
				for b.Loop() {
					blk := Block{Origin: []int64{0, 0}, Shape: []int64{benchN, benchN}, Data: data}
					if _, err := g.WriteSlab(ctx, "a", nil, nextFrom([]Block{blk})); err != nil {
						b.Fatal(err)
					}
				}
				f1, d1 := fs.Syncs()
				b.ReportMetric(float64(f1-f0)/float64(b.N), "file-fsyncs/op")
				b.ReportMetric(float64(d1-d0)/float64(b.N), "dir-fsyncs/op")
			})
		}
	}
}
