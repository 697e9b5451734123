package zarr

import (
	"encoding/json"
	"strconv"
	"strings"
)

// Array is the metadata of one array, whichever format it was read from.
// v2 and NCZarr metadata are normalised into it: order "F" becomes a leading
// transpose codec, filters and compressor a codec chain, dimension_separator
// a "v2" chunk key encoding, NCZarr dimension references and xarray's
// _ARRAY_DIMENSIONS dimension names, a netCDF scalar (stored as shape [1]) a
// 0-d array.
type Array struct {
	// ZarrFormat is 2 or 3: the format the array was read from and is
	// written back in.
	ZarrFormat int
	Shape      []int64
	DataType   DataType
	// ChunkShape is the regular grid's chunk shape, one entry per dimension.
	ChunkShape       []int64
	ChunkKeyEncoding ChunkKeyEncoding
	// FillValue is one element in the decoded-chunk layout (little-endian,
	// DataType.Size bytes) or, for string and bytes, the value's bytes.
	// Empty for a fixed-size type means zero. FillNull means the document
	// has fill_value null (v2: no fill value).
	FillValue []byte
	FillNull  bool
	// Codecs is the normalised codec chain (see CodecSpec).
	Codecs []CodecSpec
	// LegacySharding is set when the array uses the sharding storage
	// transformer (sharding-storage-transformer-v1).
	LegacySharding *LegacySharding
	// DimensionNames is empty or has one entry per dimension; "" is an
	// unnamed dimension (v3 null).
	DimensionNames []string
	// Attributes are the user attributes, a JSON object kept as written;
	// NCZarr and xarray reserved attributes of v2 documents are taken out
	// into the fields above. nil means none.
	Attributes json.RawMessage
	// NCZarr holds netCDF information; nil for pure Zarr.
	NCZarr *NCZarrArray
	// Extensions are unknown top-level members declared
	// "must_understand": false, kept to be written back.
	Extensions map[string]json.RawMessage
	// StorageTransformers are the v3 storage_transformers as written
	// (including the legacy sharding one).
	StorageTransformers []json.RawMessage
	// dataTypeJSON is the v3 data_type as written, when it is an alias
	// (e.g. "variable_length_bytes") that must be written back unchanged.
	dataTypeJSON json.RawMessage
}

// Group is the metadata of one group.
type Group struct {
	ZarrFormat int
	// Attributes are the user attributes, a JSON object kept as written
	// (NCZarr reserved attributes of v2 documents taken out). nil: none.
	Attributes json.RawMessage
	// Dimensions are the netCDF shared dimensions defined in this group
	// (NCZarr); empty for pure Zarr.
	Dimensions []Dimension
	// NCZarr holds the rest of the netCDF group information; nil for pure
	// Zarr.
	NCZarr *NCZarrGroup
	// Consolidated is the consolidated metadata of the hierarchy below
	// this group, by path relative to it ("a", "a/b"); nil when the
	// document has none.
	Consolidated map[string]Node
	// Extensions are unknown top-level members declared
	// "must_understand": false, kept to be written back.
	Extensions map[string]json.RawMessage
}

// Node is an array or a group: exactly one of the two is set.
type Node struct {
	Array *Array
	Group *Group
}

// Dimension is a netCDF shared dimension.
type Dimension struct {
	Name      string
	Size      int64
	Unlimited bool
}

// LegacySharding describes the sharding storage transformer (v1 draft):
// a shard holds ChunksPerShard chunks per dimension under the key of the
// shard's grid position (chunk position floor-divided by ChunksPerShard,
// same chunk key encoding); the shard ends with an index of 16-byte entries
// (little-endian uint64 offset, nbytes) in C order over all ChunksPerShard
// positions, with no checksum; offset = nbytes = 2^64-1 marks an empty
// chunk. Chunks in a shard are stored exactly as they would be unsharded.
type LegacySharding struct {
	ChunksPerShard []int64
}

// IndexEntrySize is the size of one legacy shard index entry.
const IndexEntrySize = 16

// IndexSize is the size in bytes of the index at the end of every shard.
func (s *LegacySharding) IndexSize() int64 {
	n := int64(IndexEntrySize)
	for _, c := range s.ChunksPerShard {
		n *= c
	}
	return n
}

// Locate returns the shard holding a chunk and the chunk's entry number in
// that shard's index.
func (s *LegacySharding) Locate(chunk []int64) (shard []int64, entry int64) {
	shard = make([]int64, len(chunk))
	for i, c := range chunk {
		shard[i] = c / s.ChunksPerShard[i]
		entry = entry*s.ChunksPerShard[i] + c%s.ChunksPerShard[i]
	}
	return shard, entry
}

// ChunkKeyEncoding maps chunk grid coordinates to store keys.
type ChunkKeyEncoding struct {
	// Name is "default" (keys "c/1/2") or "v2" (keys "1.2").
	Name string
	// Separator is '/' or '.'.
	Separator byte
}

