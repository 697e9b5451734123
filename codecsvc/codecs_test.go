package codecsvc

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/zarr"
)

func chain(t testing.TB, codecs string, spec ChunkSpec) *Chain {
	t.Helper()
	var cs []zarr.CodecSpec
	if err := json.Unmarshal([]byte(codecs), &cs); err != nil {
		t.Fatal(err)
	}
	c, err := NewChain(cs, spec)
	if err != nil {
		t.Fatalf("NewChain(%s): %v", codecs, err)
	}
	return c
}

// sample makes a chunk of the spec: smooth values (compressible) with
// noise, or strings of varying length.
func sample(r *rand.Rand, spec ChunkSpec) Chunk {
	n := spec.Elements()
	if spec.DataType.VariableLength() {
		c := Chunk{Offsets: []int64{0}}
		for i := range n {
			c.Data = append(c.Data, strings.Repeat("ü", r.IntN(3))+fmt.Sprint(i*7)...)
			c.Offsets = append(c.Offsets, int64(len(c.Data)))
		}
		return c
	}
	b := make([]byte, spec.Bytes())
	for i := range n {
		v := uint64(i/3) + uint64(r.IntN(2))
		for k := range spec.DataType.Size {
			b[i*spec.DataType.Size+k] = byte(v >> (8 * (k % 8)))
		}
	}
	if spec.DataType.Kind == zarr.KindBool {
		for i := range b {
			b[i] &= 1
		}
	}
	return Chunk{Data: b}
}

var allTypes = []string{"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
	"float16", "float32", "float64", "complex64", "complex128", "r24", "string", "bytes"}

var fixedChains = []string{
	`[{"name":"bytes","configuration":{"endian":"little"}}]`,
	`[{"name":"bytes","configuration":{"endian":"big"}}]`,
	`[{"name":"transpose","configuration":{"order":[2,0,1]}},{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":5,"checksum":true}}]`,
	`[{"name":"bytes","configuration":{"endian":"big"}},{"name":"gzip","configuration":{"level":6}},{"name":"crc32c"}]`,
	`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"blosc","configuration":{"cname":"lz4","clevel":5,"shuffle":"shuffle","typesize":4,"blocksize":0}}]`,
	`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"blosc","configuration":{"cname":"zstd","clevel":2,"shuffle":"bitshuffle","typesize":8,"blocksize":0}}]`,
	`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"numcodecs.zlib","configuration":{"level":1}}]`,
	`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"numcodecs.shuffle","configuration":{"elementsize":2}},{"name":"numcodecs.lz4","configuration":{"acceleration":1}}]`,
	`[{"name":"sharding_indexed","configuration":{"chunk_shape":[2,3,2],"codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":1}}],"index_codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}],"index_location":"start"}}]`,
	`[{"name":"sharding_indexed","configuration":{"chunk_shape":[2,3,4],"codecs":[{"name":"sharding_indexed","configuration":{"chunk_shape":[1,3,2],"codecs":[{"name":"bytes","configuration":{"endian":"big"}}]}}]}}]`,
}

var varChains = []string{
	`[{"name":"vlen-utf8"}]`,
	`[{"name":"transpose","configuration":{"order":[1,2,0]}},{"name":"vlen-bytes"},{"name":"zstd","configuration":{"level":1}},{"name":"crc32c"}]`,
	`[{"name":"sharding_indexed","configuration":{"chunk_shape":[2,1,4],"codecs":[{"name":"vlen-utf8"},{"name":"gzip","configuration":{"level":1}}],"index_location":"end"}}]`,
}

func TestRoundTrips(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	shape := []int{4, 6, 4}
	for _, dt := range allTypes {
		d := zarr.MustDataType(dt)
		chains := fixedChains
		if d.VariableLength() {
			chains = varChains
		}
		for _, cj := range chains {
			spec := ChunkSpec{Shape: shape, DataType: d}
			c := chain(t, cj, spec)
			in := sample(r, spec)
			enc, err := c.Encode(in)
			if err != nil {
				t.Fatalf("%s %s: encode: %v", dt, cj, err)
			}
			out, err := c.Decode(enc)
			if err != nil {
				t.Fatalf("%s %s: decode: %v", dt, cj, err)
			}
			if !bytes.Equal(out.Data, in.Data) || !slices.Equal(out.Offsets, in.Offsets) {
				t.Fatalf("%s %s: round trip differs", dt, cj)
			}
		}
	}
}

