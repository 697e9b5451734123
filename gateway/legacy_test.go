package gateway

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/memory"
	"github.com/zarrgate/zarrgate/zarr"
)

// An array stored with the sharding storage transformer (v1 draft), built
// by hand from sharding-storage-transformer-v1.md: shards hold 2×2 chunks
// of 2×2 int16 elements under the shard's key, each chunk stored as it would
// be unsharded (here: raw bytes), then an index of 16-byte (offset, nbytes)
// little-endian entries in C order, all ones for an empty chunk, no
// checksum. The gateway reads it, and writes it back in the same layout.
func TestLegacyShardingTransformer(t *testing.T) {
	s := storesvc.Wrap(memory.New())
	meta := `{"zarr_format":3,"node_type":"array","shape":[4,6],"data_type":"int16",
	"chunk_grid":{"name":"regular","configuration":{"chunk_shape":[2,2]}},
	"chunk_key_encoding":{"name":"default","configuration":{"separator":"/"}},
	"fill_value":-1,"codecs":[{"name":"bytes","configuration":{"endian":"little"}}],
	"storage_transformers":[{"name":"sharding","type":"indexed","configuration":{"chunks_per_shard":[2,2]}}]}`
	if _, err := s.Set(ctx, "legacy/zarr.json", bytes.NewReader([]byte(meta)), storesvc.Condition{}); err != nil {
		t.Fatal(err)
	}
	// Element (i, j) holds 10*i + j. Shard (0, 0) holds chunks (0,0), (0,1),
	// (1,0), (1,1); shard (0, 1) holds chunks (0,2) and (1,2), its second
	// column of chunks lies outside the array, and chunk (1,2) is left
	// empty: it reads as the fill value.
	chunk := func(ci, cj int) []byte {
		var b []byte
		for i := 2 * ci; i < 2*ci+2; i++ {
			for j := 2 * cj; j < 2*cj+2; j++ {
				b = binary.LittleEndian.AppendUint16(b, uint16(10*i+j))
			}
		}
		return b
	}
	shard := func(chunks map[int][]byte) []byte {
		var body, index []byte
		for e := range 4 {
			c, ok := chunks[e]
			if !ok {
				index = binary.LittleEndian.AppendUint64(index, ^uint64(0))
				index = binary.LittleEndian.AppendUint64(index, ^uint64(0))
				continue
			}
			index = binary.LittleEndian.AppendUint64(index, uint64(len(body)))
			index = binary.LittleEndian.AppendUint64(index, uint64(len(c)))
			body = append(body, c...)
		}
		return append(body, index...)
	}
	// Chunks are stored in reverse order within the first shard: offsets,
	// not positions, locate them.
	s0 := shard(map[int][]byte{3: chunk(1, 1), 2: chunk(1, 0), 1: chunk(0, 1), 0: chunk(0, 0)})
	s1 := shard(map[int][]byte{0: chunk(0, 2)})
	s.Set(ctx, "legacy/c/0/0", bytes.NewReader(s0), storesvc.Condition{})
	s.Set(ctx, "legacy/c/0/1", bytes.NewReader(s1), storesvc.Condition{})

	g := New(s, codecsvc.NewLocal(), Config{})
	n, err := g.GetNode(ctx, "legacy")
	if err != nil || n.Array.LegacySharding == nil {
		t.Fatalf("node: %+v, %v", n, err)
	}
	want := func(i, j int) int16 {
		if i >= 2 && j >= 4 {
			return -1 // chunk (1, 2): empty
		}
		return int16(10*i + j)
	}
	check := func(what string) {
		data, _ := readAll(t, g, "legacy", nil, 2)
		for i := range 4 {
			for j := range 6 {
				if v := int16(binary.LittleEndian.Uint16(data[2*(6*i+j):])); v != want(i, j) {
					t.Fatalf("%s: element (%d,%d) = %d, want %d", what, i, j, v, want(i, j))
				}
			}
		}
	}
	check("read")
	// A strided read through both shards.
	got, _ := readAll(t, g, "legacy", []zarr.Range{{Start: 1, Stop: 4, Step: 2}, {Start: 0, Stop: 6, Step: 3}}, 2)
	if fmt.Sprint(got) != fmt.Sprint([]byte{10, 0, 13, 0, 30, 0, 33, 0}) {
		t.Fatalf("strided read = %v", got)
	}
	// Write one element into the empty chunk: the gateway rewrites the shard
	// in the same layout, keeping the other chunks.
	b := Block{Origin: []int64{0, 0}, Shape: []int64{1, 1}, Data: binary.LittleEndian.AppendUint16(nil, uint16(99))}
	if _, err := g.WriteSlab(ctx, "legacy", []zarr.Range{{Start: 3, Stop: 4, Step: 1}, {Start: 5, Stop: 6, Step: 1}}, nextFrom([]Block{b})); err != nil {
		t.Fatal(err)
	}
	raw, _, err := storesvc.ReadAll(ctx, s, "legacy/c/0/1")
	if err != nil || len(raw) != 2*8+64 {
		t.Fatalf("rewritten shard: %d bytes, %v", len(raw), err)
	}
	orig := want
	want = func(i, j int) int16 {
		if i == 3 && j == 5 {
			return 99
		}
		return orig(i, j)
	}
	check("after a write into the empty chunk")
}
