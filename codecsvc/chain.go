// Package codecsvc is the codec engine: Zarr codecs built from their JSON
// configuration by a registry, the chain executor following the
// representation rules of the Zarr v3 core specification, the in-process
// batch engine (Local) and its gRPC service (CodecService), the work of
// codec workers. Codecs do no I/O.
//
// Decoded chunks are in zarrgate's in-memory layout (Chunk): fixed-size
// elements in C order, little-endian; variable-length elements as their
// concatenated bytes plus n+1 offsets.
//
// Sharded arrays can be read and written an inner chunk at a time through
// Shard (Chain.Shard, NewShard, NewLegacyShard).
//
// Adding a codec: implement ArrayCodec, BytesCodec or ByteCodec (a
// ByteCodec's Decode must respect its size bound); Register it by name in
// an init function; add it to the round-trip chains in codecs_test.go, give
// it a FuzzDecode target in fuzz_test.go and, where a reference
// implementation exists, golden cases in testdata/golden (golden_test.go
// describes the format).
package codecsvc

import (
	"encoding/json"
	"fmt"
	"sort"
	"sync"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/bufpool"
	"github.com/zarrgate/zarrgate/zarr"
)

// ChunkSpec is the decoded representation a codec sees: the chunk's shape,
// data type and fill value (one element, little-endian; for string and
// bytes types the value's bytes; empty means zero).
type ChunkSpec struct {
	Shape     []int
	DataType  zarr.DataType
	FillValue []byte
}

// Elements is the number of elements of the representation.
func (s ChunkSpec) Elements() int {
	n := 1
	for _, d := range s.Shape {
		n *= d
	}
	return n
}

// Bytes is the decoded size of a fixed-size representation.
func (s ChunkSpec) Bytes() int64 { return int64(s.Elements()) * int64(s.DataType.Size) }

// fill returns the fill element, defaulting to zero.
func (s ChunkSpec) fill() []byte {
	if !s.DataType.VariableLength() && len(s.FillValue) != s.DataType.Size {
		return make([]byte, s.DataType.Size)
	}
	return s.FillValue
}

// Chunk is a decoded chunk: fixed-size elements in C order, little-endian,
// in Data; for variable-length data types, the concatenated element bytes in
// Data and n+1 offsets into it.
type Chunk struct {
	Data    []byte
	Offsets []int64
	// Pooled reports that Data lies in a buffer from zarrgate's buffer pool
	// (internal/bufpool) that belongs to this chunk alone, so that the
	// gateway can recycle it once the chunk is sent. Others ignore it.
	Pooled bool
}

// FillChunk returns a chunk holding the fill value everywhere.
func FillChunk(spec ChunkSpec) Chunk {
	n := spec.Elements()
	if spec.DataType.VariableLength() {
		offs := make([]int64, n+1)
		data := make([]byte, 0, len(spec.FillValue)*n)
		for i := 1; i <= n; i++ {
			data = append(data, spec.FillValue...)
			offs[i] = int64(len(data))
		}
		return Chunk{Data: data, Offsets: offs}
	}
	f := spec.fill()
	data := make([]byte, spec.Bytes())
	for i := range f {
		if f[i] != 0 {
			for off := 0; off < len(data); off += len(f) {
				copy(data[off:], f)
			}
			break
		}
	}
	return Chunk{Data: data}
}

// checkChunk validates a decoded chunk against its representation.
func checkChunk(c Chunk, spec ChunkSpec) error {
	n := spec.Elements()
	if spec.DataType.VariableLength() {
		if len(c.Offsets) != n+1 || c.Offsets[0] != 0 || c.Offsets[n] != int64(len(c.Data)) {
			return errs.New(errs.InvalidArgument, "chunk of %d %s elements needs %d offsets from 0 to %d", n, spec.DataType, n+1, len(c.Data))
		}
		for i := 1; i <= n; i++ {
			if c.Offsets[i] < c.Offsets[i-1] {
				return errs.New(errs.InvalidArgument, "chunk offsets decrease at %d", i)
			}
		}
		return nil
	}
	if int64(len(c.Data)) != spec.Bytes() {
		return errs.New(errs.InvalidArgument, "chunk has %d bytes, want %d (%d elements of %s)", len(c.Data), spec.Bytes(), n, spec.DataType)
	}
	return nil
}

