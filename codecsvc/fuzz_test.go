package codecsvc

import (
	"bytes"
	"compress/bzip2"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/grpcerr"
	"github.com/zarrgate/zarrgate/zarr"
)

// fuzzLimits are the limits fuzzed chains run under: small, so that the
// allocation bound below means something for variable-length data.
var fuzzLimits = codec.Limits{MaxChunkBytes: 64 << 20, MaxVariableBytes: 256 << 10}

// fuzzDecoder fuzzes one chain's decoder: whatever the input, Decode
// returns a chunk of exactly the right size (variable-length: within the
// limit on element bytes) or an error with a client-input code (DataLoss,
// InvalidArgument, ResourceExhausted), never panics (panic recovery is off
// while fuzzing) and never allocates far beyond the chunk's bound.
func fuzzDecoder(f *testing.F, codecs, dtype string, shape []int, seeds ...[]byte) {
	recoverPanics = false
	spec := ChunkSpec{Shape: shape, DataType: zarr.MustDataType(dtype)}
	c, err := NewChainLimits(codecSpecs(f, codecs), spec, fuzzLimits)
	if err != nil {
		f.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 1))
	for range 3 {
		enc, err := c.Encode(sample(r, spec))
		if err == nil {
			f.Add(enc)
		}
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Add([]byte{})
	// Whatever the input claims, decoding allocates little more than the
	// chunk's bound and its stages' buffers (bzip2's block buffers for up
	// to 900 kB blocks are the floor).
	limit := 8<<20 + 2*(c.DecodedBound()+c.WorkingBound())
	f.Fuzz(func(t *testing.T, data []byte) {
		a0 := heapAlloc()
		out, err := c.Decode(data)
		if a := heapAlloc() - a0; a > limit+4*int64(len(data)) {
			t.Fatalf("decoding %d bytes allocated %d KiB, bound %d KiB", len(data), a>>10, limit>>10)
		}
		if err != nil {
			if !errors.Is(err, errs.DataLoss) && !errors.Is(err, errs.InvalidArgument) && !errors.Is(err, errs.ResourceExhausted) {
				t.Fatalf("decode failed with %v (code %v)", err, grpcerr.Code(err))
			}
			return
		}
		if err := checkChunk(out, spec); err != nil {
			t.Fatalf("decode returned a malformed chunk: %v", err)
		}
		if int64(len(out.Data)) > max(spec.Bytes(), fuzzLimits.MaxVariableBytes) {
			t.Fatalf("decode returned %d bytes, over the limit", len(out.Data))
		}
	})
}

const le = `{"name":"bytes","configuration":{"endian":"little"}}`

func FuzzDecodeBytes(f *testing.F) {
	fuzzDecoder(f, `[{"name":"bytes","configuration":{"endian":"big"}}]`, "float64", []int{5, 3})
}
func FuzzDecodeTranspose(f *testing.F) {
	fuzzDecoder(f, `[{"name":"transpose","configuration":{"order":[1,2,0]}},`+le+`]`, "int16", []int{2, 3, 4})
}
func FuzzDecodeGzip(f *testing.F) {
	fuzzDecoder(f, `[`+le+`,{"name":"gzip","configuration":{"level":5}}]`, "int32", []int{64})
}
func FuzzDecodeZstd(f *testing.F) {
	fuzzDecoder(f, `[`+le+`,{"name":"zstd","configuration":{"level":3,"checksum":true}}]`, "int32", []int{64})
}
func FuzzDecodeBlosc(f *testing.F) {
	fuzzDecoder(f, `[`+le+`,{"name":"blosc","configuration":{"cname":"lz4","clevel":5,"shuffle":"shuffle","typesize":4,"blocksize":0}}]`, "float32", []int{300})
}
func FuzzDecodeBloscZstd(f *testing.F) {
	fuzzDecoder(f, `[`+le+`,{"name":"blosc","configuration":{"cname":"zstd","clevel":5,"shuffle":"bitshuffle","typesize":4}}]`, "float32", []int{300})
}
func FuzzDecodeBloscZlib(f *testing.F) {
	fuzzDecoder(f, `[`+le+`,{"name":"blosc","configuration":{"cname":"zlib","clevel":5,"shuffle":"noshuffle","typesize":8}}]`, "int64", []int{200})
}
func FuzzDecodeBloscBlosclz(f *testing.F) {
	fuzzDecoder(f, `[`+le+`,{"name":"blosc","configuration":{"cname":"blosclz","clevel":9,"shuffle":"shuffle","typesize":2,"blocksize":256}}]`, "int16", []int{600})
}
func FuzzDecodeBloscSnappy(f *testing.F) {
	fuzzDecoder(f, `[`+le+`,{"name":"blosc","configuration":{"cname":"snappy","clevel":5,"shuffle":"noshuffle","typesize":1}}]`, "uint8", []int{1000})
}

