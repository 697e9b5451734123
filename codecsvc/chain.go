// Package codecsvc is the codec engine: Zarr codecs built from their JSON
// configuration by a registry, the chain executor following the
// representation rules of the Zarr v3 core specification, the in-process
// batch engine (Local, a codec.Engine) and its gRPC service (CodecService),
// the work of codec workers. Codecs do no I/O.
//
// Decoded chunks are in zarrgate's in-memory layout (Chunk): fixed-size
// elements in C order, little-endian; variable-length elements as their
// concatenated bytes plus n+1 offsets.
//
// Sharded arrays can be read and written an inner chunk at a time through
// Shard (Chain.Shard, NewShard, NewLegacyShard), a codec.ShardLayout.
//
// Adding a codec: implement ArrayCodec, BytesCodec or ByteCodec (a
// ByteCodec's Decode must respect its size bound); Register it by name in
// an init function; add it to the round-trip chains in codecs_test.go, give
// it a FuzzDecode target in fuzz_test.go and, where a reference
// implementation exists, golden cases in testdata/golden (golden_test.go
// describes the format).
package codecsvc

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/bufpool"
	"github.com/zarrgate/zarrgate/internal/membudget"
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

// Elements is the number of elements of the representation, or -1 when a
// dimension is negative or the product overflows (a -1 makes any
// allocation sized by it fail loudly instead of wrapping to a small size).
// Chains only hold specs that CheckChunkSize accepted.
func (s ChunkSpec) Elements() int {
	n, ok := s.elements()
	if !ok {
		return -1
	}
	return int(n)
}

// elements is the overflow-checked element count.
func (s ChunkSpec) elements() (int64, bool) {
	n := int64(1)
	for _, d := range s.Shape {
		if d < 0 {
			return 0, false
		}
		if d != 0 && n > math.MaxInt64/int64(d) {
			return 0, false
		}
		n *= int64(d)
	}
	return n, true
}

// Bytes is the decoded size of a fixed-size representation, or -1 when it
// overflows (see Elements).
func (s ChunkSpec) Bytes() int64 {
	n, ok := s.elements()
	if !ok || int64(s.DataType.Size) > 0 && n > math.MaxInt64/int64(s.DataType.Size) {
		return -1
	}
	return n * int64(s.DataType.Size)
}

// Default limits. 1 GiB is above any chunk zarr-python or numcodecs users
// choose in practice (their guidance is 1-100 MiB) and still leaves a codec
// worker with a few GiB room for a batch. String and bytes chunks get 64
// MiB: a variable-length chunk costs about three times its element bytes
// while decoding (the decompressed vlen stream, the compacted elements,
// and 8-byte offsets), and nothing but this limit bounds it, so it must be
// far below the fixed-size one; 64 MiB is a thousand times a typical
// string chunk (64 Ki strings of ~16 bytes) and keeps a decompression bomb
// in a string array under ~200 MiB.
const (
	DefaultMaxChunkBytes    = 1 << 30
	DefaultMaxVariableBytes = 64 << 20
)

// DefaultLimits returns the default limits.
func DefaultLimits() codec.Limits {
	return codec.Limits{MaxChunkBytes: DefaultMaxChunkBytes, MaxVariableBytes: DefaultMaxVariableBytes}
}

// withDefaults fills unset (zero or negative) limits with the defaults.
func withDefaults(l codec.Limits) codec.Limits {
	if l.MaxChunkBytes <= 0 {
		l.MaxChunkBytes = DefaultMaxChunkBytes
	}
	if l.MaxVariableBytes <= 0 {
		l.MaxVariableBytes = DefaultMaxVariableBytes
	}
	return l
}