// ArrayCodec is an array-to-array codec.
type ArrayCodec interface {
	// Resolve returns the representation the codec encodes to.
	Resolve(in ChunkSpec) (ChunkSpec, error)
	Encode(c Chunk, in ChunkSpec) (Chunk, error)
	Decode(c Chunk, in ChunkSpec) (Chunk, error)
}

// BytesCodec is an array-to-bytes codec.
type BytesCodec interface {
	Encode(c Chunk, in ChunkSpec) ([]byte, error)
	Decode(b []byte, in ChunkSpec) (Chunk, error)
	// MaxEncodedSize bounds the encoded size (-1: no bound).
	MaxEncodedSize(in ChunkSpec) int64
}

// ByteCodec is a bytes-to-bytes codec.
type ByteCodec interface {
	Encode(b []byte) ([]byte, error)
	// Decode decodes b. It must fail, not allocate, when the result would
	// exceed max bytes (max < 0: no bound), so that a decompression bomb
	// cannot exhaust memory.
	Decode(b []byte, max int64) ([]byte, error)
	// MaxEncodedSize bounds the encoded size of n input bytes (-1 for
	// unbounded n gives -1).
	MaxEncodedSize(n int64) int64
}

// Factory builds a codec from its configuration for the representation it
// receives when encoding. It returns an ArrayCodec, BytesCodec or
// ByteCodec.
type Factory func(config json.RawMessage, in ChunkSpec) (any, error)

var (
	regMu    sync.RWMutex
	registry = map[string]Factory{}
)

// Register makes a codec available under name. It panics on a duplicate.
func Register(name string, f Factory) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := registry[name]; dup {
		panic("codecsvc: codec registered twice: " + name)
	}
	registry[name] = f
}

