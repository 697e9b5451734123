package codecsvc

import (
	"bytes"
	"compress/bzip2"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"sync"

	dsbzip2 "github.com/dsnet/compress/bzip2"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zlib"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/bufpool"
	"github.com/zarrgate/zarrgate/internal/complevel"
)

func init() {
	Register("gzip", newGzip)
	Register("numcodecs.gzip", newGzip)
	Register("zstd", newZstd)
	Register("numcodecs.zstd", newZstd)
	Register("numcodecs.zlib", newZlib)
	Register("numcodecs.lz4", newLZ4)
	Register("numcodecs.bz2", newBZ2)
}

// readLimited reads a decompressor's whole output into a buffer that
// grows as output arrives, from initial bytes up to limit: a stream costs
// about what it actually decodes (at most 1.5 times, while the buffer
// grows), never what a header claims. Output beyond limit fails with
// DataLoss marked errOverBound, without reading much further.
func readLimited(r io.Reader, limit, initial int64, what string) ([]byte, error) {
	initial = min(max(initial, 512), limit)
	buf := make([]byte, 0, initial)
	for {
		if len(buf) == cap(buf) {
			if int64(len(buf)) >= limit {
				// Full at the bound: the stream must end here.
				var one [1]byte
				n, err := io.ReadFull(r, one[:])
				if n > 0 {
					return nil, overBoundError(what, limit)
				}
				if err != io.EOF {
					return nil, errs.New(errs.DataLoss, "%s: corrupt or truncated data: %v", what, err)
				}
				return buf, nil
			}
			grown := make([]byte, len(buf), min(2*int64(cap(buf)), limit))
			copy(grown, buf)
			buf = grown
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, errs.New(errs.DataLoss, "%s: corrupt or truncated data: %v", what, err)
		}
	}
}

// lenient unmarshals a numcodecs configuration, which may carry fields
// zarrgate does not need.
func lenient(raw json.RawMessage, v any) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return errs.New(errs.InvalidArgument, "configuration: %v", err)
	}
	return nil
}

// deflateCodec is a DEFLATE container: v3 "gzip" and numcodecs GZip
// (RFC 1952), numcodecs Zlib (RFC 1950).
type deflateCodec struct {
	name      string
	level     int
	newWriter func(w io.Writer, level int) (io.WriteCloser, error)
}

// deflateRatio bounds DEFLATE's compression ratio: a match codes at most
// 258 bytes in no less than 2 bits, so a stream never decodes to more
// than 1032 times its size (plus a block's few bytes).
const deflateRatio = 1032

func deflateFactory(name string, defLevel int, nw func(io.Writer, int) (io.WriteCloser, error)) Factory {
	return func(cfg json.RawMessage, _ ChunkSpec) (any, error) {
		c := struct {
			Level *int `json:"level"`
		}{}
		if err := lenient(cfg, &c); err != nil {
			return nil, err
		}
		level := defLevel
		if c.Level != nil {
			level = *c.Level
		}
		if level < 0 || level > 9 {
			return nil, errs.New(errs.InvalidArgument, "configuration.level %d: want 0 to 9", level)
		}
		return deflateCodec{name: name, level: level, newWriter: nw}, nil
	}
}

var (
	newGzip = deflateFactory("gzip", 5,
		func(w io.Writer, l int) (io.WriteCloser, error) { return gzip.NewWriterLevel(w, l) })
	newZlib = deflateFactory("zlib", 1,
		func(w io.Writer, l int) (io.WriteCloser, error) { return zlib.NewWriterLevel(w, l) })
)

// Encode compresses at zlib's level, as zlib would (complevel.Deflate).
func (d deflateCodec) Encode(b []byte) ([]byte, error) {
	return complevel.Deflate(b, d.level, func(b []byte, level int) ([]byte, error) {
		var out bytes.Buffer
		w, err := d.newWriter(&out, level)
		if err != nil {
			return nil, errs.Wrap(errs.InvalidArgument, err, "%s", d.name)
		}
		w.Write(b)
		if err := w.Close(); err != nil {
			return nil, errs.Wrap(errs.Internal, err, "%s", d.name)
		}
		return out.Bytes(), nil
	})
}

// Decode decodes one stream (gzip: all members) and refuses anything after
// it, whole into a pooled buffer of the most the input can decode to,
// never more than the bound: with goInflate (inflate.go), or libdeflate in
// the cgocodecs build.
func (d deflateCodec) Decode(b []byte, max int64) ([]byte, error) {
	inflate := goInflate
	if cInflate != nil {
		inflate = cInflate
	}
	capacity := min(max, deflateRatio*int64(len(b))+1024)
	out, fits, err := inflate(d.name, b, int(capacity))
	if !fits {
		if capacity < max {
			return nil, errs.New(errs.DataLoss, "%s: corrupt data: decodes to more than DEFLATE's ratio allows", d.name)
		}
		return nil, overBoundError(d.name, max)
	}
	return out, err
}