// Compressed strings: the element bytes come from a stream no header
// bounds; the fuzz limits hold them to 256 KiB.
func FuzzDecodeVlenGzip(f *testing.F) {
	fuzzDecoder(f, `[{"name":"vlen-utf8"},{"name":"gzip","configuration":{"level":1}}]`, "string", []int{16})
}
func FuzzDecodeVlenZstd(f *testing.F) {
	fuzzDecoder(f, `[{"name":"vlen-utf8"},{"name":"zstd","configuration":{"level":1}}]`, "string", []int{16})
}
func FuzzDecodeVlenBlosc(f *testing.F) {
	fuzzDecoder(f, `[{"name":"vlen-bytes"},{"name":"blosc","configuration":{"cname":"lz4","clevel":5,"shuffle":"noshuffle","typesize":1}}]`, "bytes", []int{16})
}
func FuzzDecodeVlenBZ2(f *testing.F) {
	fuzzDecoder(f, `[{"name":"vlen-bytes"},{"name":"numcodecs.bz2","configuration":{"level":1}}]`, "bytes", []int{4})
}
func FuzzDecodeVlenLZ4(f *testing.F) {
	fuzzDecoder(f, `[{"name":"vlen-bytes"},{"name":"numcodecs.lz4"}]`, "bytes", []int{4})
}

func FuzzDecodeCRC32C(f *testing.F) {
	fuzzDecoder(f, `[`+le+`,{"name":"crc32c"}]`, "uint16", []int{10})
}
func FuzzDecodeVlen(f *testing.F) {
	fuzzDecoder(f, `[{"name":"vlen-utf8"}]`, "string", []int{3, 2})
}
func FuzzDecodeSharding(f *testing.F) {
	fuzzDecoder(f, `[{"name":"sharding_indexed","configuration":{"chunk_shape":[2,2],"codecs":[`+le+`,{"name":"zstd","configuration":{"level":1}}]}}]`, "int32", []int{4, 6})
}
func FuzzDecodeShardingVlen(f *testing.F) {
	fuzzDecoder(f, `[{"name":"sharding_indexed","configuration":{"chunk_shape":[2],"codecs":[{"name":"vlen-bytes"}],"index_location":"start"}}]`, "bytes", []int{6})
}
func FuzzDecodeZlib(f *testing.F) {
	fuzzDecoder(f, `[`+le+`,{"name":"numcodecs.zlib","configuration":{"level":1}}]`, "int64", []int{32})
}
func FuzzDecodeLZ4(f *testing.F) {
	fuzzDecoder(f, `[`+le+`,{"name":"numcodecs.lz4"}]`, "int64", []int{32})
}
func FuzzDecodeBZ2(f *testing.F) {
	// A real bzip2 stream of 256 zero bytes as the seed (Go has no writer).
	seed := []byte("BZh91AY&SY\x0e\x09\xe2\xdf\x00\x00\x00\x40\x00\x40\x00\x20\x00\x21\x18\x46\x82\xee\x48\xa7\x0a\x12\x01\xc1\x3c\x5b\xe0")
	if out, err := bytes.NewBuffer(nil).ReadFrom(bzip2.NewReader(bytes.NewReader(seed))); err != nil || out != 256 {
		seed = nil
	}
	fuzzDecoder(f, `[`+le+`,{"name":"numcodecs.bz2","configuration":{"level":1}}]`, "uint8", []int{256}, seed)
}
func FuzzDecodeShuffle(f *testing.F) {
	fuzzDecoder(f, `[`+le+`,{"name":"numcodecs.shuffle","configuration":{"elementsize":4}}]`, "float32", []int{9})
}
func FuzzDecodeDelta(f *testing.F) {
	fuzzDecoder(f, `[{"name":"numcodecs.delta","configuration":{"dtype":"<i4","astype":"<i2"}},`+le+`]`, "int32", []int{16})
}
func FuzzDecodeNumcodecsGzip(f *testing.F) {
	fuzzDecoder(f, `[`+le+`,{"name":"numcodecs.gzip","configuration":{"level":1}}]`, "uint16", []int{40})
}
func FuzzDecodeVlenBytes(f *testing.F) {
	fuzzDecoder(f, `[{"name":"transpose","configuration":{"order":[1,0]}},{"name":"vlen-bytes"}]`, "bytes", []int{2, 3})
}
func FuzzDecodeNestedSharding(f *testing.F) {
	fuzzDecoder(f, `[{"name":"sharding_indexed","configuration":{"chunk_shape":[4,2],"index_location":"start","codecs":[
		{"name":"sharding_indexed","configuration":{"chunk_shape":[2,2],"codecs":[`+le+`,{"name":"crc32c"}],"index_codecs":[`+le+`]}}]}}]`, "uint16", []int{4, 4})
}

