package codecsvc

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/zarr"
)

func init() { Register("sharding_indexed", newSharding) }

// DefaultIndexCodecs is the index chain when a configuration names none.
var DefaultIndexCodecs = []zarr.CodecSpec{
	{Name: "bytes", Configuration: json.RawMessage(`{"endian":"little"}`)},
	{Name: "crc32c"},
}

// indexSizeCodecs are the codecs an index chain may use: those whose
// output size depends only on their input size, so that a reader can
// compute the index size before reading it (the specification forbids
// variable-sized index codecs).
var indexSizeCodecs = map[string]bool{"bytes": true, "crc32c": true, "transpose": true}

// Shard is the layout of the shards of one array: how inner chunks and
// the index are placed in a shard and how each is encoded. It serves the
// whole-shard codec (sharding_indexed) and, as a codec.ShardLayout, the
// gateway's partial reads and writes, which fetch the index
// (codec.IndexRange, DecodeIndex), then only the inner chunks they need
// (codec.IndexEntry.Range, DecodeInner), and rewrite a shard from a mix of
// untouched encoded inner chunks and new ones (codec.Split, EncodeInner,
// codec.Assemble). It also describes the legacy sharding storage
// transformer (NewLegacyShard). A Shard is immutable and safe for
// concurrent use.
type Shard struct {
	spec       ChunkSpec // the shard's decoded representation
	inner, per []int
	n          int
	innerChain *Chain
	indexChain *Chain // nil: the legacy raw index
	indexSize  int64
	atStart    bool
	fill       Chunk // one inner chunk of fill values, read-only
}

var _ codec.ShardLayout = (*Shard)(nil)

// NewShard builds the shard layout of a sharding_indexed configuration for
// shards of the representation spec.
func NewShard(config json.RawMessage, spec ChunkSpec) (*Shard, error) {
	return NewShardLimits(config, spec, DefaultLimits())
}

// NewShardLimits is NewShard with its inner chunks and its index checked
// against l (CheckChunkSize) and decoded under it. The shard as a whole may
// be larger: it is read and written an inner chunk at a time (a chain
// that decodes it whole checks it as one chunk).
func NewShardLimits(config json.RawMessage, spec ChunkSpec, l codec.Limits) (*Shard, error) {
	var c codec.ShardingConfig
	if err := configOf(config, &c); err != nil {
		return nil, err
	}
	return newShard(c, spec, withDefaults(l))
}

// NewLegacyShard builds the layout of the sharding storage transformer
// (v1 draft): chunks of the representation chunk, each encoded with
// codecs, chunksPerShard of them per dimension in a shard, and an index of
// raw 16-byte little-endian entries at the end, without checksum.
func NewLegacyShard(codecs []zarr.CodecSpec, chunk ChunkSpec, chunksPerShard []int) (*Shard, error) {
	return NewLegacyShardLimits(codecs, chunk, chunksPerShard, DefaultLimits())
}

// NewLegacyShardLimits is NewLegacyShard under the limits l.
func NewLegacyShardLimits(codecs []zarr.CodecSpec, chunk ChunkSpec, chunksPerShard []int, l codec.Limits) (*Shard, error) {
	l = withDefaults(l)
	if len(chunksPerShard) != len(chunk.Shape) {
		return nil, errs.New(errs.InvalidArgument, "chunks_per_shard %v: has %d dimensions, the chunk %d", chunksPerShard, len(chunksPerShard), len(chunk.Shape))
	}
	spec := chunk
	spec.Shape = make([]int, len(chunk.Shape))
	for d, p := range chunksPerShard {
		if p <= 0 {
			return nil, errs.New(errs.InvalidArgument, "chunks_per_shard %v must be positive", chunksPerShard)
		}
		if chunk.Shape[d] < 0 || chunk.Shape[d] > 0 && p > math.MaxInt/chunk.Shape[d] {
			return nil, errs.New(errs.InvalidArgument, "chunks_per_shard %v of chunks %v: the shard's shape overflows", chunksPerShard, chunk.Shape)
		}
		spec.Shape[d] = chunk.Shape[d] * p
	}
	if _, err := zarr.Bytes("shard", convertInt64(spec.Shape), max(spec.DataType.Size, 1)); err != nil {
		return nil, err
	}
	s, err := newShardLayout(chunk.Shape, spec)
	if err != nil {
		return nil, err
	}
	if err := checkIndexSize(s.n, l); err != nil {
		return nil, err
	}
	if s.innerChain, err = NewChainLimits(codecs, chunk, l); err != nil {
		return nil, err
	}
	s.fill = FillChunk(chunk)
	s.indexSize = 16 * int64(s.n)
	return s, nil
}

