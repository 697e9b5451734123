package codecsvc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/zarr"
)

// zstdRawFrame is a frame without a content size whose header declares a
// 2^windowLog-byte window, holding data as one raw block.
func zstdRawFrame(windowLog int, data []byte) []byte {
	b := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, byte((windowLog - 10) << 3)}
	h := 1 | uint32(len(data))<<3 // last block, raw
	return append(append(b, byte(h), byte(h>>8), byte(h>>16)), data...)
}

// A frame declaring a 512 MiB window for 16 bytes decodes without
// allocating the window, and two frames decode as their concatenation.
func TestZstdDeclaredWindow(t *testing.T) {
	spec := ChunkSpec{Shape: []int{16}, DataType: zarr.MustDataType("uint8")}
	c := chain(t, `[{"name":"bytes"},{"name":"zstd"}]`, spec)
	data := []byte("0123456789abcdef")
	a0 := heapAlloc()
	out, err := c.Decode(zstdRawFrame(29, data))
	if err != nil || !bytes.Equal(out.Data, data) {
		t.Fatalf("decode = %q, %v", out.Data, err)
	}
	if a := heapAlloc() - a0; a > 4<<20 {
		t.Errorf("decoding 16 bytes allocated %d KiB", a>>10)
	}
	two := append(zstdRawFrame(20, data[:5]), zstdRawFrame(20, data[5:])...)
	if out, err := c.Decode(two); err != nil || !bytes.Equal(out.Data, data) {
		t.Errorf("two frames = %q, %v", out.Data, err)
	}
	// A frame whose declared content size is too small is refused (once
	// this looped forever, growing a zero capacity).
	lying := append([]byte{0x28, 0xb5, 0x2f, 0xfd, 0x20, 0x00, 1 | 5<<3, 0, 0}, data[:5]...)
	if _, err := c.Decode(lying); !errors.Is(err, errs.DataLoss) {
		t.Errorf("frame declaring 0 bytes holding 5: %v", err)
	}
	// Without a content size, too much output is still refused.
	big := zstdRawFrame(20, bytes.Repeat([]byte{1}, 17))
	if _, err := c.Decode(big); !errors.Is(err, errs.DataLoss) {
		t.Errorf("17 bytes into 16: %v", err)
	}
}

// Empty chunks (a zero-length dimension) round-trip through every
// compressor.
func TestEmptyChunks(t *testing.T) {
	spec := ChunkSpec{Shape: []int{0, 3}, DataType: zarr.MustDataType("float32")}
	for _, bb := range []string{`{"name":"zstd"}`, `{"name":"gzip","configuration":{"level":1}}`, `{"name":"numcodecs.zlib"}`,
		`{"name":"numcodecs.lz4"}`, `{"name":"numcodecs.bz2"}`, `{"name":"crc32c"}`, `{"name":"numcodecs.shuffle"}`} {
		c := chain(t, `[{"name":"transpose","configuration":{"order":[1,0]}},{"name":"bytes","configuration":{"endian":"big"}},`+bb+`]`, spec)
		enc, err := c.Encode(Chunk{Data: []byte{}})
		if err != nil {
			t.Fatalf("%s: %v", bb, err)
		}
		if out, err := c.Decode(enc); err != nil || len(out.Data) != 0 {
			t.Errorf("%s: decode %v %v", bb, out, err)
		}
	}
}

// A Blosc header claiming blocks far larger than its content is refused
// before the decoder allocates scratch space for them.
func TestBloscBlockSizeBomb(t *testing.T) {
	spec := ChunkSpec{Shape: []int{300}, DataType: zarr.MustDataType("float32")}
	c := chain(t, `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"blosc","configuration":{"cname":"lz4","clevel":5,"shuffle":"shuffle","typesize":4,"blocksize":0}}]`, spec)
	enc, err := c.Encode(Chunk{Data: make([]byte, 1200)})
	if err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint32(enc[8:], 0x00d904b0) // blocksize: 14 MB
	a0 := heapAlloc()
	if _, err := c.Decode(enc); !errors.Is(err, errs.DataLoss) {
		t.Errorf("blocksize bomb: %v", err)
	}
	if a := heapAlloc() - a0; a > 4<<20 {
		t.Errorf("blocksize bomb: decoding allocated %d KiB", a>>10)
	}
}

// gzip and zlib streams decode alike in every build (pure Go, and
// libdeflate with -tags cgocodecs): gzip members as their concatenation,
// anything after the stream, a truncated stream and more output than the
// chunk holds refused as DataLoss.
func TestDeflateStreams(t *testing.T) {
	spec := ChunkSpec{Shape: []int{4096}, DataType: zarr.MustDataType("uint8")}
	data := slabBenchChunk(0, 0)[:4096]
	for _, name := range []string{"gzip", "numcodecs.zlib"} {
		for _, level := range []int{0, 1, 5, 9} {
			c := chain(t, fmt.Sprintf(`[{"name":"bytes"},{"name":%q,"configuration":{"level":%d}}]`, name, level), spec)
			enc, err := c.Encode(Chunk{Data: data})
			if err != nil {
				t.Fatal(err)
			}
			if out, err := c.Decode(enc); err != nil || !bytes.Equal(out.Data, data) {
				t.Fatalf("%s %d: round trip: %v", name, level, err)
			}
			for what, bad := range map[string][]byte{
				"garbage after":    append(bytes.Clone(enc), "junk"...),
				"truncated":        enc[:len(enc)-5],
				"empty":            {},
				"twice the output": twoStreams(t, name, data, data),
			} {
				if name != "gzip" && what == "twice the output" {
					bad = append(bytes.Clone(enc), enc...) // zlib: one stream only
				}
				if _, err := c.Decode(bad); !errors.Is(err, errs.DataLoss) {
					t.Errorf("%s %d, %s: %v, want DataLoss", name, level, what, err)
				}
			}
		}
	}
	// Two gzip members decode as their concatenation.
	c := chain(t, `[{"name":"bytes"},{"name":"gzip"}]`, spec)
	if out, err := c.Decode(twoStreams(t, "gzip", data[:1000], data[1000:])); err != nil || !bytes.Equal(out.Data, data) {
		t.Errorf("two gzip members: %v", err)
	}
}

// twoStreams is a and b compressed each into its own stream, back to back.
func twoStreams(t *testing.T, name string, a, b []byte) []byte {
	var out []byte
	for _, p := range [][]byte{a, b} {
		c := chain(t, fmt.Sprintf(`[{"name":"bytes"},{"name":%q}]`, name), ChunkSpec{Shape: []int{len(p)}, DataType: zarr.MustDataType("uint8")})
		enc, err := c.Encode(Chunk{Data: p})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, enc...)
	}
	return out
}