// FuzzDecodeShardPartial drives the partial-read path the gateway uses:
// the index from its range, then each inner chunk from its entry's range.
func FuzzDecodeShardPartial(f *testing.F) {
	recoverPanics = false
	spec := ChunkSpec{Shape: []int{4, 6}, DataType: zarr.MustDataType("int32")}
	c := chain(f, `[{"name":"sharding_indexed","configuration":{"chunk_shape":[2,3],"index_codecs":[`+le+`],"codecs":[`+le+`,{"name":"gzip","configuration":{"level":1}}]}}]`, spec)
	s := c.Shard()
	r := rand.New(rand.NewPCG(2, 2))
	for range 3 {
		if enc, err := c.Encode(sample(r, spec)); err == nil {
			f.Add(enc)
		}
	}
	f.Fuzz(func(t *testing.T, shard []byte) {
		if int64(len(shard)) < s.IndexSize() {
			return
		}
		x, err := s.DecodeIndex(fetch(shard, codec.IndexRange(s)))
		if err != nil {
			return
		}
		for i := range x {
			b, err := codec.InnerBytes(shard, x, i)
			if err != nil {
				continue
			}
			if ch, err := s.DecodeInner(x[i], b); err == nil {
				if err := checkChunk(ch, s.InnerSpec()); err != nil {
					t.Fatalf("inner chunk %d: %v", i, err)
				}
			}
		}
	})
}

// FuzzDecodeLegacyShard fuzzes the sharding storage transformer's layout.
func FuzzDecodeLegacyShard(f *testing.F) {
	recoverPanics = false
	chunk := ChunkSpec{Shape: []int{2, 2}, DataType: zarr.MustDataType("float32")}
	s, err := NewLegacyShard([]zarr.CodecSpec{{Name: "bytes", Configuration: []byte(`{"endian":"little"}`)}, {Name: "zstd"}}, chunk, []int{2, 3})
	if err != nil {
		f.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 3))
	for range 3 {
		if enc, err := s.Encode(sample(r, s.Spec()), s.Spec()); err == nil {
			f.Add(enc)
		}
	}
	f.Fuzz(func(t *testing.T, shard []byte) {
		if out, err := s.Decode(shard, s.Spec()); err == nil {
			if err := checkChunk(out, s.Spec()); err != nil {
				t.Fatal(err)
			}
		}
	})
}
