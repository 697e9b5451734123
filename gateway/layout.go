package gateway

import (
	"context"
	"encoding/binary"
	"slices"

	"github.com/zarrgate/zarrgate/errs"
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

// indexEntry locates one unit in a shard; both fields all ones: absent.
type indexEntry struct{ offset, nbytes uint64 }

const emptyEntry = ^uint64(0)

func (e indexEntry) empty() bool { return e.offset == emptyEntry && e.nbytes == emptyEntry }

// indexCodec encodes and decodes a shard index.
type indexCodec interface {
	// size is the encoded index size in bytes.
	size() int64
	// atStart reports whether the index precedes the chunks.
	atStart() bool
	decode(b []byte) ([]indexEntry, error)
	encode(entries []indexEntry) ([]byte, error)
}

// legacyIndex is the sharding storage transformer's index: 16-byte
// little-endian (offset, nbytes) entries at the end, no checksum.
type legacyIndex struct{ n int }

func (l legacyIndex) size() int64   { return int64(l.n) * zarr.IndexEntrySize }
func (l legacyIndex) atStart() bool { return false }
func (l legacyIndex) decode(b []byte) ([]indexEntry, error) {
	if len(b) != int(l.size()) {
		return nil, errs.New(errs.DataLoss, "shard index has %d bytes, want %d", len(b), l.size())
	}
	out := make([]indexEntry, l.n)
	for i := range out {
		out[i] = indexEntry{binary.LittleEndian.Uint64(b[16*i:]), binary.LittleEndian.Uint64(b[16*i+8:])}
	}
	return out, nil
}
func (l legacyIndex) encode(entries []indexEntry) ([]byte, error) {
	b := make([]byte, 16*len(entries))
	for i, e := range entries {
		binary.LittleEndian.PutUint64(b[16*i:], e.offset)
		binary.LittleEndian.PutUint64(b[16*i+8:], e.nbytes)
	}
	return b, nil
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
}

type shardLayout struct {
	// shape of a shard in elements: the grid's chunk shape.
	shape []int64
	// per is the number of units per shard along each dimension.
	per   []int64
	n     int
	index indexCodec
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
