package codecsvc

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/zarr"
)

func init() { Register("sharding_indexed", newSharding) }

// ShardingConfig is the sharding_indexed codec's configuration.
type ShardingConfig struct {
	ChunkShape    []int            `json:"chunk_shape"`
	Codecs        []zarr.CodecSpec `json:"codecs"`
	IndexCodecs   []zarr.CodecSpec `json:"index_codecs,omitempty"`
	IndexLocation string           `json:"index_location,omitempty"`
}

// DefaultIndexCodecs is the index chain when a configuration names none.
var DefaultIndexCodecs = []zarr.CodecSpec{
	{Name: "bytes", Configuration: json.RawMessage(`{"endian":"little"}`)},
	{Name: "crc32c"},
}

const emptyEntry = ^uint64(0)

// sharding is the sharding_indexed codec: a shard holds its inner chunks,
// each encoded with the inner chain, and an index of (offset, nbytes)
// uint64 pairs encoded with the index chain, at the start or the end.
// Inner chunks holding only the fill value are left out (index entry all
// ones), as zarr-python does.
type sharding struct {
	inner, per []int
	n          int
	innerChain *Chain
	indexChain *Chain
	indexSize  int64
	atStart    bool
}

func newSharding(cfg json.RawMessage, in ChunkSpec) (any, error) {
	var c ShardingConfig
	if err := configOf(cfg, &c); err != nil {
		return nil, err
	}
	nd := len(in.Shape)
	if len(c.ChunkShape) != nd {
		return nil, errs.New(errs.InvalidArgument, "configuration.chunk_shape %v: has %d dimensions, the shard %d", c.ChunkShape, len(c.ChunkShape), nd)
	}
	s := &sharding{inner: c.ChunkShape, per: make([]int, nd), n: 1}
	for d := range nd {
		if c.ChunkShape[d] <= 0 || in.Shape[d]%c.ChunkShape[d] != 0 {
			return nil, errs.New(errs.InvalidArgument, "configuration.chunk_shape %v must divide the shard shape %v", c.ChunkShape, in.Shape)
		}
		s.per[d] = in.Shape[d] / c.ChunkShape[d]
		s.n *= s.per[d]
	}
	switch c.IndexLocation {
	case "", "end":
	case "start":
		s.atStart = true
	default:
		return nil, errs.New(errs.InvalidArgument, "configuration.index_location %q: want start or end", c.IndexLocation)
	}
	var err error
	if s.innerChain, err = NewChain(c.Codecs, ChunkSpec{Shape: c.ChunkShape, DataType: in.DataType, FillValue: in.FillValue}); err != nil {
		return nil, fmt.Errorf("configuration.codecs: %w", err)
	}
	if c.IndexCodecs == nil {
		c.IndexCodecs = DefaultIndexCodecs
	}
	idxShape := append(append([]int(nil), s.per...), 2)
	if s.indexChain, err = NewChain(c.IndexCodecs, ChunkSpec{Shape: idxShape, DataType: zarr.MustDataType("uint64")}); err != nil {
		return nil, fmt.Errorf("configuration.index_codecs: %w", err)
	}
	for _, ic := range c.IndexCodecs {
		if ic.Name != "bytes" && ic.Name != "crc32c" {
			return nil, errs.New(errs.Unimplemented, "configuration.index_codecs: %q makes the index size vary; only bytes and crc32c are supported", ic.Name)
		}
	}
	s.indexSize = s.indexChain.MaxEncodedSize()
	return s, nil
}

// IndexSize is the encoded size of the index.
func (s *sharding) IndexSize() int64 { return s.indexSize }

func (s *sharding) MaxEncodedSize(ChunkSpec) int64 {
	m := s.innerChain.MaxEncodedSize()
	if m < 0 {
		return -1
	}
	return int64(s.n)*m + s.indexSize
}

// innerBox visits the inner chunks in C order with their origin.
func (s *sharding) innerOrigin(i int) []int {
	o := make([]int, len(s.per))
	for d := len(s.per) - 1; d >= 0; d-- {
		o[d] = (i % s.per[d]) * s.inner[d]
		i /= s.per[d]
	}
	return o
}

// elementIndices lists, in the inner chunk's C order, the shard-linear
// index of each element of the inner chunk at origin.
func elementIndices(shape, inner, origin []int) []int {
	nd := len(shape)
	strides := make([]int, nd)
	acc := 1
	for d := nd - 1; d >= 0; d-- {
		strides[d] = acc
		acc *= shape[d]
	}
	n := 1
	for _, x := range inner {
		n *= x
	}
	out := make([]int, n)
	k := make([]int, nd)
	for j := range n {
		idx := 0
		for d := range nd {
			idx += (origin[d] + k[d]) * strides[d]
		}
		out[j] = idx
		for d := nd - 1; d >= 0; d-- {
			k[d]++
			if k[d] < inner[d] {
				break
			}
			k[d] = 0
		}
	}
	return out
}

