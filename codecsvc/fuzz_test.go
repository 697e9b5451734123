package codecsvc

import (
	"bytes"
	"compress/bzip2"
	"math/rand/v2"
	"testing"

	"github.com/zarrgate/zarrgate/zarr"
)

// fuzzDecoder fuzzes one chain's decoder: whatever the input, Decode
// returns a chunk of exactly the right size or an error, and never panics
// (panic recovery is off while fuzzing).
func fuzzDecoder(f *testing.F, codecs, dtype string, shape []int, seeds ...[]byte) {
	recoverPanics = false
	spec := ChunkSpec{Shape: shape, DataType: zarr.MustDataType(dtype)}
	c := chain(f, codecs, spec)
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
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := c.Decode(data)
		if err != nil {
			return
		}
		if err := checkChunk(out, spec); err != nil {
			t.Fatalf("decode returned a malformed chunk: %v", err)
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