func convertInt64(s []int) []int64 {
	out := make([]int64, len(s))
	for i, x := range s {
		out[i] = int64(x)
	}
	return out
}

func newShardLayout(inner []int, spec ChunkSpec) (*Shard, error) {
	nd := len(spec.Shape)
	if len(inner) != nd {
		return nil, errs.New(errs.InvalidArgument, "configuration.chunk_shape %v: has %d dimensions, the shard %d", inner, len(inner), nd)
	}
	spec.Shape = slices.Clone(spec.Shape)
	s := &Shard{spec: spec, inner: slices.Clone(inner), per: make([]int, nd), n: 1}
	for d := range nd {
		if inner[d] <= 0 || spec.Shape[d]%inner[d] != 0 {
			return nil, errs.New(errs.InvalidArgument, "configuration.chunk_shape %v must divide the shard shape %v", inner, spec.Shape)
		}
		s.per[d] = spec.Shape[d] / inner[d]
		s.n *= s.per[d]
	}
	return s, nil
}

// checkIndexSize refuses shards of so many inner chunks that their index
// (16 bytes an entry) is over the per-chunk limit, before it is allocated.
func checkIndexSize(n int, l codec.Limits) error {
	if int64(n) > l.MaxChunkBytes/16 {
		return errs.New(errs.ResourceExhausted, "shard of %d inner chunks: its index of %s is more than the per-chunk limit of %s (--max-chunk-bytes)",
			n, sizeOf(16*int64(n)), sizeOf(l.MaxChunkBytes))
	}
	return nil
}

func newShard(c codec.ShardingConfig, spec ChunkSpec, l codec.Limits) (*Shard, error) {
	if _, err := zarr.Bytes("shard", convertInt64(spec.Shape), max(spec.DataType.Size, 1)); err != nil {
		return nil, err
	}
	s, err := newShardLayout(c.ChunkShape, spec)
	if err != nil {
		return nil, err
	}
	if err := checkIndexSize(s.n, l); err != nil {
		return nil, err
	}
	switch c.IndexLocation {
	case "", "end":
	case "start":
		s.atStart = true
	default:
		return nil, errs.New(errs.InvalidArgument, "configuration.index_location %q: want \"start\" or \"end\"", c.IndexLocation)
	}
	innerSpec := ChunkSpec{Shape: s.inner, DataType: spec.DataType, FillValue: spec.FillValue}
	if s.innerChain, err = NewChainLimits(c.Codecs, innerSpec, l); err != nil {
		return nil, fmt.Errorf("configuration.codecs: %w", err)
	}
	s.fill = FillChunk(innerSpec)
	if c.IndexCodecs == nil {
		c.IndexCodecs = DefaultIndexCodecs
	}
	for _, ic := range c.IndexCodecs {
		if !indexSizeCodecs[ic.Name] {
			return nil, errs.New(errs.InvalidArgument, "configuration.index_codecs: %q may change the index size; index codecs must have a fixed-size output (bytes, crc32c, transpose)", ic.Name)
		}
	}
	idxShape := append(slices.Clone(s.per), 2)
	if s.indexChain, err = NewChainLimits(c.IndexCodecs, ChunkSpec{Shape: idxShape, DataType: zarr.MustDataType("uint64")}, l); err != nil {
		return nil, fmt.Errorf("configuration.index_codecs: %w", err)
	}
	s.indexSize = s.indexChain.MaxEncodedSize()
	return s, nil
}

