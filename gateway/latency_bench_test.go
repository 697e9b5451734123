package gateway

import (
	"encoding/json"
	"math/rand/v2"
	"testing"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/storesvc/file"
	"github.com/zarrgate/zarrgate/zarr"
)

// BenchmarkSmallRead reads random 64×64 boxes of a 4096×4096 float32 array
// in 256×256 chunks (up to four chunks each): the latency of small reads,
// in the engine alone and through ArrayService on loopback.
func BenchmarkSmallRead(b *testing.B) {
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
		data[i] = byte(i*7/5) | 1
	}
	if _, err := g.WriteSlab(ctx, "a", nil, nextFrom([]Block{{Origin: []int64{0, 0}, Shape: []int64{n, n}, Data: data}})); err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	box := func() (int64, int64) { return r.Int64N(n - 64), r.Int64N(n - 64) }
	b.Run("engine", func(b *testing.B) {
		for b.Loop() {
			y, x := box()
			err := g.ReadSlab(ctx, "a", []zarr.Range{{Start: y, Stop: y + 64, Step: 1}, {Start: x, Stop: x + 64, Step: 1}}, func(SlabInfo) error { return nil }, func(Block) error { return nil })
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	c := serveGatewayB(b, g)
	b.Run("rpc", func(b *testing.B) {
		for b.Loop() {
			y, x := box()
			rs, err := c.ReadSlab(ctx, &gatewayv1.ReadSlabRequest{Path: "a", Selection: []*gatewayv1.Slice{{Start: uint64(y), Stop: uint64(y + 64)}, {Start: uint64(x), Stop: uint64(x + 64)}}})
			if err != nil {
				b.Fatal(err)
			}
			for {
				if _, err := rs.Recv(); err != nil {
					break
				}
			}
		}
	})
}
