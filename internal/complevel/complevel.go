// Package complevel maps the compression levels users know from the
// reference libraries (libzstd's -131072..22, zlib's 0..9) onto the
// pure-Go encoders of klauspost/compress, so that each level compresses
// about as well as the library it names (README.md, "Compression
// levels"), while staying as fast as it can.
//
// Left to themselves the fast klauspost encoders store data they find no
// repeated strings in as it is: libzstd levels 1–5 and zlib levels 1–6
// still entropy-code such bytes (floating-point arrays, whose exponent
// bytes repeat but whose mantissas do not, compress 10–20 % that way),
// klauspost's zstd levels below SpeedBetterCompression and its DEFLATE
// levels 1–6 do not, and give a ratio of 1.00 where the libraries give
// 1.10–1.27.
package complevel

import (
	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/zstd"
)

// ZstdDefault is libzstd's default level, the one level 0 names.
const ZstdDefault = 3

// ZstdOptions are the klauspost encoder options for a libzstd level:
// level 0 is libzstd's default (3); negative levels, which in libzstd
// leave literals unencoded, are klauspost's fastest; 1–2 SpeedFastest,
// 3–5 SpeedDefault, 6–9 SpeedBetterCompression, 10 and up
// SpeedBestCompression (klauspost's EncoderLevelFromZstd) — every
// positive level with its literals entropy-coded even in blocks without
// a match, as libzstd's are.
func ZstdOptions(level int) []zstd.EOption {
	if level == 0 {
		level = ZstdDefault
	}
	if level < 0 {
		return []zstd.EOption{zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithAllLitEntropyCompression(false)}
	}
	return []zstd.EOption{zstd.WithEncoderLevel(zstd.EncoderLevelFromZstd(level)), zstd.WithAllLitEntropyCompression(true)}
}

// storedShare: a DEFLATE stream within 1/64 of its input's size has (all
// but) stored it.
const storedShare = 64

// Deflate compresses src with enc, a DEFLATE container (gzip, zlib, or
// raw) at a zlib level 0–9 (-1: zlib's default, 6). Levels 1–6 run
// klauspost's fast encoders; when one of them all but stores the data
// (it found no matches), enc runs again Huffman-coding the data without
// matches, as zlib would code it, and the smaller output is kept. Levels
// 7–9 entropy-code by themselves.
func Deflate(src []byte, level int, enc func(src []byte, level int) ([]byte, error)) ([]byte, error) {
	if level == -1 {
		level = 6
	}
	out, err := enc(src, level)
	if err != nil || level < 1 || level > 6 || len(src) < 1024 || int64(len(out)) < int64(len(src))-int64(len(src))/storedShare {
		return out, err
	}
	huff, err := enc(src, flate.HuffmanOnly)
	if err != nil || len(huff) >= len(out) {
		return out, nil
	}
	return huff, nil
}