// Shard returns the shard layout when the chain is a single
// sharding_indexed codec, the case where the gateway can read and write
// inner chunks on their own; nil otherwise.
func (c *Chain) Shard() *Shard {
	if len(c.aa) > 0 || len(c.bb) > 0 {
		return nil
	}
	if s, ok := c.ab.(*Shard); ok {
		return s
	}
	return nil
}

// Spec is the shard's decoded representation.
func (s *Shard) Spec() ChunkSpec { return s.spec }

// InnerSpec is the decoded representation of one inner chunk.
func (s *Shard) InnerSpec() ChunkSpec { return s.innerChain.Spec() }

// InnerChain is the chain that encodes each inner chunk.
func (s *Shard) InnerChain() *Chain { return s.innerChain }

// ChunksPerShard is the inner chunk grid's shape.
func (s *Shard) ChunksPerShard() []int { return slices.Clone(s.per) }

// NumInner is the number of inner chunks (and index entries).
func (s *Shard) NumInner() int { return s.n }

// InnerNumber is the index entry number of the inner chunk at coords in
// the chunks-per-shard grid (C order).
func (s *Shard) InnerNumber(coords []int) int {
	i := 0
	for d, c := range coords {
		i = i*s.per[d] + c
	}
	return i
}

// InnerOrigin is the position in the shard of inner chunk i's first
// element.
func (s *Shard) InnerOrigin(i int) []int {
	o := make([]int, len(s.per))
	for d := len(s.per) - 1; d >= 0; d-- {
		o[d] = (i % s.per[d]) * s.inner[d]
		i /= s.per[d]
	}
	return o
}

// IndexSize is the encoded size of the index.
func (s *Shard) IndexSize() int64 { return s.indexSize }

// IndexAtStart reports whether the index precedes the inner chunks.
func (s *Shard) IndexAtStart() bool { return s.atStart }

// DecodeIndex decodes an encoded index (IndexSize bytes). A corrupt index
// (checksum mismatch, wrong size, an entry whose range overflows) is
// DataLoss; entries past the end of the shard are found when the range is
// read (InnerBytes for a whole shard).
func (s *Shard) DecodeIndex(b []byte) (codec.ShardIndex, error) {
	var raw []byte
	if s.indexChain == nil {
		if int64(len(b)) != s.indexSize {
			return nil, errs.New(errs.DataLoss, "shard index has %d bytes, want %d", len(b), s.indexSize)
		}
		raw = b
	} else {
		dec, err := s.indexChain.Decode(b)
		if err != nil {
			return nil, fmt.Errorf("shard index: %w", err)
		}
		raw = dec.Data
	}
	out := make(codec.ShardIndex, s.n)
	for i := range out {
		e := codec.IndexEntry{Offset: binary.LittleEndian.Uint64(raw[16*i:]), NBytes: binary.LittleEndian.Uint64(raw[16*i+8:])}
		if !e.Empty() && (e.Offset > math.MaxInt64 || e.NBytes > math.MaxInt64-e.Offset) {
			return nil, errs.New(errs.DataLoss, "shard index entry %d (offset %d, %d bytes) is out of range", i, e.Offset, e.NBytes)
		}
		out[i] = e
	}
	return out, nil
}

// EncodeIndex encodes an index of NumInner entries.
func (s *Shard) EncodeIndex(x codec.ShardIndex) ([]byte, error) {
	if len(x) != s.n {
		return nil, errs.New(errs.InvalidArgument, "shard index has %d entries, want %d", len(x), s.n)
	}
	raw := make([]byte, 16*s.n)
	for i, e := range x {
		binary.LittleEndian.PutUint64(raw[16*i:], e.Offset)
		binary.LittleEndian.PutUint64(raw[16*i+8:], e.NBytes)
	}
	if s.indexChain == nil {
		return raw, nil
	}
	return s.indexChain.Encode(Chunk{Data: raw})
}

// DecodeInner decodes one inner chunk from the NBytes bytes its index
// entry points to; an empty entry decodes to the fill value without b.
// Like Chain.Decode, the result may share memory with b.
func (s *Shard) DecodeInner(e codec.IndexEntry, b []byte) (Chunk, error) {
	if e.Empty() {
		return Chunk{Data: slices.Clone(s.fill.Data), Offsets: slices.Clone(s.fill.Offsets)}, nil
	}
	return s.decodeInner(e, b)
}