// CheckChunkSize reports whether a chunk of spec may be decoded or encoded
// under l (zero fields: the defaults): a shape whose size overflows (or has
// a negative dimension) is InvalidArgument; a chunk whose decoded size is
// over l.MaxChunkBytes is ResourceExhausted naming the limit. For
// variable-length types the decoded size is the offsets (8 bytes per
// element) plus the fill value repeated, which must also be within
// l.MaxVariableBytes. It allocates nothing: the gateway calls it before
// reserving memory for a chunk, and every chain calls it when built.
func CheckChunkSize(spec ChunkSpec, l codec.Limits) error {
	l = withDefaults(l)
	n, ok := spec.elements()
	if !ok {
		return errs.New(errs.InvalidArgument, "chunk shape %v: the number of elements overflows", spec.Shape)
	}
	if spec.DataType.VariableLength() {
		if n >= l.MaxChunkBytes/8 {
			return errs.New(errs.ResourceExhausted, "chunk shape %v: %d %s elements need %s of offsets, more than the per-chunk limit of %s (--max-chunk-bytes)",
				spec.Shape, n, spec.DataType, sizeOf(8*(n+1)), sizeOf(l.MaxChunkBytes))
		}
		if f := int64(len(spec.FillValue)); f > 0 && n > l.MaxVariableBytes/f {
			return errs.New(errs.ResourceExhausted, "chunk shape %v: %d fill values of %d bytes are more than the per-chunk limit of %s for %s data (--max-variable-chunk-bytes)",
				spec.Shape, n, f, sizeOf(l.MaxVariableBytes), spec.DataType)
		}
		return nil
	}
	b := spec.Bytes()
	if b < 0 {
		return errs.New(errs.InvalidArgument, "chunk shape %v of %s: the size in bytes overflows", spec.Shape, spec.DataType)
	}
	if b > l.MaxChunkBytes {
		return errs.New(errs.ResourceExhausted, "chunk shape %v of %s is %s decoded, more than the per-chunk limit of %s (--max-chunk-bytes)",
			spec.Shape, spec.DataType, sizeOf(b), sizeOf(l.MaxChunkBytes))
	}
	return nil
}

// sizeOf formats a byte count for messages.
func sizeOf(n int64) string { return membudget.Size(n) }

// fill returns the fill element, defaulting to zero.
func (s ChunkSpec) fill() []byte {
	if !s.DataType.VariableLength() && len(s.FillValue) != s.DataType.Size {
		return make([]byte, s.DataType.Size)
	}
	return s.FillValue
}

// Chunk is a decoded chunk (see codec.Chunk): the codecs' input and output.
// A chain's Decode may lend its result from zarrgate's buffer pool
// (Chunk.Lent), when a codec decoded into a pool buffer that the chunk
// alone now holds; Release hands it back.
type Chunk = codec.Chunk

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

// Chain is a codec chain bound to a chunk representation. It is safe for
// concurrent use.
type Chain struct {
	spec   ChunkSpec
	limits codec.Limits
	aa     []ArrayCodec
	aaIn   []ChunkSpec // representation each array codec receives
	ab     BytesCodec
	abIn   ChunkSpec
	bb     []ByteCodec
	// variable: the array-to-bytes codec sees variable-length elements,
	// whose encoded size depends on how many element bytes are allowed;
	// the bounds are then worked out per decode (boundsFor).
	variable bool
	prefix   bool    // prefixChain: selections decode from the first blocks alone
	abBound  int64   // fixed size: the bound on the array-to-bytes codec's input
	bounds   []int64 // fixed size: decoded-size bound at the output of each bytes codec's Decode
}

// variableBounder is a BytesCodec of variable-length elements that can
// bound its encoded size given the element bytes allowed.
type variableBounder interface {
	variableBound(in ChunkSpec, varBytes int64) int64
}

// NewChain builds a chain from its v3 JSON form for chunks of spec, under
// the default limits (see NewChainLimits).
func NewChain(specs []zarr.CodecSpec, spec ChunkSpec) (*Chain, error) {
	return NewChainLimits(specs, spec, DefaultLimits())
}

