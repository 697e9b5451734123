package codecsvc

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/codecsvc/blosc"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/zarr"
)

func codecSpecs(t testing.TB, js string) []zarr.CodecSpec {
	t.Helper()
	var cs []zarr.CodecSpec
	if err := json.Unmarshal([]byte(js), &cs); err != nil {
		t.Fatal(err)
	}
	return cs
}

// Defect 2 of issue 12: a 17-byte zstd frame claiming 2^39 bytes, for a
// chunk of 2^40 uint8, crashed the codec worker (fatal: out of memory).
// The chunk is now refused for its size before anything is allocated.
func TestZstdBombHugeChunk(t *testing.T) {
	frame := zstdFrameClaiming(t, 1<<39)
	spec := &codec.BatchSpec{Codecs: []zarr.CodecSpec{{Name: "bytes"}, {Name: "zstd", Configuration: json.RawMessage(`{"level":3}`)}},
		Shape: []int64{1 << 40}, DataType: zarr.MustDataType("uint8")}
	a0 := heapAlloc()
	_, err := NewLocal().Decode(context.Background(), spec, [][]byte{frame})
	if err == nil {
		t.Fatal("decoded a 2^40-byte chunk")
	}
	if !errors.Is(err, errs.ResourceExhausted) || !strings.Contains(err.Error(), "1 GiB") {
		t.Errorf("2^40-byte chunk: %v, want ResourceExhausted naming the 1 GiB limit", err)
	}
	if a := heapAlloc() - a0; a > 1<<20 {
		t.Errorf("refusing it allocated %d KiB", a>>10)
	}
}