// decodeInner is DecodeInner sharing the fill chunk, for read-only use.
func (s *Shard) decodeInner(e codec.IndexEntry, b []byte) (Chunk, error) {
	if e.Empty() {
		return s.fill, nil
	}
	if uint64(len(b)) != e.NBytes {
		return Chunk{}, errs.New(errs.DataLoss, "inner chunk: %d bytes, the index says %d", len(b), e.NBytes)
	}
	return s.innerChain.Decode(b)
}

// EncodeInner encodes one inner chunk. An inner chunk holding only the fill
// value encodes to nil, which Assemble stores as an empty entry, as
// zarr-python does (write_empty_chunks false).
func (s *Shard) EncodeInner(c Chunk) ([]byte, error) {
	if s.isFill(c) {
		return nil, nil
	}
	return s.innerChain.Encode(c)
}

func (s *Shard) isFill(c Chunk) bool {
	return bytes.Equal(c.Data, s.fill.Data) && slices.Equal(c.Offsets, s.fill.Offsets)
}

// forRows calls f for every run of contiguous elements (along the last
// dimension) of the inner chunk at origin: its first element's linear
// index in the shard and in the inner chunk, and its length.
func (s *Shard) forRows(origin []int, f func(shardElem, innerElem, n int)) {
	nd := len(s.inner)
	shape := s.spec.Shape
	stride := make([]int, nd)
	acc := 1
	for d := nd - 1; d >= 0; d-- {
		stride[d] = acc
		acc *= shape[d]
	}
	if nd == 0 {
		f(0, 0, 1)
		return
	}
	row := s.inner[nd-1]
	base := 0
	for d := range nd {
		base += origin[d] * stride[d]
	}
	k := make([]int, nd)
	for j := 0; ; j += row {
		f(base, j, row)
		d := nd - 2
		for ; d >= 0; d-- {
			k[d]++
			base += stride[d]
			if k[d] < s.inner[d] {
				break
			}
			base -= k[d] * stride[d]
			k[d] = 0
		}
		if d < 0 {
			return
		}
	}
}

// Extract copies inner chunk i out of a decoded shard.
func (s *Shard) Extract(shard Chunk, i int) Chunk {
	origin := s.InnerOrigin(i)
	if s.spec.DataType.VariableLength() {
		out := Chunk{Offsets: make([]int64, 1, len(s.fill.Offsets))}
		s.forRows(origin, func(se, _, n int) {
			out.Data = append(out.Data, shard.Data[shard.Offsets[se]:shard.Offsets[se+n]]...)
			base := out.Offsets[len(out.Offsets)-1] - shard.Offsets[se]
			for k := se + 1; k <= se+n; k++ {
				out.Offsets = append(out.Offsets, base+shard.Offsets[k])
			}
		})
		return out
	}
	e := s.spec.DataType.Size
	out := make([]byte, len(s.fill.Data))
	s.forRows(origin, func(se, ie, n int) { copy(out[ie*e:(ie+n)*e], shard.Data[se*e:(se+n)*e]) })
	return Chunk{Data: out}
}

// Gather assembles a decoded shard from its NumInner decoded inner chunks.
func (s *Shard) Gather(inner []Chunk) (Chunk, error) {
	if len(inner) != s.n {
		return Chunk{}, errs.New(errs.InvalidArgument, "shard of %d inner chunks gathered from %d", s.n, len(inner))
	}
	innerSpec := s.InnerSpec()
	for i, c := range inner {
		if err := checkChunk(c, innerSpec); err != nil {
			return Chunk{}, fmt.Errorf("inner chunk %d: %w", i, err)
		}
	}
	if !s.spec.DataType.VariableLength() {
		e := s.spec.DataType.Size
		out := make([]byte, s.spec.Bytes())
		for i, c := range inner {
			s.forRows(s.InnerOrigin(i), func(se, ie, n int) { copy(out[se*e:(se+n)*e], c.Data[ie*e:(ie+n)*e]) })
		}
		return Chunk{Data: out}, nil
	}
	// Variable length: element sizes first, then one pass in shard order.
	n := s.spec.Elements()
	from := make([]int32, n) // inner chunk of each element
	at := make([]int32, n)   // its number within that inner chunk
	var total int64
	for i, c := range inner {
		total += int64(len(c.Data))
		s.forRows(s.InnerOrigin(i), func(se, ie, k int) {
			for j := range k {
				from[se+j], at[se+j] = int32(i), int32(ie+j)
			}
		})
	}
	out := Chunk{Data: make([]byte, 0, total), Offsets: make([]int64, 1, n+1)}
	for e := range n {
		c := inner[from[e]]
		out.Data = append(out.Data, c.Data[c.Offsets[at[e]]:c.Offsets[at[e]+1]]...)
		out.Offsets = append(out.Offsets, int64(len(out.Data)))
	}
	return out, nil
}

