package blosc

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zlib"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	"github.com/zarrgate/zarrgate/internal/complevel"
	"github.com/zarrgate/zarrgate/internal/inflate"
)

// A streamDecoder decodes one stream into out, which it must fill exactly;
// it never writes beyond out.
type streamDecoder func(in, out []byte) error

// A streamEncoder appends the compressed form of src to dst. It may give up
// by appending nothing; the caller stores incompressible streams raw.
type streamEncoder func(dst, src []byte, clevel, typesize int) []byte

var streamDecoders = map[int]streamDecoder{
	formatBlosclz: decodeBlosclz,
	formatLZ4:     decodeLZ4,
	formatSnappy:  decodeSnappy,
	formatZlib:    decodeZlib,
	formatZstd:    decodeZstd,
}

var streamEncoders = map[string]streamEncoder{
	"blosclz": encodeBlosclz,
	"lz4":     encodeLZ4,
	"lz4hc":   encodeLZ4HC,
	"snappy":  encodeSnappy,
	"zlib":    encodeZlib,
	"zstd":    encodeZstd,
}

var errSize = errors.New("decoded size differs from the stream's size")

// growLen extends dst by n bytes of unspecified content.
func growLen(dst []byte, n int) []byte {
	dst = slices.Grow(dst, n)
	return dst[:len(dst)+n]
}

func decodeBlosclz(in, out []byte) error {
	n, err := blosclzDecompress(in, out)
	if err != nil {
		return err
	}
	if n != len(out) {
		return errSize
	}
	return nil
}

func encodeBlosclz(dst, src []byte, clevel, _ int) []byte {
	at := len(dst)
	dst = growLen(dst, len(src))
	n := blosclzCompress(dst[at:], src, clevel)
	return dst[:at+n]
}

func decodeLZ4(in, out []byte) error {
	n, err := lz4.UncompressBlock(in, out)
	if err != nil {
		return err
	}
	if n != len(out) {
		return errSize
	}
	return nil
}

var lz4Pool = sync.Pool{New: func() any { return new(lz4.CompressorCCompat) }}

func encodeLZ4(dst, src []byte, clevel, _ int) []byte {
	at := len(dst)
	dst = growLen(dst, len(src))
	c := lz4Pool.Get().(*lz4.CompressorCCompat)
	// c-blosc calls LZ4_compress_fast with acceleration 10-clevel.
	c.Acceleration = 10 - clevel
	n, err := c.CompressBlock(src, dst[at:])
	lz4Pool.Put(c)
	if err != nil {
		n = 0
	}
	return dst[:at+n]
}

var lz4hcPool = sync.Pool{New: func() any { return new(lz4.CompressorHC) }}

var lz4hcLevels = [10]lz4.CompressionLevel{lz4.Fast, lz4.Level1, lz4.Level2, lz4.Level3, lz4.Level4,
	lz4.Level5, lz4.Level6, lz4.Level7, lz4.Level8, lz4.Level9}

func encodeLZ4HC(dst, src []byte, clevel, _ int) []byte {
	at := len(dst)
	dst = growLen(dst, len(src))
	c := lz4hcPool.Get().(*lz4.CompressorHC)
	c.Level = lz4hcLevels[clevel]
	n, err := c.CompressBlock(src, dst[at:])
	lz4hcPool.Put(c)
	if err != nil {
		n = 0
	}
	return dst[:at+n]
}

func decodeSnappy(in, out []byte) error {
	n, err := snappy.DecodedLen(in)
	if err != nil {
		return err
	}
	if n != len(out) {
		return errSize
	}
	d, err := snappy.Decode(out, in)
	if err != nil {
		return err
	}
	if len(d) != len(out) || &d[0] != &out[0] {
		return errSize
	}
	return nil
}

func encodeSnappy(dst, src []byte, _, _ int) []byte {
	at := len(dst)
	dst = growLen(dst, snappy.MaxEncodedLen(len(src)))
	n := len(snappy.Encode(dst[at:], src))
	return dst[:at+n]
}

// decodeZlib decodes a zlib block of exactly len(out) bytes with the
// pure-Go DEFLATE decoder (internal/inflate); bytes after the stream are
// ignored, as c-blosc's zlib `uncompress` ignores them.
func decodeZlib(in, out []byte) error {
	n, _, err := inflate.Zlib(in, out)
	if errors.Is(err, inflate.ErrShort) || err == nil && n != len(out) {
		return errSize
	}
	return err
}

// appendWriter is an io.Writer appending to a byte slice.
type appendWriter struct{ b []byte }

func (w *appendWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

var zlibWriters [10]sync.Pool

// encodeZlib compresses at zlib's level, as zlib would
// (complevel.Deflate).
func encodeZlib(dst, src []byte, clevel, _ int) []byte {
	at := len(dst)
	out, _ := complevel.Deflate(src, clevel, func(src []byte, level int) ([]byte, error) {
		if level != clevel { // Huffman only: rare, not pooled, not in dst
			aw := &appendWriter{}
			w, err := zlib.NewWriterLevel(aw, level)
			if err != nil {
				return nil, err
			}
			w.Write(src)
			if err := w.Close(); err != nil {
				return nil, err
			}
			return aw.b, nil
		}
		return encodeZlibLevel(dst[:at], src, clevel)[at:], nil
	})
	return append(dst[:at], out...)
}

func encodeZlibLevel(dst, src []byte, clevel int) []byte {
	at := len(dst)
	aw := &appendWriter{b: dst}
	var w *zlib.Writer
	if v := zlibWriters[clevel].Get(); v != nil {
		w = v.(*zlib.Writer)
		w.Reset(aw)
	} else {
		var err error
		if w, err = zlib.NewWriterLevel(aw, clevel); err != nil {
			return dst[:at]
		}
	}
	_, err := w.Write(src)
	if err == nil {
		err = w.Close()
	}
	zlibWriters[clevel].Put(w)
	if err != nil {
		return dst[:at]
	}
	return aw.b
}

var zstdDecoder = sync.OnceValue(func() *zstd.Decoder {
	d, err := zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(0),
		zstd.WithDecodeAllCapLimit(true),
		zstd.WithDecoderLowmem(true),
	)
	if err != nil {
		panic(fmt.Sprintf("blosc: zstd decoder: %v", err))
	}
	return d
})

func decodeZstd(in, out []byte) error {
	// The cap limit stops a stream from decoding past out, whatever its
	// header claims.
	d, err := zstdDecoder().DecodeAll(in, out[:0:len(out)])
	if err != nil {
		return err
	}
	if len(d) != len(out) {
		return errSize
	}
	return nil
}

func encodeZstd(dst, src []byte, clevel, _ int) []byte {
	// c-blosc maps clevel to zstd level 2*clevel-1, and 9 to the maximum.
	level := 2*clevel - 1
	if clevel == 9 {
		level = 22
	}
	out, err := complevel.EncodeZstd(dst, src, level, false)
	if err != nil {
		return dst
	}
	return out
}