// Codecs lists the registered codec names.
func Codecs() []string {
	regMu.RLock()
	defer regMu.RUnlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// recoverPanics turns a panic in a decoder into DataLoss; the fuzz tests
// turn it off so that a panic is found, not hidden.
var recoverPanics = true

// maxVariableBytes bounds the encoded size of a chunk of variable-length
// elements, which nothing else bounds.
const maxVariableBytes = 1 << 30

// Chain is a codec chain bound to a chunk representation. It is safe for
// concurrent use.
type Chain struct {
	spec   ChunkSpec
	aa     []ArrayCodec
	aaIn   []ChunkSpec // representation each array codec receives
	ab     BytesCodec
	abIn   ChunkSpec
	bb     []ByteCodec
	bounds []int64 // decoded-size bound at the output of each bytes codec's Decode
}

// NewChain builds a chain from its v3 JSON form for chunks of spec. An
// unknown codec is Unimplemented, a misplaced one or a bad configuration
// InvalidArgument; both name it.
func NewChain(specs []zarr.CodecSpec, spec ChunkSpec) (*Chain, error) {
	c := &Chain{spec: spec}
	cur := spec
	stage := 0 // 0 array->array, 1 bytes->bytes
	for i, cs := range specs {
		regMu.RLock()
		f := registry[cs.Name]
		regMu.RUnlock()
		if f == nil && cs.MustUnderstand != nil && !*cs.MustUnderstand {
			continue // the document allows readers that do not know it to skip it
		}
		if f == nil {
			return nil, errs.New(errs.Unimplemented, "codec %q (codecs[%d]) is not supported; supported: %v", cs.Name, i, Codecs())
		}
		codec, err := f(cs.Configuration, cur)
		if err != nil {
			return nil, fmt.Errorf("codec %q (codecs[%d]): %w", cs.Name, i, err)
		}
		switch x := codec.(type) {
		case ArrayCodec:
			if stage != 0 {
				return nil, errs.New(errs.InvalidArgument, "codec %q (codecs[%d]) is array-to-array and must come before the array-to-bytes codec", cs.Name, i)
			}
			next, err := x.Resolve(cur)
			if err != nil {
				return nil, fmt.Errorf("codec %q (codecs[%d]): %w", cs.Name, i, err)
			}
			c.aa, c.aaIn = append(c.aa, x), append(c.aaIn, cur)
			cur = next
		case BytesCodec:
			if stage != 0 {
				return nil, errs.New(errs.InvalidArgument, "codec %q (codecs[%d]): a chain has exactly one array-to-bytes codec", cs.Name, i)
			}
			c.ab, c.abIn, stage = x, cur, 1
		case ByteCodec:
			if stage != 1 {
				return nil, errs.New(errs.InvalidArgument, "codec %q (codecs[%d]) is bytes-to-bytes and must come after the array-to-bytes codec", cs.Name, i)
			}
			c.bb = append(c.bb, x)
		default:
			return nil, errs.New(errs.Internal, "codec %q: factory returned %T", cs.Name, codec)
		}
	}
	if c.ab == nil {
		return nil, errs.New(errs.InvalidArgument, "codecs: the chain has no array-to-bytes codec (such as bytes)")
	}
	bound := c.ab.MaxEncodedSize(c.abIn)
	if bound < 0 {
		bound = maxVariableBytes
	}
	c.bounds = make([]int64, len(c.bb))
	for i, b := range c.bb {
		c.bounds[i] = bound
		if bound >= 0 {
			bound = b.MaxEncodedSize(bound)
		}
	}
	return c, nil
}

// Spec is the representation the chain decodes to.
func (c *Chain) Spec() ChunkSpec { return c.spec }

// MaxEncodedSize bounds the chain's encoded size (-1: unknown).
func (c *Chain) MaxEncodedSize() int64 {
	b := c.ab.MaxEncodedSize(c.abIn)
	for _, x := range c.bb {
		if b < 0 {
			return -1
		}
		b = x.MaxEncodedSize(b)
	}
	return b
}

// Decode decodes one encoded chunk. Corrupt or truncated input is DataLoss
// (or InvalidArgument), never a panic, and no stage allocates beyond the
// chunk's expected size.
func (c *Chain) Decode(encoded []byte) (ch Chunk, err error) {
	if recoverPanics {
		defer func() {
			if p := recover(); p != nil { // a last line of defence: no input may crash a worker
				err = errs.New(errs.DataLoss, "decoding failed on malformed input: %v", p)
			}
		}()
	}
	// pooled is the pool buffer (from a pooledDecoder) the data being
	// decoded lies in, if any: handed back as soon as a stage moves the
	// data elsewhere, or marked on the chunk if the data ends up in it.
	var pooled []byte
	moved := func(now []byte) {
		if pooled != nil && !bufpool.Overlaps(now, pooled) {
			bufpool.Put(pooled)
			pooled = nil
		}
	}
	b := encoded
	for i := len(c.bb) - 1; i >= 0; i-- {
		if b, err = c.bb[i].Decode(b, c.bounds[i]); err != nil {
			return Chunk{}, err
		}
		moved(b)
		if _, ok := c.bb[i].(pooledDecoder); ok && pooled == nil {
			pooled = b
		}
	}
	if ch, err = c.ab.Decode(b, c.abIn); err != nil {
		return Chunk{}, err
	}
	moved(ch.Data)
	if err := checkChunk(ch, c.abIn); err != nil {
		return Chunk{}, errs.New(errs.DataLoss, "decoded chunk: %v", err)
	}
	for i := len(c.aa) - 1; i >= 0; i-- {
		if ch, err = c.aa[i].Decode(ch, c.aaIn[i]); err != nil {
			return Chunk{}, err
		}
		moved(ch.Data)
	}
	ch.Pooled = pooled != nil
	return ch, nil
}

// pooledDecoder marks byte codecs whose Decode returns a whole buffer from
// internal/bufpool that the caller owns.
type pooledDecoder interface{ decodesIntoPool() }

// Encode encodes one chunk of the chain's representation.
func (c *Chain) Encode(ch Chunk) ([]byte, error) {
	if err := checkChunk(ch, c.spec); err != nil {
		return nil, err
	}
	var err error
	for i, a := range c.aa {
		if ch, err = a.Encode(ch, c.aaIn[i]); err != nil {
			return nil, err
		}
	}
	b, err := c.ab.Encode(ch, c.abIn)
	if err != nil {
		return nil, err
	}
	for _, x := range c.bb {
		if b, err = x.Encode(b); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// configOf unmarshals a codec configuration strictly: unknown fields are
// InvalidArgument naming them.
func configOf(raw json.RawMessage, v any) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	dec := json.NewDecoder(bytesReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errs.New(errs.InvalidArgument, "configuration: %v", err)
	}
	return nil
}
