package codecsvc

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/zarr"
)

// Each codec sees the representation the codecs before it produce: after
// transpose [1,0], a 4x6 chunk is 6x4, so inner chunks of 3x2 divide it
// (and would not divide 4x6).
func TestChainRepresentations(t *testing.T) {
	spec := ChunkSpec{Shape: []int{4, 6}, DataType: zarr.MustDataType("float64")}
	c := chain(t, `[{"name":"transpose","configuration":{"order":[1,0]}},
		{"name":"sharding_indexed","configuration":{"chunk_shape":[3,2],"codecs":[{"name":"bytes","configuration":{"endian":"big"}}]}},
		{"name":"zstd","configuration":{"level":1}},{"name":"crc32c"}]`, spec)
	in := sample(rand.New(rand.NewPCG(8, 8)), spec)
	enc, err := c.Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.Decode(enc)
	if err != nil || !bytes.Equal(out.Data, in.Data) {
		t.Fatalf("round trip: %v", err)
	}
	if c.Shard() != nil {
		t.Error("a chain with codecs around sharding exposes its layout")
	}
	var cs []zarr.CodecSpec
	json.Unmarshal([]byte(`[{"name":"sharding_indexed","configuration":{"chunk_shape":[3,2],"codecs":[{"name":"bytes"}]}}]`), &cs)
	if _, err := NewChain(cs, spec); !errors.Is(err, errs.InvalidArgument) || !strings.Contains(err.Error(), "chunk_shape") {
		t.Errorf("3x2 inner chunks of a 4x6 shard: %v", err)
	}
}

// A codec the document lets readers skip is skipped when unknown; one it
// does not is Unimplemented, named.
func TestChainMustUnderstand(t *testing.T) {
	spec := ChunkSpec{Shape: []int{3}, DataType: zarr.MustDataType("uint8")}
	no, yes := false, true
	skip := []zarr.CodecSpec{{Name: "bytes"}, {Name: "x-annotation", MustUnderstand: &no}}
	c, err := NewChain(skip, spec)
	if err != nil {
		t.Fatal(err)
	}
	if enc, err := c.Encode(Chunk{Data: []byte{1, 2, 3}}); err != nil || !bytes.Equal(enc, []byte{1, 2, 3}) {
		t.Errorf("encode with a skipped codec: %v %v", enc, err)
	}
	skip[1].MustUnderstand = &yes
	if _, err := NewChain(skip, spec); !errors.Is(err, errs.Unimplemented) || !strings.Contains(err.Error(), "x-annotation") {
		t.Errorf("unknown codec that must be understood: %v", err)
	}
	for _, cj := range []string{`[]`, `[{"name":"bytes"},{"name":"bytes"}]`} {
		var cs []zarr.CodecSpec
		json.Unmarshal([]byte(cj), &cs)
		if _, err := NewChain(cs, spec); !errors.Is(err, errs.InvalidArgument) || !strings.Contains(err.Error(), "array-to-bytes") {
			t.Errorf("%s: %v, want exactly one array-to-bytes codec", cj, err)
		}
	}
}

// A chain is safe for concurrent use (run with -race).
func TestChainConcurrent(t *testing.T) {
	spec := ChunkSpec{Shape: []int{16, 16}, DataType: zarr.MustDataType("float32")}
	c := chain(t, `[{"name":"sharding_indexed","configuration":{"chunk_shape":[8,8],"codecs":[
		{"name":"transpose","configuration":{"order":[1,0]}},{"name":"bytes","configuration":{"endian":"big"}},
		{"name":"zstd","configuration":{"level":3,"checksum":true}},{"name":"crc32c"}]}}]`, spec)
	done := make(chan error)
	for g := range 4 {
		go func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for range 50 {
				in := sample(r, spec)
				enc, err := c.Encode(in)
				if err != nil {
					done <- err
					return
				}
				out, err := c.Decode(enc)
				if err != nil || !bytes.Equal(out.Data, in.Data) {
					done <- errors.New("concurrent round trip differs")
					return
				}
			}
			done <- nil
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// numcodecs' v2 codecs round-trip on the types they accept.
func TestNumcodecsRoundTrips(t *testing.T) {
	r := rand.New(rand.NewPCG(10, 10))
	for _, tc := range []struct{ dtype, codecs string }{
		{"int32", `[{"name":"numcodecs.delta","configuration":{"dtype":"<i4"}},{"name":"bytes","configuration":{"endian":"little"}},{"name":"numcodecs.zlib","configuration":{"level":5}}]`},
		{"uint16", `[{"name":"numcodecs.delta","configuration":{"dtype":"<u2","astype":"<u2"}},{"name":"bytes","configuration":{"endian":"little"}},{"name":"numcodecs.bz2","configuration":{"level":1}}]`},
		{"int64", `[{"name":"numcodecs.delta","configuration":{"dtype":"<i8","astype":"<i8"}},{"name":"bytes","configuration":{"endian":"little"}},{"name":"numcodecs.shuffle","configuration":{"elementsize":8}},{"name":"numcodecs.lz4"}]`},
		{"float64", `[{"name":"numcodecs.delta","configuration":{"dtype":"<f8"}},{"name":"bytes","configuration":{"endian":"little"}},{"name":"numcodecs.gzip","configuration":{"level":1}}]`},
		{"float32", `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"numcodecs.shuffle","configuration":{"elementsize":4}},{"name":"numcodecs.zstd","configuration":{"level":1}}]`},
	} {
		spec := ChunkSpec{Shape: []int{5, 7}, DataType: zarr.MustDataType(tc.dtype)}
		c := chain(t, tc.codecs, spec)
		in := sample(r, spec)
		enc, err := c.Encode(in)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.dtype, tc.codecs, err)
		}
		if out, err := c.Decode(enc); err != nil || !bytes.Equal(out.Data, in.Data) {
			t.Errorf("%s %s: round trip: %v", tc.dtype, tc.codecs, err)
		}
	}
}