// Chunk sizes are overflow-checked and held to the limits when a chain is
// built, before anything is allocated for the chunk.
func TestCheckChunkSize(t *testing.T) {
	u8, f64, str := zarr.MustDataType("uint8"), zarr.MustDataType("float64"), zarr.MustDataType("string")
	lim := codec.Limits{MaxChunkBytes: 1 << 20, MaxVariableBytes: 1 << 10}
	for _, tc := range []struct {
		spec ChunkSpec
		want *errs.Kind // nil: accepted
	}{
		{ChunkSpec{Shape: []int{1 << 20}, DataType: u8}, nil},
		{ChunkSpec{Shape: []int{1<<20 + 1}, DataType: u8}, errs.ResourceExhausted},
		{ChunkSpec{Shape: []int{1 << 17}, DataType: f64}, nil},
		{ChunkSpec{Shape: []int{1<<17 + 1}, DataType: f64}, errs.ResourceExhausted},
		{ChunkSpec{Shape: []int{1 << 31, 1 << 31, 1 << 2}, DataType: u8}, errs.InvalidArgument}, // 2^64 elements
		{ChunkSpec{Shape: []int{1 << 31, 1 << 31}, DataType: f64}, errs.InvalidArgument},        // 2^65 bytes
		{ChunkSpec{Shape: []int{1 << 62, 0}, DataType: f64}, nil},                               // empty
		{ChunkSpec{Shape: []int{-1}, DataType: u8}, errs.InvalidArgument},
		{ChunkSpec{Shape: []int{1 << 10}, DataType: str}, nil},
		{ChunkSpec{Shape: []int{1 << 17}, DataType: str}, errs.ResourceExhausted}, // 1 MiB of offsets
		{ChunkSpec{Shape: []int{64}, DataType: str, FillValue: []byte(strings.Repeat("x", 17))}, errs.ResourceExhausted},
	} {
		err := CheckChunkSize(tc.spec, lim)
		if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("CheckChunkSize(%v %s): %v, want %v", tc.spec.Shape, tc.spec.DataType, err, tc.want)
		}
		if tc.want == errs.ResourceExhausted && !strings.Contains(err.Error(), "limit of 1") {
			t.Errorf("CheckChunkSize(%v %s): %v does not name the limit", tc.spec.Shape, tc.spec.DataType, err)
		}
	}
	// Every constructor checks, before allocating: chains, the chains of
	// a widening array codec, shards and their index, and Local.
	a0 := heapAlloc()
	huge := ChunkSpec{Shape: []int{1 << 36}, DataType: u8}
	for name, err := range map[string]error{
		"NewChain": func() error { _, err := NewChain(codecSpecs(t, `[{"name":"bytes"}]`), huge); return err }(),
		"delta astype": func() error {
			_, err := NewChainLimits(codecSpecs(t, `[{"name":"numcodecs.delta","configuration":{"dtype":"|u1","astype":"<i8"}},{"name":"bytes"}]`),
				ChunkSpec{Shape: []int{1 << 18}, DataType: u8}, lim)
			return err
		}(),
		"NewShard": func() error {
			_, err := NewShard(json.RawMessage(`{"chunk_shape":[68719476736],"codecs":[{"name":"bytes"}]}`), huge)
			return err
		}(),
		"sharding as a codec": func() error {
			_, err := NewChain(codecSpecs(t, `[{"name":"sharding_indexed","configuration":{"chunk_shape":[1024],"codecs":[{"name":"bytes"}]}}]`), huge)
			return err
		}(),
		"shard index": func() error {
			_, err := NewShardLimits(json.RawMessage(`{"chunk_shape":[1],"codecs":[{"name":"bytes"}]}`), ChunkSpec{Shape: []int{1 << 20}, DataType: u8}, lim)
			return err
		}(),
		"NewLegacyShard": func() error {
			_, err := NewLegacyShard(codecSpecs(t, `[{"name":"bytes"}]`), ChunkSpec{Shape: []int{1 << 20}, DataType: u8}, []int{1 << 27})
			return err
		}(),
		"Local.Chain": func() error {
			_, err := NewLocal().Chain(&codec.BatchSpec{Codecs: codecSpecs(t, `[{"name":"bytes"}]`), Shape: []int64{1 << 40, 1 << 40}, DataType: u8})
			return err
		}(),
	} {
		if !errors.Is(err, errs.ResourceExhausted) && !errors.Is(err, errs.InvalidArgument) {
			t.Errorf("%s of a huge chunk: %v, want ResourceExhausted or InvalidArgument", name, err)
		}
	}
	if a := heapAlloc() - a0; a > 1<<20 {
		t.Errorf("refusing huge chunks allocated %d KiB", a>>10)
	}
	// A shard larger than the limit is fine as a layout (it is read and
	// written an inner chunk at a time) when its inner chunks and index fit.
	if _, err := NewShard(json.RawMessage(`{"chunk_shape":[1048576],"codecs":[{"name":"bytes"}]}`), ChunkSpec{Shape: []int{1 << 32}, DataType: u8}); err != nil {
		t.Errorf("NewShard of a 4 GiB shard of 1 MiB chunks: %v", err)
	}
	// A legal chunk at the limit is built.
	if _, err := NewChainLimits(codecSpecs(t, `[{"name":"bytes"}]`), ChunkSpec{Shape: []int{1 << 20}, DataType: u8}, lim); err != nil {
		t.Errorf("chunk at the limit: %v", err)
	}
}

// zeroBomb compresses n zero bytes with a chain's bytes-to-bytes codec.
func zeroBomb(t testing.TB, bb string, n int) []byte {
	t.Helper()
	c := chain(t, `[{"name":"bytes"},`+bb+`]`, ChunkSpec{Shape: []int{n}, DataType: zarr.MustDataType("uint8")})
	enc, err := c.Encode(Chunk{Data: make([]byte, n)})
	if err != nil {
		t.Fatal(err)
	}
	return enc
}

var bombCodecs = []string{
	`{"name":"zstd","configuration":{"level":3}}`,
	`{"name":"gzip","configuration":{"level":1}}`,
	`{"name":"numcodecs.zlib","configuration":{"level":1}}`,
	`{"name":"numcodecs.bz2","configuration":{"level":1}}`,
	`{"name":"numcodecs.lz4"}`,
	`{"name":"blosc","configuration":{"cname":"lz4","clevel":5,"shuffle":"noshuffle","typesize":1,"blocksize":0}}`,
	`{"name":"blosc","configuration":{"cname":"zstd","clevel":5,"shuffle":"shuffle","typesize":4,"blocksize":0}}`,
	`{"name":"blosc","configuration":{"cname":"zlib","clevel":5,"shuffle":"bitshuffle","typesize":4,"blocksize":0}}`,
	`{"name":"blosc","configuration":{"cname":"blosclz","clevel":5,"shuffle":"noshuffle","typesize":1,"blocksize":0}}`,
	`{"name":"blosc","configuration":{"cname":"snappy","clevel":5,"shuffle":"noshuffle","typesize":1,"blocksize":0}}`,
}