func (deflateCodec) decodesIntoPool() {}

func (deflateCodec) MaxEncodedSize(n int64) int64 { return bound(n, n/1000+64) }

func bound(n, overhead int64) int64 {
	if n < 0 {
		return -1
	}
	return n + overhead
}

// The C codecs of the cgocodecs build (compress_cgo.go); nil in the
// default, pure-Go build.
var (
	// cInflate decodes a gzip or zlib stream into at most capacity
	// bytes; fits is false when the output does not fit.
	cInflate func(container string, b []byte, capacity int) (out []byte, fits bool, err error)
	// cZstdEncode compresses b at a libzstd level into one frame.
	cZstdEncode func(b []byte, level int, checksum bool) ([]byte, error)
	// cZstdDecode decodes the zstd frames of b into dst, at most
	// len(dst) bytes: the bytes written, or tooSmall if they do not fit.
	cZstdDecode func(dst, b []byte) (n int, tooSmall bool, err error)
	// cLibraries names the C libraries and their versions.
	cLibraries string
)

// Libraries says which implementation does the codec work in this
// binary: "pure Go", or for the cgocodecs build the C libraries linked
// and their versions ("libzstd 1.5.4, libdeflate 1.14"), as
// `zarrgate --version` and the admin endpoint's /version report it.
func Libraries() string {
	if cLibraries == "" {
		return "pure Go"
	}
	return cLibraries
}

// zstdCodec is v3 "zstd".
type zstdCodec struct {
	level    int
	checksum bool
}

var (
	zstdDecOnce sync.Once
	zstdDec     *zstd.Decoder
)

func zstdDecoder() *zstd.Decoder {
	zstdDecOnce.Do(func() {
		zstdDec, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecodeAllCapLimit(true),
			zstd.WithDecoderMaxMemory(1<<31), zstd.WithDecoderLowmem(false))
	})
	return zstdDec
}

func newZstd(cfg json.RawMessage, _ ChunkSpec) (any, error) {
	c := struct {
		Level    *int  `json:"level"`
		Checksum *bool `json:"checksum"`
	}{}
	if err := lenient(cfg, &c); err != nil {
		return nil, err
	}
	level := 3
	if c.Level != nil {
		level = *c.Level
	}
	if level < -131072 || level > 22 {
		return nil, errs.New(errs.InvalidArgument, "configuration.level %d: want at most 22", level)
	}
	checksum := c.Checksum != nil && *c.Checksum
	return zstdCodec{level: level, checksum: checksum}, nil
}

func (z zstdCodec) Encode(b []byte) ([]byte, error) {
	if cZstdEncode != nil {
		return cZstdEncode(b, z.level, z.checksum)
	}
	// Room for libzstd's compress bound (ZSTD_COMPRESSBOUND): numeric
	// data compresses by 10–30 %, and a buffer of half the input made
	// EncodeAll grow it, copying, a third of its time. A pooled buffer,
	// not zeroed: EncodeAll only appends; a caller that knows it holds the
	// result alone may hand it back (Local.EncodesOwned).
	buf := bufpool.Get(zstdCompressBound(len(b)))
	out, err := complevel.EncodeZstd(buf[:0], b, z.level, z.checksum)
	if err != nil {
		bufpool.Put(buf)
		return nil, errs.Wrap(errs.InvalidArgument, err, "zstd")
	}
	if len(out) > 0 && &out[0] != &buf[0] {
		bufpool.Put(buf) // grown past the bound: cannot happen
	}
	return out, nil
}

// Decode decodes all frames of b into a buffer of the expected size. It
// uses DecodeAll, never a stream decoder: a stream decoder allocates the
// window a frame header declares (up to 2 GiB from a few bytes of input),
// DecodeAll only the output, which the buffer's capacity caps. The
// capacity is the least of max and what the frames can hold, worked out
// from their block headers (zstdBound) before anything is allocated, so a
// header claiming more than its blocks can hold is refused at once and a
// lying or missing content size never sizes the buffer.
func (z zstdCodec) Decode(b []byte, max int64) ([]byte, error) {
	return z.decodeTo(b, max, nil)
}