// Encode implements BytesCodec: inner chunks in C order, fill-only ones
// left out.
func (s *Shard) Encode(c Chunk, _ ChunkSpec) ([]byte, error) {
	parts := make([][]byte, s.n)
	for i := range s.n {
		var err error
		if parts[i], err = s.EncodeInner(s.Extract(c, i)); err != nil {
			return nil, fmt.Errorf("inner chunk %d: %w", i, err)
		}
	}
	return codec.Assemble(s, parts)
}

// Decode implements BytesCodec.
func (s *Shard) Decode(b []byte, _ ChunkSpec) (Chunk, error) {
	return s.decodeLimited(b, s.innerChain.limits.MaxVariableBytes)
}

// variableBound bounds the encoded size of a shard of variable-length
// elements holding varBytes element bytes in all: each inner chunk's
// encoding without element bytes, the element bytes through the inner
// chain once (its bounds are affine in them), and the index.
func (s *Shard) variableBound(_ ChunkSpec, varBytes int64) int64 {
	_, _, b0 := s.innerChain.boundsFor(0)
	_, _, b1 := s.innerChain.boundsFor(varBytes)
	return int64(s.n)*b0 + (b1 - b0) + s.indexSize
}

// decodeLimited decodes a whole shard whose inner chunks may hold varBytes
// element bytes in all (variable-length data): each inner chunk is decoded
// under what the ones before it left, so that the shard, not each inner
// chunk, is held to the per-chunk limit.
func (s *Shard) decodeLimited(b []byte, varBytes int64) (Chunk, error) {
	ib, err := codec.IndexBytes(s, b)
	if err != nil {
		return Chunk{}, err
	}
	x, err := s.DecodeIndex(ib)
	if err != nil {
		return Chunk{}, err
	}
	if x.IsEmpty() {
		return FillChunk(s.spec), nil
	}
	inner := make([]Chunk, s.n)
	for i, e := range x {
		p, err := codec.InnerBytes(b, x, i)
		if err != nil {
			return Chunk{}, err
		}
		if e.Empty() {
			inner[i] = s.fill
		} else if uint64(len(p)) != e.NBytes {
			return Chunk{}, errs.New(errs.DataLoss, "inner chunk %d: %d bytes, the index says %d", i, len(p), e.NBytes)
		} else if inner[i], err = s.innerChain.decode(p, varBytes); err != nil {
			return Chunk{}, fmt.Errorf("inner chunk %d: %w", i, err)
		}
		if s.spec.DataType.VariableLength() {
			if varBytes -= int64(len(inner[i].Data)); varBytes < 0 {
				// Only fill values can overdraw it (decode stays within it).
				return Chunk{}, s.innerChain.tooBig(s.innerChain.limits.MaxVariableBytes)
			}
		}
	}
	out, err := s.Gather(inner)
	if err != nil {
		return Chunk{}, errs.New(errs.DataLoss, "shard: %v", err)
	}
	return out, nil
}

// MaxEncodedSize implements BytesCodec.
func (s *Shard) MaxEncodedSize(ChunkSpec) int64 {
	m := s.innerChain.MaxEncodedSize()
	if m < 0 {
		return -1
	}
	return int64(s.n)*m + s.indexSize
}

func newSharding(cfg json.RawMessage, in ChunkSpec) (any, error) { return NewShard(cfg, in) }
