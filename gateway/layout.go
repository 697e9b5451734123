package gateway

import (
	"bytes"
	"context"
	"slices"

	"github.com/zarrgate/zarrgate/codec"
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
	// slot takes a slot of the share of the call ctx carries (fair.go)
	// for a batch of work on this process's processors, and returns the
	// function that gives it back.
	slot(ctx context.Context) (func(), error)
	// inProcess says the codec work runs on this process's processors.
	inProcess() bool
	// ownsEncodes says encode's results are the caller's own, to recycle
	// once stored (codecsvc.Local.EncodesOwned).
	ownsEncodes() bool
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
	// fill streams the fill value.
	fill *fill
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
	// index encodes and decodes the shard index (codec.ShardLayout:
	// location, size, index codecs).
	index codec.ShardLayout
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

// unitBytes is a decoded unit's size: exact for fixed-size elements, an
// estimate (offsets and short values) for variable-length ones, whose
// decoders bound the rest by their own per-chunk limit.
func (l *layout) unitBytes() int64 {
	if l.elem == 0 {
		return l.unitElems() * varElemBytes
	}
	return l.unitElems() * int64(l.elem)
}

// readCost is the memory reading one unsharded chunk takes at its peak:
// the stored bytes and the decoded unit, or for chunks stored raw just
// the one buffer (decoding them is a no-op).
func (l *layout) readCost() int64 {
	if l.raw {
		return l.unitBytes()
	}
	return 2 * l.unitBytes()
}

// unitElems is the number of elements in a unit.
func (l *layout) unitElems() int64 { return product(l.unit) }

func product(s []int64) int64 {
	n := int64(1)
	for _, x := range s {
		n *= x
	}
	return n
}

// fillPatternBytes bounds the memory an array's fill value takes: reads of
// regions never written are streamed as blocks over one shared pattern of
// at most this size, however large the chunks.
const fillPatternBytes = 1 << 20

// fill is an array's fill value, ready to be streamed: never a whole unit
// (a chunk of 2^36 elements must not cost 2^36 bytes to read as fill).
type fill struct {
	elem  int    // element size; 0 for variable length
	value []byte // one element, little-endian, or a variable-length value
	// pattern is value repeated: whole elements, at most fillPatternBytes
	// (and at least one element). Read-only, shared by every block.
	pattern []byte
	// varOffsets are the offsets of pattern's elements, for variable
	// length: value k ends at varOffsets[k+1].
	varOffsets []int64
}

func newFill(a *zarr.Array, unit []int64) *fill {
	n := zarr.SaturatingProduct(unit)
	f := &fill{elem: a.DataType.Size, value: a.FillValue}
	if a.DataType.VariableLength() {
		k := min(n, max(1, fillPatternBytes/int64(max(len(a.FillValue), 8))))
		f.pattern = bytes.Repeat(a.FillValue, int(k))
		f.varOffsets = make([]int64, k+1)
		for i := range k {
			f.varOffsets[i+1] = f.varOffsets[i] + int64(len(a.FillValue))
		}
		return f
	}
	if len(f.value) != f.elem {
		f.value = make([]byte, f.elem)
	}
	k := min(n, max(1, fillPatternBytes/int64(f.elem)))
	f.pattern = bytes.Repeat(f.value, int(k))
	return f
}

// zero reports whether the fill value is all zero bytes.
func (f *fill) zero() bool { return !slices.ContainsFunc(f.value, func(b byte) bool { return b != 0 }) }

// fillBuf writes the fill value over every element of buf (fixed size).
func (f *fill) fillBuf(buf []byte) {
	if f.zero() {
		clear(buf)
		return
	}
	for off := 0; off < len(buf); off += len(f.pattern) {
		copy(buf[off:], f.pattern)
	}
}

// newUnit returns a unit buffer of n bytes holding the fill value.
func (f *fill) newUnit(n int64) []byte {
	buf := make([]byte, n)
	if !f.zero() {
		f.fillBuf(buf)
	}
	return buf
}

// isFill reports whether every element of the decoded unit c of n
// elements is the fill value.
func (f *fill) isFill(c chunk, n int64) bool {
	if f.elem == 0 {
		if int64(len(c.offsets)) != n+1 {
			return false
		}
		v := int64(len(f.value))
		for i := range n {
			if c.offsets[i+1]-c.offsets[i] != v || !bytes.Equal(c.data[c.offsets[i]:c.offsets[i+1]], f.value) {
				return false
			}
		}
		return true
	}
	if int64(len(c.data)) != n*int64(f.elem) {
		return false
	}
	for off := 0; off < len(c.data); off += len(f.pattern) {
		end := min(off+len(f.pattern), len(c.data))
		if !bytes.Equal(c.data[off:end], f.pattern[:end-off]) {
			return false
		}
	}
	return true
}

// blocks emits the box at origin with shape (slab coordinates) as fill:
// blocks over the shared pattern, each at most its size, cut along the
// outer dimensions (and the innermost one, if a row is longer), so that a
// region of any size costs no memory of its own.
func (f *fill) blocks(origin, shape []int64, out func(Block) error) error {
	nd := len(shape)
	for _, s := range shape {
		if s == 0 {
			return nil
		}
	}
	elem := int64(f.elem)
	capElems := int64(len(f.pattern)) / max(elem, 1)
	if f.elem == 0 {
		capElems = int64(len(f.varOffsets) - 1)
	}
	// The split dimension d: the first whose inner slices fit the pattern.
	d, inner := 0, int64(1)
	for d = nd - 1; d >= 0; d-- {
		next, ok := zarr.MulChecked(inner, shape[d])
		if !ok || next > capElems {
			break
		}
		inner = next
	}
	if d < 0 { // the whole box fits
		return out(f.block(clone(origin), clone(shape), zarr.SaturatingProduct(shape)))
	}
	k := max(1, capElems/inner) // slices along d per block
	idx := make([]int64, d)     // position over the dimensions before d
	for {
		for j := int64(0); j < shape[d]; j += k {
			o, s := clone(origin), clone(shape)
			for i := range d {
				o[i] += idx[i]
				s[i] = 1
			}
			o[d] += j
			s[d] = min(k, shape[d]-j)
			if err := out(f.block(o, s, s[d]*inner)); err != nil {
				return err
			}
		}
		i := d - 1
		for ; i >= 0; i-- {
			idx[i]++
			if idx[i] < shape[i] {
				break
			}
			idx[i] = 0
		}
		if i < 0 {
			return nil
		}
	}
}

// block is a fill block of n elements, at most the pattern's.
func (f *fill) block(origin, shape []int64, n int64) Block {
	b := Block{Origin: origin, Shape: shape}
	if f.elem == 0 {
		b.Data, b.Offsets = f.pattern[:f.varOffsets[n]], f.varOffsets[:n+1]
	} else {
		b.Data = f.pattern[:n*int64(f.elem)]
	}
	return b
}

// convert converts between integer slices (shapes are int in
// codec.ShardingConfig, int64 here).
func convert[T, F ~int | ~int64](s []F) []T {
	out := make([]T, len(s))
	for i, x := range s {
		out[i] = T(x)
	}
	return out
}
