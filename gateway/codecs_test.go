package gateway

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/storesvc/memory"
	"github.com/zarrgate/zarrgate/zarr"
)

// lendingCodecs is testCodecs lending every chunk it decodes (as
// codecsvc.Local does with pool buffers), counting what is handed back.
type lendingCodecs struct {
	testCodecs
	mu               sync.Mutex
	lent, released   int
	releasedTwice    bool
	releasedByNumber map[int]bool
}

func (l *lendingCodecs) Decode(ctx context.Context, spec *ChunkSpec, encoded [][]byte) ([]Chunk, error) {
	out, err := l.testCodecs.Decode(ctx, spec, encoded)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, c := range out {
		n := l.lent
		l.lent++
		out[i] = codec.Lend(c.Data, c.Offsets, c.Data, func([]byte) {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.releasedTwice = l.releasedTwice || l.releasedByNumber[n]
			l.releasedByNumber[n] = true
			l.released++
		})
	}
	return out, nil
}

// TestLentChunksReleased: the gateway hands back every chunk the engine
// lends it, once, when it is done with it: decoded units copied into a
// read's blocks, and units merged by partial writes.
func TestLentChunksReleased(t *testing.T) {
	for _, shards := range [][]int64{nil, {8, 8}} {
		t.Run(fmt.Sprint("shards=", shards), func(t *testing.T) {
			e := &lendingCodecs{releasedByNumber: map[int]bool{}}
			g := New(memory.New(), e, Config{})
			if _, err := g.CreateArray(ctx, "a", ArraySpec{Shape: []int64{16, 16}, DataType: "uint16", ChunkShape: []int64{4, 4}, ShardShape: shards,
				Codecs: json.RawMessage(`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}]`)}); err != nil {
				t.Fatal(err)
			}
			data := make([]byte, 2*16*16)
			for i := range 16 * 16 {
				binary.LittleEndian.PutUint16(data[2*i:], uint16(i))
			}
			if _, err := g.WriteSlab(ctx, "a", nil, nextFrom([]Block{{Origin: []int64{0, 0}, Shape: []int64{16, 16}, Data: data}})); err != nil {
				t.Fatal(err)
			}
			// Partial writes: every touched unit is decoded and merged.
			sel := []zarr.Range{{Start: 1, Stop: 15, Step: 3}, {Start: 2, Stop: 16, Step: 5}}
			if _, err := g.WriteSlab(ctx, "a", sel, nextFrom([]Block{{Origin: []int64{0, 0}, Shape: []int64{5, 3}, Data: make([]byte, 2*5*3)}})); err != nil {
				t.Fatal(err)
			}
			// Strided reads: no unit is selected whole, so each is copied
			// into the read's blocks and handed back.
			got, _ := readAll(t, g, "a", []zarr.Range{{Start: 0, Stop: 16, Step: 2}, {Start: 1, Stop: 16, Step: 2}}, 2)
			for i := range 8 * 8 {
				r, c := 2*(i/8), 1+2*(i%8)
				want := uint16(16*r + c)
				if (r-1)%3 == 0 && r < 15 && (c-2)%5 == 0 && c >= 2 {
					want = 0
				}
				if v := binary.LittleEndian.Uint16(got[2*i:]); v != want {
					t.Fatalf("element (%d, %d) = %d, want %d", r, c, v, want)
				}
			}
			e.mu.Lock()
			defer e.mu.Unlock()
			if e.lent == 0 || e.released != e.lent || e.releasedTwice {
				t.Errorf("lent %d chunks, released %d (twice: %v)", e.lent, e.released, e.releasedTwice)
			}
		})
	}
}
