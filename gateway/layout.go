package gateway

import (
	"context"
	"slices"

	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/zarr"
)

// chunk is a decoded unit: fixed-size elements in C order, little-endian,
// or for variable-length types the concatenated element bytes with n+1
// offsets.
type chunk struct {
	data    []byte
	offsets []int64
	// release, if set, hands data's buffer back to bufpool: called by
	// whoever holds the chunk's data last (see gather).
	release func()
}

// unitCodec encodes and decodes the units of one array: its chunks, or the
// inner chunks of its shards. Implementations batch the work.
type unitCodec interface {
	decode(ctx context.Context, encoded [][]byte) ([]chunk, error)
	encode(ctx context.Context, chunks []chunk) ([][]byte, error)
}

// layout is how an array's elements map to stored objects.
type layout struct {
	a      *zarr.Array
	prefix string
	// elem is the element size; 0 for variable-length types.
	elem int
	// unit is the shape of a decode unit: a chunk, or a shard's inner chunk.
	unit  []int64
	codec unitCodec
	// fill is a decoded unit of fill values, shared read-only.
	fill chunk
	// shard describes shards; nil when every unit is its own object.
	shard *shardLayout
	// raw: unsharded chunks of fixed-size elements stored as they are
	// decoded (the bytes codec alone, little-endian): a whole chunk's stored
	// bytes are its block.
	raw bool
}

type shardLayout struct {
	// shape of a shard in elements: the grid's chunk shape.
	shape []int64
	// per is the number of units per shard along each dimension.
	per []int64
	n   int
	// index encodes and decodes the shard index (codecsvc's shard layout:
	// location, size, index codecs).
	index *codecsvc.Shard
}

// objectShape is the shape of the grid's stored objects: shards or chunks.
func (l *layout) objectShape() []int64 {
	if l.shard != nil {
		return l.shard.shape
	}
	return l.unit
}

// key is the store key of the object at grid coordinates.
func (l *layout) key(coords []int64) string { return l.a.ChunkKey(l.prefix, coords) }

// unitElems is the number of elements in a unit.
func (l *layout) unitElems() int64 { return product(l.unit) }

func product(s []int64) int64 {
	n := int64(1)
	for _, x := range s {
		n *= x
	}
	return n
}

// fillUnit returns a unit holding the fill value everywhere.
func fillUnit(a *zarr.Array, unit []int64) chunk {
	n := product(unit)
	if a.DataType.VariableLength() {
		offs := make([]int64, n+1)
		data := make([]byte, 0, int64(len(a.FillValue))*n)
		for i := int64(1); i <= n; i++ {
			data = append(data, a.FillValue...)
			offs[i] = int64(len(data))
		}
		return chunk{data: data, offsets: offs}
	}
	data := make([]byte, n*int64(a.DataType.Size))
	if len(a.FillValue) == a.DataType.Size && slices.ContainsFunc(a.FillValue, func(b byte) bool { return b != 0 }) {
		for i := 0; i < len(data); i += len(a.FillValue) {
			copy(data[i:], a.FillValue)
		}
	}
	return chunk{data: data}
}

// convert converts between integer slices (shapes are int in codecsvc,
// int64 here).
func convert[T, F ~int | ~int64](s []F) []T {
	out := make([]T, len(s))
	for i, x := range s {
		out[i] = T(x)
	}
	return out
}