// TestPooledDecode checks which decoded chunks come in a pool buffer of
// their own, and that recycled buffers never leak old contents or get
// shared.
func TestPooledDecode(t *testing.T) {
	spec := ChunkSpec{Shape: []int{128, 128}, DataType: zarr.MustDataType("float32")} // 64 KiB
	for _, c := range []struct {
		codecs string
		pooled bool
	}{
		{`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":1}}]`, true},
		{`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":1}},{"name":"crc32c"}]`, true},
		// Swapped where it lies, in the zstd buffer.
		{`[{"name":"bytes","configuration":{"endian":"big"}},{"name":"zstd","configuration":{"level":1}}]`, true},
		{`[{"name":"bytes","configuration":{"endian":"big"}},{"name":"zstd","configuration":{"level":1}},{"name":"crc32c"}]`, true},
		// The decoded data moves out of the zstd buffer: transposed.
		{`[{"name":"transpose","configuration":{"order":[1,0]}},{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":1}}]`, false},
		{`[{"name":"bytes","configuration":{"endian":"little"}}]`, false},
		{`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"gzip","configuration":{"level":1}}]`, true},
		{`[{"name":"bytes","configuration":{"endian":"big"}},{"name":"gzip","configuration":{"level":1}}]`, true},
		{`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"blosc","configuration":{"cname":"lz4","clevel":5,"shuffle":"shuffle","typesize":4,"blocksize":0}}]`, true},
		{`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"blosc","configuration":{"cname":"zstd","clevel":1,"shuffle":"bitshuffle","typesize":4,"blocksize":0}}]`, true},
	} {
		ch := chain(t, c.codecs, spec)
		r := rand.New(rand.NewPCG(1, 1))
		var kept []Chunk
		var want [][]byte
		for round := range 6 {
			in := sample(r, spec)
			enc, err := ch.Encode(in)
			if err != nil {
				t.Fatal(err)
			}
			out, err := ch.Decode(enc)
			if err != nil || !bytes.Equal(out.Data, in.Data) {
				t.Fatalf("%s round %d: decoded data differs (%v)", c.codecs, round, err)
			}
			if out.Lent() != c.pooled {
				t.Fatalf("%s: Lent = %v, want %v", c.codecs, out.Lent(), c.pooled)
			}
			// Keep some chunks, recycle the others as the gateway does.
			if round%2 == 0 {
				kept, want = append(kept, out), append(want, in.Data)
			} else {
				out.Release()
			}
		}
		for i, k := range kept {
			if !bytes.Equal(k.Data, want[i]) {
				t.Fatalf("%s: a kept chunk was overwritten by a later decode", c.codecs)
			}
		}
	}
}

// TestSwapInto checks the word-at-a-time byte swaps against swapping each
// group byte by byte, for every group size and length, into another
// buffer and in place.
func TestSwapInto(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 2))
	for _, unit := range []int{1, 2, 3, 4, 8, 16} {
		for n := 0; n <= 72; n += unit {
			src := make([]byte, n)
			for i := range src {
				src[i] = byte(r.Uint32())
			}
			want := make([]byte, n)
			for i := 0; i+unit <= n; i += unit {
				for k := range unit {
					want[i+k] = src[i+unit-1-k]
				}
			}
			dst := make([]byte, n+3)
			swapInto(dst, src, unit)
			if !bytes.Equal(dst[:n], want) || !bytes.Equal(dst[n:], []byte{0, 0, 0}) {
				t.Fatalf("unit %d, %d bytes: got %x, want %x", unit, n, dst[:n], want)
			}
			in := bytes.Clone(src)
			swapInto(in, in, unit)
			if !bytes.Equal(in, want) {
				t.Fatalf("unit %d, %d bytes in place: got %x, want %x", unit, n, in, want)
			}
		}
	}
}

// TestBigEndianDecodeLeavesItsInput: a chain that swaps the bytes of the
// encoded chunk itself (bytes alone, or after a codec that returns a view
// of its input, crc32c) must not swap them where they lie: the input is
// the caller's.
func TestBigEndianDecodeLeavesItsInput(t *testing.T) {
	spec := ChunkSpec{Shape: []int{64, 64}, DataType: zarr.MustDataType("float64")}
	for _, codecs := range []string{
		`[{"name":"bytes","configuration":{"endian":"big"}}]`,
		`[{"name":"bytes","configuration":{"endian":"big"}},{"name":"crc32c"}]`,
	} {
		ch := chain(t, codecs, spec)
		in := sample(rand.New(rand.NewPCG(3, 3)), spec)
		enc, err := ch.Encode(in)
		if err != nil {
			t.Fatal(err)
		}
		keep := bytes.Clone(enc)
		out, err := ch.Decode(enc)
		if err != nil || !bytes.Equal(out.Data, in.Data) {
			t.Fatalf("%s: decoded data differs (%v)", codecs, err)
		}
		if !bytes.Equal(enc, keep) {
			t.Fatalf("%s: Decode changed its input", codecs)
		}
	}
}