// decodeTo is Decode into dst, which holds at least max bytes, or, if dst
// is nil, into a pooled buffer.
func (zstdCodec) decodeTo(b []byte, max int64, dst []byte) ([]byte, error) {
	content, err := zstdBound(b)
	if err != nil {
		return nil, err
	}
	if content.declared > uint64(max) {
		return nil, errs.New(errs.DataLoss, "zstd: frame claims %d bytes, more than the %d expected%w", content.declared, max, errOverBound)
	}
	capacity := int(min(uint64(max), content.most))
	// A pooled buffer, not zeroed: DecodeAll writes what it returns and,
	// capped by the capacity (exact, although the pool rounds the buffer
	// up), never reallocates.
	buf, pooled := dst, dst == nil
	if pooled {
		buf = bufpool.Get(capacity)
	}
	put := func() {
		if pooled {
			bufpool.Put(buf)
		}
	}
	if cZstdDecode != nil && capacity > 0 {
		n, tooSmall, err := cZstdDecode(buf[:capacity], b)
		switch {
		case err == nil && n > 0:
			return buf[:n], nil
		case err == nil:
			put()
			return []byte{}, nil
		case tooSmall && uint64(capacity) < content.most:
			put()
			return nil, overBoundError("zstd", max)
		default:
			put()
			return nil, err
		}
	}
	out, err := zstdDecoder().DecodeAll(b, buf[:0:capacity])
	switch {
	case err == nil:
		if len(out) > 0 && &out[0] == &buf[0] {
			return buf[:len(out)], nil // the whole pool buffer, for Put
		}
		put()
		return out, nil
	case errors.Is(err, zstd.ErrDecoderSizeExceeded) && uint64(capacity) < content.most:
		put()
		return nil, overBoundError("zstd", max)
	default:
		put()
		return nil, errs.New(errs.DataLoss, "zstd: %v", err)
	}
}

// zstdContent is what zstdBound finds out about a run of frames: the
// most they can decode to, and the content sizes their headers declare.
type zstdContent struct{ most, declared uint64 }

// zstdCompressBound is libzstd's ZSTD_COMPRESSBOUND: the most one frame of
// n bytes encodes to.
func zstdCompressBound(n int) int {
	b := n + n>>8 + 64
	if n < 128<<10 {
		b += (128<<10 - n) >> 11
	}
	return b
}

// zstdMaxBlock is the most a zstd block decodes to (Block_Maximum_Size).
const zstdMaxBlock = 128 << 10

// zstdBound walks the frames of b by their headers and block headers
// (RFC 8878 section 3.1), without decoding or allocating, and returns an
// upper bound on their decoded size: raw and RLE blocks give theirs, a
// compressed block at most 128 KiB. A frame whose declared content size
// exceeds what its blocks can hold, or that is truncated, is DataLoss.
func zstdBound(b []byte) (zstdContent, error) {
	var c zstdContent
	for len(b) > 0 {
		var h zstd.Header
		rest, err := h.DecodeAndStrip(b)
		if err != nil {
			return c, errs.New(errs.DataLoss, "zstd: %v", err)
		}
		if h.Skippable {
			if uint64(h.SkippableSize) > uint64(len(rest)) {
				return c, errs.New(errs.DataLoss, "zstd: skippable frame of %d bytes is truncated", h.SkippableSize)
			}
			b = rest[h.SkippableSize:]
			continue
		}
		var most uint64
		for {
			if len(rest) < 3 {
				return c, errs.New(errs.DataLoss, "zstd: frame truncated in a block header")
			}
			bh := uint32(rest[0]) | uint32(rest[1])<<8 | uint32(rest[2])<<16
			last, typ, size := bh&1 != 0, (bh>>1)&3, uint64(bh>>3)
			rest = rest[3:]
			in := size // bytes the block takes
			switch typ {
			case 0: // raw
				most += size
			case 1: // RLE: one byte repeated size times
				in = 1
				most += size
			case 2: // compressed
				most += zstdMaxBlock
			default:
				return c, errs.New(errs.DataLoss, "zstd: reserved block type")
			}
			if in > uint64(len(rest)) {
				return c, errs.New(errs.DataLoss, "zstd: frame truncated in a block of %d bytes", in)
			}
			rest = rest[in:]
			if last {
				break
			}
		}
		if h.HasCheckSum {
			if len(rest) < 4 {
				return c, errs.New(errs.DataLoss, "zstd: frame truncated in its checksum")
			}
			rest = rest[4:]
		}
		if h.HasFCS {
			if h.FrameContentSize > most {
				return c, errs.New(errs.DataLoss, "zstd: frame claims %d bytes, its blocks hold at most %d", h.FrameContentSize, most)
			}
			most = h.FrameContentSize
			c.declared += h.FrameContentSize
		}
		c.most += most
		b = rest
	}
	return c, nil
}

// decodesIntoPool: Decode's result is a whole bufpool buffer.
func (zstdCodec) decodesIntoPool() {}