// Defect 4 of issue 12: a compressed chunk of a string array decoded to
// whatever its stream held (1 MiB of gzip under 16 strings: 4.1 GiB RSS).
// Now a string chunk's element bytes stop at the per-chunk limit with
// ResourceExhausted, fast, costing memory in proportion to the limit.
func TestStringBombs(t *testing.T) {
	const limit = 2 << 20
	lim := codec.Limits{MaxVariableBytes: limit}
	spec := ChunkSpec{Shape: []int{16}, DataType: zarr.MustDataType("string")}
	// A vlen stream of 16 strings, the last of 32 MiB of zeros, 16 times
	// the limit (valid UTF-8: a decoder cannot tell it from real data
	// before it ends). Small enough to compress quickly under -race.
	const big = 32 << 20
	stream := binary.LittleEndian.AppendUint32(nil, 16)
	for range 15 {
		stream = binary.LittleEndian.AppendUint32(stream, 1)
		stream = append(stream, 'a')
	}
	stream = binary.LittleEndian.AppendUint32(stream, big)
	stream = append(stream, make([]byte, big)...)
	for _, bb := range bombCodecs {
		if strings.Contains(bb, "lz4") && !strings.Contains(bb, "blosc") {
			continue // numcodecs LZ4 stores the size: TestLyingHeaders
		}
		full := chain(t, `[{"name":"bytes"},`+bb+`]`, ChunkSpec{Shape: []int{len(stream)}, DataType: zarr.MustDataType("uint8")})
		packed, err := full.Encode(Chunk{Data: stream})
		if err != nil {
			t.Fatal(err)
		}
		c, err := NewChainLimits(codecSpecs(t, `[{"name":"vlen-utf8"},`+bb+`]`), spec, lim)
		if err != nil {
			t.Fatal(err)
		}
		a0, t0 := heapAlloc(), time.Now()
		_, err = c.Decode(packed)
		a, d := heapAlloc()-a0, time.Since(t0)
		if !errors.Is(err, errs.ResourceExhausted) {
			t.Errorf("%s: %d-byte bomb of 32 MiB of strings: %v, want ResourceExhausted", bb, len(packed), err)
		}
		t.Logf("%s: %d-byte bomb refused in %v, %d KiB allocated (limit %d KiB): %v", bb, len(packed), d.Round(time.Millisecond), a>>10, limit>>10, err)
		if a > 3*limit {
			t.Errorf("%s: decoding the bomb allocated %d MiB, more than 3 times the %d MiB limit", bb, a>>20, limit>>20)
		}
	}
}

// A header claiming a size is never trusted to allocate it: with a legal
// 512 MiB chunk, a few bytes claiming 512 MiB fail without allocating it.
func TestLyingHeaders(t *testing.T) {
	const n = 512 << 20
	spec := ChunkSpec{Shape: []int{n}, DataType: zarr.MustDataType("uint8")}
	lz4Lie := binary.LittleEndian.AppendUint32(nil, n)
	lz4Lie = append(lz4Lie, 0x1f, 0, 1, 0, 0xff, 0xff) // a literal and a long match, far short of 512 MiB
	bloscLie := func(cname string) []byte {
		fr, err := blosc.Compress(make([]byte, 1<<16), blosc.Options{Cname: cname, Clevel: 5, Typesize: 1, Shuffle: blosc.NoShuffle})
		if err != nil {
			t.Fatal(err)
		}
		binary.LittleEndian.PutUint32(fr[4:], n) // nbytes
		binary.LittleEndian.PutUint32(fr[8:], n) // blocksize: one block
		return fr
	}
	for _, tc := range []struct {
		bb  string
		enc []byte
	}{
		{`{"name":"zstd"}`, zstdFrameClaiming(t, n)},
		{`{"name":"zstd"}`, append(zstdFrameClaiming(t, n)[:13], 0x03, 0, 0x10)}, // an RLE block of 128 KiB, not 512 MiB
		// No content size, one compressed block of garbage: at most 128
		// KiB, and that is all the buffer gets.
		{`{"name":"zstd"}`, []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 10 << 3, 0x25, 0, 0, 1, 2, 3, 4}},
		{`{"name":"numcodecs.lz4"}`, lz4Lie},
		{`{"name":"blosc","configuration":{"cname":"lz4"}}`, bloscLie("lz4")},
		{`{"name":"blosc","configuration":{"cname":"zstd"}}`, bloscLie("zstd")},
		{`{"name":"gzip"}`, []byte("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff\x01\x00\x00\xff\xff")},
		{`{"name":"numcodecs.bz2"}`, []byte("BZh91AY&SY\x00\x00\x00\x00")},
		{`{"name":"crc32c"}`, []byte{1, 2, 3, 4, 5}},
	} {
		c := chain(t, `[{"name":"bytes"},`+tc.bb+`]`, spec)
		a0 := heapAlloc()
		_, err := c.Decode(tc.enc)
		if !errors.Is(err, errs.DataLoss) {
			t.Errorf("%s: %d lying bytes: %v, want DataLoss", tc.bb, len(tc.enc), err)
		}
		if a := heapAlloc() - a0; a > 4<<20 {
			t.Errorf("%s: %d lying bytes allocated %d MiB", tc.bb, len(tc.enc), a>>20)
		}
	}
}

