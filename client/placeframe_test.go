package client

import (
	"bytes"
	"encoding/binary"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"github.com/zarrgate/zarrgate/internal/bulk"
)

// TestBlockPrefix parses frames as the gateway writes them (bulk.Writer:
// small data among the small fields, large data by reference after them):
// the block's origin, shape and data are found, data last, for every rank
// and size; headers, blocks with offsets (strings), and frames cut short
// are not taken for such a block.
func TestBlockPrefix(t *testing.T) {
	frame := func(m proto.Message) []byte {
		var buf bytes.Buffer
		if err := bulk.NewWriter(&buf).Write(m, nil); err != nil {
			t.Fatal(err)
		}
		b := buf.Bytes()
		if n := binary.LittleEndian.Uint64(b); n != uint64(len(b)-8) {
			t.Fatalf("frame length %d, %d bytes", n, len(b)-8)
		}
		return b[8:]
	}
	block := func(b *gatewayv1.Block) proto.Message {
		return &gatewayv1.ReadSlabResponse{Message: &gatewayv1.ReadSlabResponse_Block{Block: b}}
	}
	for _, tc := range []struct {
		origin, shape []uint64
		size          int
	}{
		{nil, nil, 4},
		{[]uint64{0}, []uint64{0}, 0},
		{[]uint64{3}, []uint64{5}, 20},
		{[]uint64{0, 256}, []uint64{256, 256}, 256 * 256 * 4},         // by reference
		{[]uint64{1 << 40, 7, 300}, []uint64{2, 3, 4}, 2 * 3 * 4 * 8}, // long varints
		{[]uint64{0, 0}, []uint64{100, 80}, 100 * 80 * 4},             // 32000 bytes: among the small fields
	} {
		data := make([]byte, tc.size)
		for i := range data {
			data[i] = byte(i)
		}
		f := frame(block(&gatewayv1.Block{Origin: tc.origin, Shape: tc.shape, Data: data}))
		origin, shape, at, n, more, ok := blockPrefix(f, len(f))
		if !ok || more || n != tc.size || at+n != len(f) || !bytes.Equal(f[at:], data) {
			t.Fatalf("%v %v: blockPrefix ok %v more %v, data at %d, %d bytes of %d", tc.origin, tc.shape, ok, more, at, n, len(f))
		}
		want := func(v []uint64) []int64 {
			out := []int64{}
			for _, x := range v {
				out = append(out, int64(x))
			}
			return out
		}
		if !slices.Equal(origin, want(tc.origin)) || !slices.Equal(shape, want(tc.shape)) {
			t.Fatalf("origin %v shape %v, want %v %v", origin, shape, tc.origin, tc.shape)
		}
		// Cut before the data: more, unless nothing of the block is left.
		for k := range at {
			if _, _, _, _, more, ok := blockPrefix(f[:k], len(f)); ok || !more {
				t.Fatalf("%v: cut at %d of a %d-byte prefix: ok %v more %v", tc.shape, k, at, ok, more)
			}
		}
		// A frame that does not end with the data.
		if _, _, _, _, _, ok := blockPrefix(f, len(f)+1); ok {
			t.Fatalf("%v: taken with a byte more in the frame", tc.shape)
		}
	}
	for name, m := range map[string]proto.Message{
		"header":         &gatewayv1.ReadSlabResponse{Message: &gatewayv1.ReadSlabResponse_Header{Header: &gatewayv1.SlabHeader{Shape: []uint64{4}}}},
		"strings":        block(&gatewayv1.Block{Origin: []uint64{0}, Shape: []uint64{2}, Data: []byte("abcd"), Offsets: []uint64{0, 2, 4}}),
		"strings, large": block(&gatewayv1.Block{Origin: []uint64{0}, Shape: []uint64{2}, Data: make([]byte, 64<<10), Offsets: []uint64{0, 2, 64 << 10}}),
	} {
		f := frame(m)
		if _, _, _, _, _, ok := blockPrefix(f, len(f)); ok {
			t.Errorf("%s: taken for a block with its data last", name)
		}
	}
}