// DefaultKeyEncoding is the v3 "default" encoding with separator "/".
var DefaultKeyEncoding = ChunkKeyEncoding{Name: "default", Separator: '/'}

// V2KeyEncoding is the v2 encoding with separator ".".
var V2KeyEncoding = ChunkKeyEncoding{Name: "v2", Separator: '.'}

// Key returns the store key of the chunk at coords, below prefix (the
// array's path; "" for the root, a trailing "/" optional). 0-d arrays have
// one chunk, with key "c" (default) or "0" (v2).
func (e ChunkKeyEncoding) Key(prefix string, coords []int64) string {
	var b strings.Builder
	b.Grow(len(prefix) + 2 + 8*len(coords))
	b.WriteString(prefix)
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		b.WriteByte('/')
	}
	sep := e.Separator
	if sep == 0 {
		sep = '/'
		if e.Name == "v2" {
			sep = '.'
		}
	}
	var num [20]byte
	if e.Name == "v2" {
		if len(coords) == 0 {
			b.WriteByte('0')
		}
		for i, c := range coords {
			if i > 0 {
				b.WriteByte(sep)
			}
			b.Write(strconv.AppendInt(num[:0], c, 10))
		}
		return b.String()
	}
	b.WriteByte('c')
	for _, c := range coords {
		b.WriteByte(sep)
		b.Write(strconv.AppendInt(num[:0], c, 10))
	}
	return b.String()
}

// GridShape is the number of chunks along each dimension of a regular grid:
// ceil(shape/chunk), with full-size edge chunks. A 0-d array has one chunk
// (an empty grid shape, whose product is 1).
func GridShape(shape, chunks []int64) []int64 {
	g := make([]int64, len(shape))
	for i := range shape {
		if i < len(chunks) && chunks[i] > 0 {
			g[i] = (shape[i] + chunks[i] - 1) / chunks[i]
		}
	}
	return g
}

// GridShape is the number of chunks along each dimension.
func (a *Array) GridShape() []int64 { return GridShape(a.Shape, a.ChunkShape) }

// NumChunks is the total number of chunks in the grid (1 for a 0-d array).
func (a *Array) NumChunks() int64 { return SaturatingProduct(a.GridShape()) }

// ChunkKey is the store key, below the array's path prefix, of the chunk
// (or, with LegacySharding, of the shard) at the given grid coordinates.
func (a *Array) ChunkKey(prefix string, coords []int64) string {
	return a.ChunkKeyEncoding.Key(prefix, coords)
}

// MaxDims is the most dimensions an array may have, as in NumPy 2: every
// per-dimension cost of a request (projections, box copies, block origins)
// is then bounded however many dimensions a client sends.
const MaxDims = 64

// validate checks the cross-field rules every Array must satisfy.
func (a *Array) validate() error {
	if len(a.Shape) > MaxDims {
		return newError(ErrInvalid, "shape: %d dimensions, more than the %d supported (NumPy's limit)", len(a.Shape), MaxDims)
	}
	if len(a.ChunkShape) != len(a.Shape) {
		return newError(ErrInvalid, "chunk_shape: has %d dimensions, shape has %d", len(a.ChunkShape), len(a.Shape))
	}
	for i, c := range a.ChunkShape {
		if c <= 0 {
			return newError(ErrInvalid, "chunk_shape[%d]: must be positive", i)
		}
	}
	// Sizes everything else is computed from must not overflow: the
	// element count, and a chunk's elements and bytes.
	if _, ok := ProductChecked(a.Shape); !ok {
		return newError(ErrInvalid, "shape %v: more than 2^63 elements", a.Shape)
	}
	if _, err := Bytes("chunk_shape", a.ChunkShape, max(a.DataType.Size, 1)); err != nil {
		return err
	}
	if len(a.DimensionNames) != 0 && len(a.DimensionNames) != len(a.Shape) {
		return newError(ErrInvalid, "dimension_names: has %d entries, shape has %d dimensions", len(a.DimensionNames), len(a.Shape))
	}
	if a.LegacySharding != nil && len(a.LegacySharding.ChunksPerShard) != len(a.Shape) {
		return newError(ErrInvalid, "storage_transformers: chunks_per_shard has %d entries, shape has %d dimensions", len(a.LegacySharding.ChunksPerShard), len(a.Shape))
	}
	if a.ChunkKeyEncoding.Separator != '/' && a.ChunkKeyEncoding.Separator != '.' {
		return newError(ErrInvalid, "chunk_key_encoding: separator must be \"/\" or \".\"")
	}
	if len(a.Codecs) == 0 {
		return newError(ErrInvalid, "codecs: must not be empty")
	}
	return validateCodecs(a.Codecs, len(a.Shape), a.DataType, "codecs")
}