// Fixed-size bombs: a stream holding more than the chunk stops at the
// chunk's size with DataLoss, allocating about the chunk.
func TestFixedBombs(t *testing.T) {
	spec := ChunkSpec{Shape: []int{1 << 20}, DataType: zarr.MustDataType("uint8")}
	for _, bb := range bombCodecs {
		packed := zeroBomb(t, bb, 16<<20)
		c := chain(t, `[{"name":"bytes"},`+bb+`]`, spec)
		a0 := heapAlloc()
		if _, err := c.Decode(packed); !errors.Is(err, errs.DataLoss) {
			t.Errorf("%s: 16 MiB into 1 MiB: %v, want DataLoss", bb, err)
		}
		if a := heapAlloc() - a0; a > 4<<20 {
			t.Errorf("%s: 64 MiB into 1 MiB allocated %d MiB", bb, a>>20)
		}
	}
}

// Honest streams still decode with a buffer allocated once at about the
// chunk's size, however compressible.
func TestHonestStreamsAllocateOnce(t *testing.T) {
	const n = 16 << 20
	spec := ChunkSpec{Shape: []int{n}, DataType: zarr.MustDataType("uint8")}
	for _, bb := range bombCodecs {
		c := chain(t, `[{"name":"bytes"},`+bb+`]`, spec)
		data := bytes.Repeat([]byte("zarrgate"), n/8)
		enc, err := c.Encode(Chunk{Data: data})
		if err != nil {
			t.Fatal(err)
		}
		a0 := heapAlloc()
		out, err := c.Decode(enc)
		if err != nil || !bytes.Equal(out.Data, data) {
			t.Fatalf("%s: round trip: %v", bb, err)
		}
		if a := heapAlloc() - a0; a > 3*n {
			t.Errorf("%s: decoding %d MiB allocated %d MiB", bb, n>>20, a>>20)
		}
	}
}