// Known answers from the specifications and numcodecs' formats.
func TestKnownAnswers(t *testing.T) {
	i32 := ChunkSpec{Shape: []int{3}, DataType: zarr.MustDataType("int32")}
	// bytes, big endian: each element's bytes reversed.
	enc, _ := chain(t, `[{"name":"bytes","configuration":{"endian":"big"}}]`, i32).Encode(Chunk{Data: []byte{1, 0, 0, 0, 2, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f}})
	if !bytes.Equal(enc, []byte{0, 0, 0, 1, 0, 0, 0, 2, 0x7f, 0xff, 0xff, 0xff}) {
		t.Errorf("big-endian bytes = % x", enc)
	}
	// complex64 swaps its two float32 halves separately.
	c64 := ChunkSpec{Shape: []int{1}, DataType: zarr.MustDataType("complex64")}
	enc, _ = chain(t, `[{"name":"bytes","configuration":{"endian":"big"}}]`, c64).Encode(Chunk{Data: []byte{1, 2, 3, 4, 5, 6, 7, 8}})
	if !bytes.Equal(enc, []byte{4, 3, 2, 1, 8, 7, 6, 5}) {
		t.Errorf("big-endian complex64 = % x", enc)
	}
	// crc32c of "123456789" is e3069283 (the standard check value).
	u8 := ChunkSpec{Shape: []int{9}, DataType: zarr.MustDataType("uint8")}
	enc, _ = chain(t, `[{"name":"bytes"},{"name":"crc32c"}]`, u8).Encode(Chunk{Data: []byte("123456789")})
	if got := binary.LittleEndian.Uint32(enc[9:]); got != 0xe3069283 {
		t.Errorf("crc32c = %08x", got)
	}
	// vlen-utf8: count, then length-prefixed items.
	str := ChunkSpec{Shape: []int{2}, DataType: zarr.MustDataType("string")}
	enc, _ = chain(t, `[{"name":"vlen-utf8"}]`, str).Encode(Chunk{Data: []byte("abé"), Offsets: []int64{0, 1, 4}})
	if !bytes.Equal(enc, []byte{2, 0, 0, 0, 1, 0, 0, 0, 'a', 3, 0, 0, 0, 'b', 0xc3, 0xa9}) {
		t.Errorf("vlen-utf8 = % x", enc)
	}
	// transpose [1,0] of a 2x3 matrix.
	m := ChunkSpec{Shape: []int{2, 3}, DataType: zarr.MustDataType("uint8")}
	enc, _ = chain(t, `[{"name":"transpose","configuration":{"order":[1,0]}},{"name":"bytes"}]`, m).Encode(Chunk{Data: []byte{1, 2, 3, 4, 5, 6}})
	if !bytes.Equal(enc, []byte{1, 4, 2, 5, 3, 6}) {
		t.Errorf("transpose = %v", enc)
	}
	// numcodecs LZ4: uint32 size, then an LZ4 block that pierrec decodes.
	incompressible := make([]byte, 300)
	rr := rand.New(rand.NewPCG(3, 3))
	for i := range incompressible {
		incompressible[i] = byte(rr.Uint32())
	}
	big := ChunkSpec{Shape: []int{300}, DataType: zarr.MustDataType("uint8")}
	enc, _ = chain(t, `[{"name":"bytes"},{"name":"numcodecs.lz4"}]`, big).Encode(Chunk{Data: incompressible})
	out := make([]byte, 300)
	if n, err := lz4.UncompressBlock(enc[4:], out); err != nil || n != 300 || !bytes.Equal(out, incompressible) || binary.LittleEndian.Uint32(enc) != 300 {
		t.Errorf("numcodecs.lz4 literal block: %d %v", n, err)
	}
	// An empty inner chunk (all fill value) takes no space in a shard.
	sh := ChunkSpec{Shape: []int{4}, DataType: zarr.MustDataType("uint8"), FillValue: []byte{9}}
	sc := chain(t, `[{"name":"sharding_indexed","configuration":{"chunk_shape":[2],"codecs":[{"name":"bytes"}]}}]`, sh)
	enc, _ = sc.Encode(Chunk{Data: []byte{9, 9, 1, 2}})
	if len(enc) != 2+2*16+4 || binary.LittleEndian.Uint64(enc[2:]) != math.MaxUint64 || binary.LittleEndian.Uint64(enc[2+16:]) != 0 {
		t.Errorf("shard with an empty inner chunk = % x", enc)
	}
	dec, err := sc.Decode(enc)
	if err != nil || !bytes.Equal(dec.Data, []byte{9, 9, 1, 2}) {
		t.Errorf("decoded shard = %v, %v", dec.Data, err)
	}
}

