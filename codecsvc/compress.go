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

// readLimited reads a decompressor's whole output, failing with DataLoss
// rather than reading more than max bytes (max < 0: no bound).
func readLimited(r io.Reader, max int64, what string) ([]byte, error) {
	if max < 0 {
		max = maxVariableBytes
	}
	// The bound is usually the exact decoded size: read straight into a
	// buffer of that size instead of growing one by doubling.
	var buf bytes.Buffer
	if max <= 256<<20 {
		buf.Grow(int(max) + bytes.MinRead)
	}
	n, err := buf.ReadFrom(io.LimitReader(r, max+1))
	if err != nil {
		return nil, errs.New(errs.DataLoss, "%s: corrupt or truncated data: %v", what, err)
	}
	if n > max {
		return nil, errs.New(errs.DataLoss, "%s: decompresses to more than the %d bytes expected", what, max)
	}
	return buf.Bytes(), nil
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
	newReader func(r io.Reader) (io.Reader, error)
}

func deflateFactory(name string, defLevel int, nw func(io.Writer, int) (io.WriteCloser, error), nr func(io.Reader) (io.Reader, error)) Factory {
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
		return deflateCodec{name: name, level: level, newWriter: nw, newReader: nr}, nil
	}
}

var (
	newGzip = deflateFactory("gzip", 5,
		func(w io.Writer, l int) (io.WriteCloser, error) { return gzip.NewWriterLevel(w, l) },
		func(r io.Reader) (io.Reader, error) { return gzip.NewReader(r) })
	newZlib = deflateFactory("zlib", 1,
		func(w io.Writer, l int) (io.WriteCloser, error) { return zlib.NewWriterLevel(w, l) },
		func(r io.Reader) (io.Reader, error) { return zlib.NewReader(r) })
)

func (d deflateCodec) Encode(b []byte) ([]byte, error) {
	var out bytes.Buffer
	w, err := d.newWriter(&out, d.level)
	if err != nil {
		return nil, errs.Wrap(errs.InvalidArgument, err, "%s", d.name)
	}
	w.Write(b)
	if err := w.Close(); err != nil {
		return nil, errs.Wrap(errs.Internal, err, "%s", d.name)
	}
	return out.Bytes(), nil
}

// Decode decodes one stream (gzip: all members) and refuses anything after
// it.
func (d deflateCodec) Decode(b []byte, max int64) ([]byte, error) {
	in := bytes.NewReader(b)
	r, err := d.newReader(in)
	if err != nil {
		return nil, errs.New(errs.DataLoss, "%s: %v", d.name, err)
	}
	out, err := readLimited(r, max, d.name)
	if err == nil && in.Len() > 0 {
		return nil, errs.New(errs.DataLoss, "%s: %d bytes of garbage after the stream", d.name, in.Len())
	}
	return out, err
}

func (deflateCodec) MaxEncodedSize(n int64) int64 { return bound(n, n/1000+64) }

func bound(n, overhead int64) int64 {
	if n < 0 {
		return -1
	}
	return n + overhead
}

// zstdCodec is v3 "zstd".
type zstdCodec struct {
	enc      *zstd.Encoder
	checksum bool
}

var (
	zstdDecOnce sync.Once
	zstdDec     *zstd.Decoder
	zstdEncMu   sync.Mutex
	zstdEncs    = map[[2]int]*zstd.Encoder{}
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
	key := [2]int{level, map[bool]int{true: 1}[checksum]}
	zstdEncMu.Lock()
	defer zstdEncMu.Unlock()
	enc := zstdEncs[key]
	if enc == nil {
		var err error
		enc, err = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.EncoderLevelFromZstd(max(level, 1))),
			zstd.WithEncoderCRC(checksum), zstd.WithEncoderConcurrency(1), zstd.WithZeroFrames(true))
		if err != nil {
			return nil, errs.Wrap(errs.InvalidArgument, err, "zstd")
		}
		zstdEncs[key] = enc
	}
	return zstdCodec{enc: enc, checksum: checksum}, nil
}

func (z zstdCodec) Encode(b []byte) ([]byte, error) {
	return z.enc.EncodeAll(b, make([]byte, 0, len(b)/2+64)), nil
}

// Decode decodes all frames of b into a buffer of the expected size. It
// uses DecodeAll, never a stream decoder: a stream decoder allocates the
// window a frame header declares (up to 2 GiB from a few bytes of input),
// DecodeAll only the output, which the buffer's capacity caps. Without a
// content size in the header, the buffer starts small and grows by
// decoding again, up to max.
func (zstdCodec) Decode(b []byte, max int64) ([]byte, error) {
	var h zstd.Header
	if err := h.Decode(b); err != nil {
		return nil, errs.New(errs.DataLoss, "zstd: %v", err)
	}
	if max < 0 {
		max = maxVariableBytes
	}
	if h.HasFCS && h.FrameContentSize > uint64(max) {
		return nil, errs.New(errs.DataLoss, "zstd: frame claims %d bytes, more than the %d expected", h.FrameContentSize, max)
	}
	capacity := min(max, 4*int64(len(b))+64<<10)
	if h.HasFCS {
		capacity = int64(h.FrameContentSize)
	}
	for {
		// A pooled buffer, not zeroed: DecodeAll writes what it returns
		// and, capped by the capacity (exact, although the pool rounds the
		// buffer up), never reallocates.
		buf := bufpool.Get(int(capacity))
		out, err := zstdDecoder().DecodeAll(b, buf[:0:capacity])
		if err != nil {
			bufpool.Put(buf)
		}
		switch {
		case err == nil:
			if len(out) > 0 && &out[0] == &buf[0] {
				out = buf[:len(out)] // the whole pool buffer, for Put
			}
			return out, nil
		case !errors.Is(err, zstd.ErrDecoderSizeExceeded):
			return nil, errs.New(errs.DataLoss, "zstd: %v", err)
		case capacity >= max:
			return nil, errs.New(errs.DataLoss, "zstd: decompresses to more than the %d bytes expected", max)
		}
		// More frames follow, or the content size was not declared.
		capacity = min(max, 4*capacity+64<<10)
	}
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
		return nil, errs.New(errs.DataLoss, "lz4: header claims %d bytes, more than the %d expected", size, max)
	}
	out := make([]byte, size)
	n, err := lz4.UncompressBlock(b[4:], out)
	if err != nil || int64(n) != size {
		return nil, errs.New(errs.DataLoss, "lz4: corrupt block (%d of %d bytes): %v", n, size, err)
	}
	return out, nil
}

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
	return readLimited(bzip2.NewReader(bytes.NewReader(b)), max, "bz2")
}

func (bz2Codec) MaxEncodedSize(n int64) int64 { return bound(n, n/100+600) }