// vlen headers are not trusted either: element counts and lengths that
// the stream cannot hold fail before allocating.
func TestVlenLies(t *testing.T) {
	spec := ChunkSpec{Shape: []int{1 << 16}, DataType: zarr.MustDataType("bytes")}
	c := chain(t, `[{"name":"vlen-bytes"}]`, spec)
	hdr := func(words ...uint32) []byte {
		var b []byte
		for _, w := range words {
			b = binary.LittleEndian.AppendUint32(b, w)
		}
		return b
	}
	for name, enc := range map[string][]byte{
		"count 2^32-1":            hdr(1<<32 - 1),
		"right count, no lengths": hdr(1 << 16),
		"element of 4 GiB":        append(hdr(1<<16, 1<<32-1), make([]byte, 4<<16)...),
	} {
		a0 := heapAlloc()
		if _, err := c.Decode(enc); !errors.Is(err, errs.DataLoss) {
			t.Errorf("%s: %v, want DataLoss", name, err)
		}
		if a := heapAlloc() - a0; a > 1<<20 {
			t.Errorf("%s: allocated %d KiB", name, a>>10)
		}
	}
	// A raw (uncompressed) vlen chunk over the limit is ResourceExhausted.
	small, err := NewChainLimits(codecSpecs(t, `[{"name":"vlen-bytes"}]`), ChunkSpec{Shape: []int{1}, DataType: zarr.MustDataType("bytes")}, codec.Limits{MaxVariableBytes: 100})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := small.Decode(append(hdr(1, 101), make([]byte, 101)...)); !errors.Is(err, errs.ResourceExhausted) {
		t.Errorf("101 bytes under a 100-byte limit: %v", err)
	}
	if _, err := small.Decode(append(hdr(1, 100), make([]byte, 100)...)); err != nil {
		t.Errorf("100 bytes under a 100-byte limit: %v", err)
	}
	// Encoding a chunk that could not be read back is refused.
	if _, err := small.Encode(Chunk{Data: make([]byte, 101), Offsets: []int64{0, 101}}); !errors.Is(err, errs.ResourceExhausted) {
		t.Errorf("encoding 101 bytes under a 100-byte limit: %v", err)
	}
}