func TestBadInput(t *testing.T) {
	f32 := ChunkSpec{Shape: []int{256}, DataType: zarr.MustDataType("float32")}
	zeros := make([]byte, 1024)
	r := rand.New(rand.NewPCG(9, 9))
	for i, cj := range fixedChains[:8] {
		spec := ChunkSpec{Shape: []int{4, 8, 8}, DataType: zarr.MustDataType("float32")}
		c := chain(t, cj, spec)
		enc, err := c.Encode(sample(r, spec))
		if err != nil {
			t.Fatal(err)
		}
		// Flipped bits are detectable only where the chain checks integrity
		// (zstd checksum, gzip CRC, zlib Adler-32, crc32c); elsewhere the
		// decoder must only not crash.
		checked := i == 2 || i == 3 || i == 6
		for k, bad := range [][]byte{nil, enc[:len(enc)/2], append(append([]byte{}, enc...), 1, 2, 3), flip(enc)} {
			_, err := c.Decode(bad)
			if k == 3 && !checked {
				continue
			}
			if i < 2 && k == 2 {
				continue
			}
			if err == nil {
				t.Errorf("%s: decoding %d corrupt bytes succeeded", cj, len(bad))
			} else if !errors.Is(err, errs.DataLoss) && !errors.Is(err, errs.InvalidArgument) {
				t.Errorf("%s: %v, want DataLoss or InvalidArgument", cj, err)
			}
		}
	}
	// crc32c mismatch names the checksum.
	c := chain(t, `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}]`, f32)
	enc, _ := c.Encode(Chunk{Data: zeros})
	enc[10] ^= 1
	if _, err := c.Decode(enc); !errors.Is(err, errs.DataLoss) || !strings.Contains(err.Error(), "crc32c") {
		t.Errorf("crc32c mismatch: %v", err)
	}
	// Decompression bombs: 64 MiB of zeros compress to a few KiB; decoding
	// them into a 1 KiB chunk must fail without allocating 64 MiB.
	bomb := make([]byte, 64<<20)
	for _, cj := range []string{`{"name":"zstd","configuration":{"level":1}}`, `{"name":"gzip","configuration":{"level":1}}`,
		`{"name":"numcodecs.zlib","configuration":{"level":1}}`, `{"name":"numcodecs.lz4"}`,
		`{"name":"blosc","configuration":{"cname":"zstd","clevel":1,"shuffle":"noshuffle","typesize":4,"blocksize":0}}`} {
		big := chain(t, `[{"name":"bytes","configuration":{"endian":"little"}},`+cj+`]`, ChunkSpec{Shape: []int{16 << 20}, DataType: zarr.MustDataType("float32")})
		packed, err := big.Encode(Chunk{Data: bomb})
		if err != nil {
			t.Fatal(err)
		}
		small := chain(t, `[{"name":"bytes","configuration":{"endian":"little"}},`+cj+`]`, f32)
		ms0 := heapAlloc()
		if _, err := small.Decode(packed); !errors.Is(err, errs.DataLoss) {
			t.Errorf("%s bomb: %v, want DataLoss", cj, err)
		}
		if ms1 := heapAlloc(); ms1-ms0 > 8<<20 {
			t.Errorf("%s bomb: decoding allocated %d MiB", cj, (ms1-ms0)>>20)
		}
	}
	// A zstd frame that claims a huge size is refused from its header.
	hdr := zstdFrameClaiming(t, 1<<40)
	if _, err := chain(t, `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd"}]`, f32).Decode(hdr); !errors.Is(err, errs.DataLoss) {
		t.Errorf("zstd frame claiming 1 TiB: %v", err)
	}
	// Unknown codecs and bad configurations name the culprit.
	_, err := NewChain([]zarr.CodecSpec{{Name: "bytes", Configuration: json.RawMessage(`{"endian":"little"}`)}, {Name: "brotli"}}, f32)
	if !errors.Is(err, errs.Unimplemented) || !strings.Contains(err.Error(), "brotli") {
		t.Errorf("unknown codec: %v", err)
	}
	for cj, word := range map[string]string{
		`[{"name":"bytes","configuration":{"endian":"middle"}}]`:                "endian",
		`[{"name":"bytes","configuration":{"endian":"little","extra":1}}]`:      "extra",
		`[{"name":"gzip","configuration":{"level":1}}]`:                         "array-to-bytes",
		`[{"name":"bytes"},{"name":"transpose","configuration":{"order":[0]}}]`: "before",
		`[{"name":"transpose","configuration":{"order":[1]}},{"name":"bytes"}]`: "permutation",
		`[{"name":"bytes"},{"name":"blosc","configuration":{"cname":"lzma"}}]`:  "cname",
		`[{"name":"vlen-utf8"}]`: "vlen",
		`[{"name":"sharding_indexed","configuration":{"chunk_shape":[3],"codecs":[{"name":"bytes"}]}}]`: "divide",
	} {
		var cs []zarr.CodecSpec
		json.Unmarshal([]byte(cj), &cs)
		if _, err := NewChain(cs, ChunkSpec{Shape: []int{256}, DataType: zarr.MustDataType("uint16")}); err == nil || !strings.Contains(err.Error(), word) {
			t.Errorf("%s: %v, want an error naming %q", cj, err, word)
		}
	}
	// Encoding a chunk of the wrong size is refused.
	if _, err := c.Encode(Chunk{Data: zeros[:10]}); !errors.Is(err, errs.InvalidArgument) {
		t.Errorf("encoding a short chunk: %v", err)
	}
	// bz2 round-trips through both libraries.
	bz := chain(t, `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"numcodecs.bz2","configuration":{"level":9}}]`, f32)
	if enc, err := bz.Encode(Chunk{Data: zeros}); err != nil {
		t.Errorf("bz2 encode: %v", err)
	} else if dec, err := bz.Decode(enc); err != nil || !bytes.Equal(dec.Data, zeros) {
		t.Errorf("bz2 round trip: %v", err)
	}
}