// extract copies one inner chunk out of a shard.
func (s *sharding) extract(c Chunk, in ChunkSpec, i int) Chunk {
	idx := elementIndices(in.Shape, s.inner, s.innerOrigin(i))
	if in.DataType.VariableLength() {
		out := Chunk{Offsets: make([]int64, 1, len(idx)+1)}
		for _, e := range idx {
			out.Data = append(out.Data, c.Data[c.Offsets[e]:c.Offsets[e+1]]...)
			out.Offsets = append(out.Offsets, int64(len(out.Data)))
		}
		return out
	}
	e := in.DataType.Size
	out := make([]byte, len(idx)*e)
	// Runs along the last dimension are contiguous in both.
	row := s.inner[len(s.inner)-1]
	for j := 0; j < len(idx); j += row {
		copy(out[j*e:(j+row)*e], c.Data[idx[j]*e:(idx[j]+row)*e])
	}
	return Chunk{Data: out}
}

func (s *sharding) Encode(c Chunk, in ChunkSpec) ([]byte, error) {
	fill := FillChunk(s.innerChain.Spec())
	entries := make([]uint64, 2*s.n)
	var body [][]byte
	var size int64
	if s.atStart {
		size = s.indexSize
	}
	for i := range s.n {
		ic := s.extract(c, in, i)
		if bytes.Equal(ic.Data, fill.Data) && int64sEqual(ic.Offsets, fill.Offsets) {
			entries[2*i], entries[2*i+1] = emptyEntry, emptyEntry
			continue
		}
		enc, err := s.innerChain.Encode(ic)
		if err != nil {
			return nil, err
		}
		entries[2*i], entries[2*i+1] = uint64(size), uint64(len(enc))
		size += int64(len(enc))
		body = append(body, enc)
	}
	raw := make([]byte, 16*s.n)
	for i, v := range entries {
		binary.LittleEndian.PutUint64(raw[8*i:], v)
	}
	index, err := s.indexChain.Encode(Chunk{Data: raw})
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, size+s.indexSize)
	if s.atStart {
		out = append(out, index...)
	}
	for _, b := range body {
		out = append(out, b...)
	}
	if !s.atStart {
		out = append(out, index...)
	}
	return out, nil
}

func int64sEqual(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// DecodeIndex decodes a shard's index into (offset, nbytes) pairs.
func (s *sharding) DecodeIndex(b []byte) ([]uint64, error) {
	dec, err := s.indexChain.Decode(b)
	if err != nil {
		return nil, fmt.Errorf("shard index: %w", err)
	}
	out := make([]uint64, 2*s.n)
	for i := range out {
		out[i] = binary.LittleEndian.Uint64(dec.Data[8*i:])
	}
	return out, nil
}

func (s *sharding) Decode(b []byte, in ChunkSpec) (Chunk, error) {
	if int64(len(b)) < s.indexSize {
		return Chunk{}, errs.New(errs.DataLoss, "shard of %d bytes is shorter than its %d-byte index", len(b), s.indexSize)
	}
	raw := b[int64(len(b))-s.indexSize:]
	if s.atStart {
		raw = b[:s.indexSize]
	}
	entries, err := s.DecodeIndex(raw)
	if err != nil {
		return Chunk{}, err
	}
	vlen := in.DataType.VariableLength()
	var out Chunk
	var vals [][]byte
	fillInner := FillChunk(s.innerChain.Spec())
	if vlen {
		vals = make([][]byte, in.Elements())
	} else {
		out = FillChunk(in)
	}
	for i := range s.n {
		off, n := entries[2*i], entries[2*i+1]
		ic := fillInner
		if !(off == emptyEntry && n == emptyEntry) {
			if off > uint64(len(b)) || n > uint64(len(b))-off {
				return Chunk{}, errs.New(errs.DataLoss, "shard index entry %d (offset %d, %d bytes) points outside the %d-byte shard", i, off, n, len(b))
			}
			if ic, err = s.innerChain.Decode(b[off : off+n]); err != nil {
				return Chunk{}, fmt.Errorf("inner chunk %d: %w", i, err)
			}
		} else if !vlen {
			continue // already fill
		}
		idx := elementIndices(in.Shape, s.inner, s.innerOrigin(i))
		if vlen {
			for j, e := range idx {
				vals[e] = ic.Data[ic.Offsets[j]:ic.Offsets[j+1]]
			}
			continue
		}
		e := in.DataType.Size
		row := s.inner[len(s.inner)-1]
		for j := 0; j < len(idx); j += row {
			copy(out.Data[idx[j]*e:(idx[j]+row)*e], ic.Data[j*e:(j+row)*e])
		}
	}
	if vlen {
		out.Offsets = make([]int64, 1, len(vals)+1)
		for _, v := range vals {
			out.Data = append(out.Data, v...)
			out.Offsets = append(out.Offsets, int64(len(out.Data)))
		}
	}
	return out, nil
}