// A shard's inner chunks share one allowance of element bytes: many inner
// chunks each under the limit cannot add up to more than it.
func TestShardSharesVariableLimit(t *testing.T) {
	spec := ChunkSpec{Shape: []int{8}, DataType: zarr.MustDataType("bytes")}
	cfg := `[{"name":"sharding_indexed","configuration":{"chunk_shape":[2],"codecs":[{"name":"vlen-bytes"},{"name":"zstd"}]}}]`
	elem := make([]byte, 300<<10)
	ch := Chunk{Offsets: []int64{0}}
	for range 8 {
		ch.Data = append(ch.Data, elem...)
		ch.Offsets = append(ch.Offsets, int64(len(ch.Data)))
	}
	enc, err := chain(t, cfg, spec).Encode(ch) // 2.4 MiB under the 64 MiB default
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewChainLimits(codecSpecs(t, cfg), spec, codec.Limits{MaxVariableBytes: 1 << 20}) // each inner chunk (600 KiB) fits, the shard does not
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Decode(enc); !errors.Is(err, errs.ResourceExhausted) {
		t.Errorf("2.4 MiB shard under a 1 MiB limit: %v, want ResourceExhausted", err)
	}
	if out, err := chain(t, cfg, spec).Decode(enc); err != nil || !bytes.Equal(out.Data, ch.Data) {
		t.Errorf("2.4 MiB shard under the default limit: %v", err)
	}
	// The allowance is shared as the inner chunks decode, not checked
	// after: an inner chunk that is a bomb gets only what the ones before
	// it left. Here the first inner chunk takes 7.5 of 8 MiB, the second (gzip,
	// whose size no header gives)
	// decompresses to 60 MiB and must stop after 0.5 MiB, not 8.
	spec = ChunkSpec{Shape: []int{2}, DataType: zarr.MustDataType("bytes")}
	cfg = `[{"name":"sharding_indexed","configuration":{"chunk_shape":[1],"codecs":[{"name":"vlen-bytes"},{"name":"gzip"}]}}]`
	c, err = NewChainLimits(codecSpecs(t, cfg), spec, codec.Limits{MaxVariableBytes: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	s := c.Shard()
	big := chain(t, `[{"name":"vlen-bytes"},{"name":"gzip"}]`, ChunkSpec{Shape: []int{1}, DataType: zarr.MustDataType("bytes")})
	first, err := s.InnerChain().Encode(Chunk{Data: bytes.Repeat([]byte{1}, 15<<19), Offsets: []int64{0, 15 << 19}})
	if err != nil {
		t.Fatal(err)
	}
	bomb, err := big.Encode(Chunk{Data: make([]byte, 60<<20), Offsets: []int64{0, 60 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	shard, err := codec.Assemble(s, [][]byte{first, bomb})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Decode(shard); !errors.Is(err, errs.ResourceExhausted) {
		t.Fatalf("bomb in the second inner chunk: %v", err)
	}
	a0 := heapAlloc()
	c.Decode(shard)
	// The first inner chunk costs twice its 7.5 MiB (decompressed, then
	// its element bytes); the bomb may add its 0.5 MiB allowance.
	if a := heapAlloc() - a0; a > 17<<20 {
		t.Errorf("decoding a shard with a bomb after 7.5 MiB of an 8 MiB allowance allocated %.1f MiB", float64(a)/(1<<20))
	}
}

// Strings must be valid UTF-8 to be written, and v2 "<U" elements Unicode
// code points: the error names the element.
func TestInvalidStrings(t *testing.T) {
	spec := ChunkSpec{Shape: []int{4}, DataType: zarr.MustDataType("string")}
	for _, cj := range []string{`[{"name":"vlen-utf8"}]`, `[{"name":"vlen-utf8"},{"name":"zstd"}]`,
		`[{"name":"sharding_indexed","configuration":{"chunk_shape":[2],"codecs":[{"name":"vlen-utf8"}]}}]`} {
		c := chain(t, cj, spec)
		good := Chunk{Data: []byte("abcdéf"), Offsets: []int64{0, 1, 2, 3, 7}}
		if _, err := c.Encode(good); err != nil {
			t.Errorf("%s: valid strings: %v", cj, err)
		}
		bad := Chunk{Data: []byte("abc\xff\xfe"), Offsets: []int64{0, 1, 2, 3, 5}}
		_, err := c.Encode(bad)
		if !errors.Is(err, errs.InvalidArgument) || !strings.Contains(err.Error(), "element 3") || !strings.Contains(err.Error(), "UTF-8") {
			t.Errorf("%s: invalid UTF-8 in element 3: %v", cj, err)
		}
	}
	// vlen-bytes takes any bytes.
	if _, err := chain(t, `[{"name":"vlen-bytes"}]`, ChunkSpec{Shape: []int{1}, DataType: zarr.MustDataType("bytes")}).Encode(Chunk{Data: []byte{0xff}, Offsets: []int64{0, 1}}); err != nil {
		t.Errorf("vlen-bytes: %v", err)
	}
	u2, _, err := zarr.ParseV2DataType("<U2")
	if err != nil {
		t.Fatal(err)
	}
	c := chain(t, `[{"name":"bytes","configuration":{"endian":"little"}}]`, ChunkSpec{Shape: []int{3}, DataType: u2})
	data := make([]byte, 24)
	binary.LittleEndian.PutUint32(data[16:], 'ß')
	if _, err := c.Encode(Chunk{Data: data}); err != nil {
		t.Errorf("<U2: %v", err)
	}
	binary.LittleEndian.PutUint32(data[12:], 0x110000)
	if _, err := c.Encode(Chunk{Data: data}); !errors.Is(err, errs.InvalidArgument) || !strings.Contains(err.Error(), "element 1") {
		t.Errorf("<U2 with 0x110000 in element 1: %v", err)
	}
}

// The zstd bound walks frames exactly: skippable frames, several frames,
// checksums, RLE blocks.
func TestZstdBound(t *testing.T) {
	enc, _ := zstd.NewWriter(nil, zstd.WithEncoderCRC(true))
	defer enc.Close()
	data := bytes.Repeat([]byte{7}, 300<<10)
	f := enc.EncodeAll(data, nil)
	skip := []byte{0x50, 0x2a, 0x4d, 0x18, 2, 0, 0, 0, 9, 9}
	for name, tc := range map[string]struct {
		b    []byte
		want uint64
	}{
		"one frame":         {f, uint64(len(data))},
		"skippable, frames": {append(append(append([]byte{}, skip...), f...), f...), 2 * uint64(len(data))},
		"raw, no size":      {zstdRawFrame(20, []byte("hello")), 5},
	} {
		got, err := zstdBound(tc.b)
		if err != nil || got.most != tc.want {
			t.Errorf("%s: bound %d, %v; want %d", name, got.most, err, tc.want)
		}
	}
	for name, b := range map[string][]byte{
		"truncated block": f[:len(f)-6],
		"truncated skip":  skip[:9],
		"garbage":         []byte("not a zstd frame"),
	} {
		if _, err := zstdBound(b); !errors.Is(err, errs.DataLoss) {
			t.Errorf("%s: %v, want DataLoss", name, err)
		}
	}
	_ = fmt.Sprint
}