func flip(b []byte) []byte {
	out := append([]byte(nil), b...)
	for i := len(out) / 3; i < len(out); i += 7 {
		out[i] ^= 0x5a
	}
	return out
}

func zstdFrameClaiming(t *testing.T, size uint64) []byte {
	// A frame header with a single-segment frame content size field.
	b := []byte{0x28, 0xb5, 0x2f, 0xfd, 0xe0} // magic, FHD: FCS 8 bytes, single segment
	b = binary.LittleEndian.AppendUint64(b, size)
	b = append(b, 0x01, 0x00, 0x00) // a raw, last block of 0 bytes
	var h zstd.Header
	if err := h.Decode(b); err != nil || !h.HasFCS || h.FrameContentSize != size {
		t.Fatalf("test frame header: %v %+v", err, h)
	}
	return b
}

func TestEngines(t *testing.T) {
	spec := &codec.BatchSpec{Codecs: []zarr.CodecSpec{{Name: "bytes", Configuration: json.RawMessage(`{"endian":"little"}`)}, {Name: "crc32c"}},
		Shape: []int64{8}, DataType: zarr.MustDataType("int16")}
	l := NewLocal()
	chunks := []Chunk{{Data: make([]byte, 16)}, {Data: bytes.Repeat([]byte{1}, 16)}}
	enc, err := l.Encode(context.Background(), spec, chunks)
	if err != nil {
		t.Fatal(err)
	}
	enc[1] = append([]byte(nil), enc[1]...)
	enc[1][3] ^= 1
	_, err = l.Decode(context.Background(), spec, enc)
	var ie *codec.ItemError
	if !errors.As(err, &ie) || ie.Index != 1 || !errors.Is(err, errs.DataLoss) {
		t.Fatalf("batch with a corrupt second chunk: %v", err)
	}
}

func heapAlloc() int64 {
	var m runtimeMemStats
	readMemStats(&m)
	return int64(m.TotalAlloc)
}

func TestRaw(t *testing.T) {
	spec := func(js string) []zarr.CodecSpec {
		var c []zarr.CodecSpec
		if err := json.Unmarshal([]byte(js), &c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, tc := range []struct {
		chain, dtype string
		raw          bool
	}{
		{`[{"name":"bytes","configuration":{"endian":"little"}}]`, "float32", true},
		{`[{"name":"bytes"}]`, "int64", true},
		{`[{"name":"bytes","configuration":{"endian":"big"}}]`, "float32", false},
		{`[{"name":"bytes","configuration":{"endian":"big"}}]`, "uint8", true},
		{`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":3}}]`, "float32", false},
		{`[{"name":"transpose","configuration":{"order":[1,0]}},{"name":"bytes","configuration":{"endian":"little"}}]`, "float32", false},
		{`[{"name":"vlen-utf8"}]`, "string", false},
		{`[{"name":"bytes","configuration":{"endian":"middle"}}]`, "float32", false},
	} {
		if got := Raw(spec(tc.chain), zarr.MustDataType(tc.dtype)); got != tc.raw {
			t.Errorf("Raw(%s, %s) = %v, want %v", tc.chain, tc.dtype, got, tc.raw)
		}
	}
}