// NewChainLimits builds a chain from its v3 JSON form for chunks of spec.
// An unknown codec is Unimplemented, a misplaced one or a bad configuration
// InvalidArgument; both name it. The chunk (and every representation the
// chain passes it through) must pass CheckChunkSize under l, before
// anything is allocated for it.
func NewChainLimits(specs []zarr.CodecSpec, spec ChunkSpec, l codec.Limits) (*Chain, error) {
	l = withDefaults(l)
	if err := CheckChunkSize(spec, l); err != nil {
		return nil, err
	}
	c := &Chain{spec: spec, limits: l}
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
		var codec any
		var err error
		if cs.Name == "sharding_indexed" {
			// Decoded whole, as a codec of a chain: the shard itself is a
			// chunk under the limits, and so are its inner chunks.
			if err = CheckChunkSize(cur, l); err == nil {
				codec, err = NewShardLimits(cs.Configuration, cur, l)
			}
		} else {
			codec, err = f(cs.Configuration, cur)
		}
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
			// A codec may widen the elements (numcodecs.delta's astype).
			if err := CheckChunkSize(next, l); err != nil {
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
	c.variable = c.abIn.DataType.VariableLength()
	if !c.variable {
		c.abBound, c.bounds, _ = c.boundsFor(0)
	}
	c.prefix = prefixChain(c)
	return c, nil
}

// boundsFor works out the decoded-size bounds of the chain's stages when a
// chunk may hold varBytes element bytes (ignored for fixed-size types):
// the bound on the array-to-bytes codec's input, the bound at the output
// of each bytes codec's Decode, and the bound on the encoded chunk.
func (c *Chain) boundsFor(varBytes int64) (abBound int64, bounds []int64, encoded int64) {
	abBound = c.ab.MaxEncodedSize(c.abIn)
	if vb, ok := c.ab.(variableBounder); ok && c.variable {
		abBound = vb.variableBound(c.abIn, varBytes)
	}
	if abBound < 0 { // no codec does this; a bound all the same
		abBound = c.limits.MaxChunkBytes + c.limits.MaxVariableBytes
	}
	bounds = make([]int64, len(c.bb))
	b := abBound
	for i, x := range c.bb {
		bounds[i] = b
		b = x.MaxEncodedSize(b)
	}
	return abBound, bounds, b
}

// Spec is the representation the chain decodes to.
func (c *Chain) Spec() ChunkSpec { return c.spec }

// Limits are the limits the chain was built under.
func (c *Chain) Limits() codec.Limits { return c.limits }

// MaxEncodedSize bounds the chain's encoded size (-1: unknown, for
// variable-length data).
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

// DecodedBound bounds the memory a decoded chunk of the chain holds: its
// exact size for fixed-size data; for variable-length data its offsets
// plus the element bytes the limits allow.
func (c *Chain) DecodedBound() int64 {
	if c.spec.DataType.VariableLength() {
		return 8*int64(c.spec.Elements()+1) + c.limits.MaxVariableBytes
	}
	return c.spec.Bytes()
}

// WorkingBound bounds the memory decoding or encoding one chunk of the
// chain holds at once beyond its input and its result: the intermediate
// buffers of its stages, at their bounds.
func (c *Chain) WorkingBound() int64 { return c.workingBound(c.limits.MaxVariableBytes) }

// workingBound is WorkingBound for chunks of at most varBytes element
// bytes.
func (c *Chain) workingBound(varBytes int64) int64 {
	var w int64
	abBound, bounds, _ := c.boundsFor(varBytes)
	if len(c.bb) > 0 {
		// The last bytes codec's output is the chunk itself when the bytes
		// codec takes it as it is (little-endian), already counted.
		if bc, ok := c.ab.(bytesCodec); !ok || bc.big {
			w += abBound
		}
		for _, b := range bounds[1:] {
			w += b
		}
	}
	decoded := c.DecodedBound()
	if c.variable {
		decoded += varBytes - c.limits.MaxVariableBytes
	}
	w += int64(len(c.aa)) * decoded
	return w
}

// errOverBound marks (as the cause of a DataLoss error) a decoder's output
// outgrowing its bound, which for variable-length data means the chunk is
// over the limit rather than corrupt. Its text is empty so that it adds
// nothing to messages.
var errOverBound = overBound{}

type overBound struct{}

func (overBound) Error() string { return "" }

// overBoundError is the error of a decoder whose output would exceed max
// bytes.
func overBoundError(what string, max int64) error {
	return errs.New(errs.DataLoss, "%s: decodes to more than the %d bytes expected%w", what, max, errOverBound)
}

// tooBig is the error of a variable-length chunk over its element bytes.
func (c *Chain) tooBig(varBytes int64) error {
	return errs.New(errs.ResourceExhausted, "chunk of %d %s elements holds more than %s of element bytes, the per-chunk limit for variable-length data (--max-variable-chunk-bytes)",
		c.spec.Elements(), c.spec.DataType, sizeOf(varBytes))
}

// Decode decodes one encoded chunk. Corrupt or truncated input is DataLoss
// (or InvalidArgument), never a panic, and no stage allocates beyond the
// chunk's expected size (fixed-size data) or the limit on element bytes
// (variable-length data, ResourceExhausted when over it).
func (c *Chain) Decode(encoded []byte) (Chunk, error) {
	return c.decode(encoded, c.limits.MaxVariableBytes)
}

// decode is Decode with varBytes element bytes allowed, the part of a
// shard's allowance left for one inner chunk.
func (c *Chain) decode(encoded []byte, varBytes int64) (ch Chunk, err error) {
	if recoverPanics {
		defer func() {
			if p := recover(); p != nil { // a last line of defence: no input may crash a worker
				err = errs.New(errs.DataLoss, "decoding failed on malformed input: %v", p)
			}
		}()
	}
	abBound, bounds := c.abBound, c.bounds
	if c.variable {
		abBound, bounds, _ = c.boundsFor(varBytes)
	}
	// pooled is the pool buffer (from a pooledDecoder) the data being
	// decoded lies in, if any: handed back as soon as a stage moves the
	// data elsewhere, or lent with the chunk if the data ends up in it.
	var pooled []byte
	moved := func(now []byte) {
		if pooled != nil && !bufpool.Overlaps(now, pooled) {
			bufpool.Put(pooled)
			pooled = nil
		}
	}
	defer func() {
		if err != nil && pooled != nil {
			bufpool.Put(pooled)
		}
	}()
	b := encoded
	for i := len(c.bb) - 1; i >= 0; i-- {
		if b, err = c.bb[i].Decode(b, bounds[i]); err != nil {
			if c.variable && errors.Is(err, errOverBound) {
				return Chunk{}, c.tooBig(varBytes)
			}
			return Chunk{}, err
		}
		moved(b)
		if _, ok := c.bb[i].(pooledDecoder); ok && pooled == nil {
			pooled = b
		}
	}
	if c.variable && int64(len(b)) > abBound {
		return Chunk{}, c.tooBig(varBytes)
	}
	if s, ok := c.ab.(*Shard); ok && c.variable {
		ch, err = s.decodeLimited(b, varBytes)
	} else if bc, ok := c.ab.(bytesCodec); ok && pooled != nil && bufpool.Overlaps(b, pooled) {
		ch, err = bc.decodeOwned(b, c.abIn) // big-endian elements swapped where they lie
	} else {
		ch, err = c.ab.Decode(b, c.abIn)
	}
	if err != nil {
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
	if pooled != nil {
		ch = codec.Lend(ch.Data, ch.Offsets, pooled, bufpool.Put)
		pooled = nil
	}
	return ch, nil
}

// DecodeInto decodes encoded straight into dst when the chain allows it:
// a fixed-size chunk, no array codec, one zstd codec after the bytes
// codec, and dst at least the chunk's size. It returns the bytes written
// (the chunk, as Decode returns its Data), or ok false, having written
// nothing the caller may use, when the chain does not allow it (the
// caller then decodes with Decode). Errors are Decode's. A codec worker
// decodes so into a gateway's shared memory, saving a copy of the chunk.
func (c *Chain) DecodeInto(encoded, dst []byte) (n int, ok bool, err error) {
	if !c.decodesInto() || int64(len(dst)) < c.bounds[0] {
		return 0, false, nil
	}
	z := c.bb[0].(zstdCodec)
	if recoverPanics {
		defer func() {
			if p := recover(); p != nil {
				err = errs.New(errs.DataLoss, "decoding failed on malformed input: %v", p)
			}
		}()
	}
	b, err := z.decodeTo(encoded, c.bounds[0], dst[:c.bounds[0]])
	if err != nil {
		return 0, false, err
	}
	// b lies in dst, the caller's to overwrite: big-endian elements are
	// swapped where they lie.
	ch, err := c.ab.(bytesCodec).decodeOwned(b, c.abIn)
	if err != nil {
		return 0, false, err
	}
	if err := checkChunk(ch, c.abIn); err != nil {
		return 0, false, errs.New(errs.DataLoss, "decoded chunk: %v", err)
	}
	if len(ch.Data) > 0 && &ch.Data[0] != &dst[0] {
		copy(dst, ch.Data) // the chunk's size (checkChunk): bounds[0], which fits dst
	}
	return len(ch.Data), true, nil
}

// decodesInto reports whether the chain's shape allows DecodeInto.
func (c *Chain) decodesInto() bool {
	if c.variable || len(c.aa) > 0 || len(c.bb) != 1 {
		return false
	}
	_, isZstd := c.bb[0].(zstdCodec)
	_, isBytes := c.ab.(bytesCodec)
	return isZstd && isBytes
}

// pooledDecoder marks byte codecs whose Decode returns a whole buffer from
// internal/bufpool that the caller owns.
type pooledDecoder interface{ decodesIntoPool() }

// Encode encodes one chunk of the chain's representation.
func (c *Chain) Encode(ch Chunk) ([]byte, error) {
	if err := checkChunk(ch, c.spec); err != nil {
		return nil, err
	}
	if err := c.checkContent(ch); err != nil {
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

// checkContent refuses chunks that would be written but could not be read
// back: variable-length chunks over the limit on element bytes
// (ResourceExhausted), strings that are not valid UTF-8 and v2 "<U"
// elements that are not Unicode code points (InvalidArgument naming the
// element), which zarr-python and numpy cannot decode.
func (c *Chain) checkContent(ch Chunk) error {
	dt := c.spec.DataType
	switch dt.Kind {
	case zarr.KindString, zarr.KindBytes:
		if int64(len(ch.Data)) > c.limits.MaxVariableBytes {
			return errs.New(errs.ResourceExhausted, "chunk of %d %s elements holds %s of element bytes, more than the per-chunk limit of %s for variable-length data (--max-variable-chunk-bytes)",
				len(ch.Offsets)-1, dt, sizeOf(int64(len(ch.Data))), sizeOf(c.limits.MaxVariableBytes))
		}
		if dt.Kind == zarr.KindString && !utf8.Valid(ch.Data) {
			for i := range len(ch.Offsets) - 1 {
				if !utf8.Valid(ch.Data[ch.Offsets[i]:ch.Offsets[i+1]]) {
					return errs.New(errs.InvalidArgument, "string element %d of the chunk is not valid UTF-8", i)
				}
			}
			// Each element is valid but the whole is not: impossible, as
			// valid UTF-8 sequences concatenate to valid UTF-8.
		}
	case zarr.KindFixedUnicode:
		for off := 0; off+4 <= len(ch.Data); off += 4 {
			if r := binary.LittleEndian.Uint32(ch.Data[off:]); r > unicode.MaxRune {
				return errs.New(errs.InvalidArgument, "%s element %d holds %#x, not a Unicode code point", dt, off/dt.Size, r)
			}
		}
	}
	return nil
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