func (zstdCodec) MaxEncodedSize(n int64) int64 { return bound(n, n/128+64) }

// lz4Codec is numcodecs LZ4: a little-endian uint32 of the decoded size,
// then one raw LZ4 block.
type lz4Codec struct{ acceleration int }

func newLZ4(cfg json.RawMessage, _ ChunkSpec) (any, error) {
	c := struct {
		Acceleration int `json:"acceleration"`
	}{Acceleration: 1}
	return lz4Codec{c.Acceleration}, lenient(cfg, &c)
}

func (lz4Codec) Encode(b []byte) ([]byte, error) {
	out := make([]byte, 4+lz4.CompressBlockBound(len(b)))
	binary.LittleEndian.PutUint32(out, uint32(len(b)))
	var c lz4.Compressor
	n, err := c.CompressBlock(b, out[4:])
	if err != nil {
		return nil, errs.Wrap(errs.Internal, err, "lz4")
	}
	if n == 0 && len(b) > 0 { // incompressible: a block of literals only
		return append(out[:4], lz4Literals(b)...), nil
	}
	return out[:4+n], nil
}

// lz4Literals is an LZ4 block holding b as one literal run.
func lz4Literals(b []byte) []byte {
	out := make([]byte, 0, len(b)+len(b)/255+16)
	n := len(b)
	if n < 15 {
		out = append(out, byte(n<<4))
	} else {
		out = append(out, 0xF0)
		rest := n - 15
		for ; rest >= 255; rest -= 255 {
			out = append(out, 255)
		}
		out = append(out, byte(rest))
	}
	return append(out, b...)
}

func (lz4Codec) Decode(b []byte, max int64) ([]byte, error) {
	if len(b) < 4 {
		return nil, errs.New(errs.DataLoss, "lz4: %d bytes, too short for the size header", len(b))
	}
	size := int64(binary.LittleEndian.Uint32(b))
	if max >= 0 && size > max {
		return nil, errs.New(errs.DataLoss, "lz4: header claims %d bytes, more than the %d expected%w", size, max, errOverBound)
	}
	// An LZ4 sequence codes at most 255 bytes of match per byte of input:
	// a header claiming more than the block can hold is a lie, refused
	// before its buffer is allocated.
	if most := lz4Ratio*int64(len(b)-4) + 64; size > most {
		return nil, errs.New(errs.DataLoss, "lz4: header claims %d bytes, a block of %d bytes holds at most %d", size, len(b)-4, most)
	}
	out := make([]byte, size)
	n, err := lz4.UncompressBlock(b[4:], out)
	if err != nil || int64(n) != size {
		return nil, errs.New(errs.DataLoss, "lz4: corrupt block (%d of %d bytes): %v", n, size, err)
	}
	return out, nil
}

// lz4Ratio bounds LZ4's compression ratio.
const lz4Ratio = 256

func (lz4Codec) MaxEncodedSize(n int64) int64 { return bound(n, n/255+20) }

// bz2Codec is numcodecs BZ2: decoded with the standard library, encoded
// with dsnet/compress (Go's standard library has no bzip2 writer).
type bz2Codec struct{ level int }

func newBZ2(cfg json.RawMessage, _ ChunkSpec) (any, error) {
	c := struct {
		Level int `json:"level"`
	}{Level: 9}
	if err := lenient(cfg, &c); err != nil {
		return nil, err
	}
	if c.Level < 1 || c.Level > 9 {
		return nil, errs.New(errs.InvalidArgument, "configuration.level %d: want 1 to 9", c.Level)
	}
	return bz2Codec{c.Level}, nil
}

func (z bz2Codec) Encode(b []byte) ([]byte, error) {
	var out bytes.Buffer
	w, err := dsbzip2.NewWriter(&out, &dsbzip2.WriterConfig{Level: z.level})
	if err != nil {
		return nil, errs.Wrap(errs.Internal, err, "bz2")
	}
	if _, err := w.Write(b); err != nil {
		return nil, errs.Wrap(errs.Internal, err, "bz2")
	}
	if err := w.Close(); err != nil {
		return nil, errs.Wrap(errs.Internal, err, "bz2")
	}
	return out.Bytes(), nil
}

func (bz2Codec) Decode(b []byte, max int64) ([]byte, error) {
	// bzip2's ratio has no useful bound (runs of a byte are coded twice
	// over): the buffer starts small and grows as output arrives.
	return readLimited(bzip2.NewReader(bytes.NewReader(b)), max, 16*int64(len(b))+64<<10, "bz2")
}

func (bz2Codec) MaxEncodedSize(n int64) int64 { return bound(n, n/100+600) }
