package codecsvc

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/internal/bufpool"
	"github.com/zarrgate/zarrgate/zarr"
)

// The local engine's encoded results are the caller's own
// (EncodesOwned): recycled (bufpool.Put) and encoded into again, each
// result shares memory with no other, and decodes to its chunk.
func TestLocalEncodesOwned(t *testing.T) {
	l := NewLocal()
	if !l.EncodesOwned() {
		t.Fatal("EncodesOwned is false")
	}
	var codecs []zarr.CodecSpec
	if err := json.Unmarshal([]byte(`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":3}}]`), &codecs); err != nil {
		t.Fatal(err)
	}
	spec := &codec.BatchSpec{Codecs: codecs, Shape: []int64{256, 256}, DataType: zarr.MustDataType("uint32")}
	in := make([]Chunk, 4)
	for i := range in {
		in[i].Data = make([]byte, 256*256*4)
		for k := range in[i].Data {
			in[i].Data[k] = byte(k*(i+3)/7 + i)
		}
	}
	for round := range 3 {
		enc, err := l.Encode(context.Background(), spec, in)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range enc {
			for j := range i {
				if bufpool.Overlaps(e, enc[j]) {
					t.Fatalf("round %d: results %d and %d share memory", round, j, i)
				}
			}
			if bufpool.Overlaps(e, in[i].Data) {
				t.Fatalf("round %d: result %d shares memory with its input", round, i)
			}
		}
		dec, err := l.Decode(context.Background(), spec, enc)
		if err != nil {
			t.Fatal(err)
		}
		for i, d := range dec {
			if !bytes.Equal(d.Data, in[i].Data) {
				t.Fatalf("round %d: chunk %d decodes to other bytes", round, i)
			}
			d.Release()
		}
		for _, e := range enc {
			bufpool.Put(e)
		}
	}
}
