//go:build cgocodecs

// The cgocodecs build decodes gzip and zlib with libdeflate (1.5× the
// pure-Go build's internal/inflate), encodes zstd with libzstd (every
// level as libzstd compresses it, and faster) and decodes zstd with libzstd too
// (level with klauspost's decoder on the Xeon VM of the first
// measurements, 4–8 % faster on the EPYC VM of 2026-11-27:
// docs/benchmarks.md). It needs Debian's libdeflate-dev and libzstd-dev:
//
//	go build -tags cgocodecs ./cmd/zarrgate
//
// It is the container image's build, linked statically (the Dockerfile's
// build line; scripts/image-binary.sh runs it here). `go build` without
// the tag stays pure Go and static (README.md, "Compression levels");
// `zarrgate --version` ends with which one a binary is (Libraries).

package codecsvc

/*
#cgo LDFLAGS: -lzstd -ldeflate
#include <stdlib.h>
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>
#include <zstd_errors.h>
#include <libdeflate.h>

static const char *zg_libdeflate_version(void) { return LIBDEFLATE_VERSION_STRING; }
*/
import "C"

import (
	"runtime"
	"slices"
	"unsafe"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/bufpool"
	"github.com/zarrgate/zarrgate/internal/complevel"
)

func init() {
	cInflate = libdeflateInflate
	cZstdEncode = libzstdEncode
	cZstdDecode = libzstdDecode
	complevel.CAppendZstd = libzstdAppend
	cLibraries = "libzstd " + C.GoString(C.ZSTD_versionString()) + ", libdeflate " + C.GoString(C.zg_libdeflate_version())
}

// cPool keeps a few C contexts (pointers) for reuse; contexts beyond
// its capacity are freed.
type cPool[P comparable] struct {
	c    chan P
	free func(P)
}

func newCPool[P comparable](free func(P)) *cPool[P] {
	return &cPool[P]{c: make(chan P, 4*runtime.GOMAXPROCS(0)), free: free}
}

func (p *cPool[P]) get(alloc func() P) P {
	select {
	case x := <-p.c:
		return x
	default:
		return alloc()
	}
}

func (p *cPool[P]) put(x P) {
	var zero P
	if x == zero {
		return
	}
	select {
	case p.c <- x:
	default:
		p.free(x)
	}
}

var (
	inflaters = newCPool(func(d *C.struct_libdeflate_decompressor) { C.libdeflate_free_decompressor(d) })
	zstdCCtxs = newCPool(func(c *C.ZSTD_CCtx) { C.ZSTD_freeCCtx(c) })
	zstdDCtxs = newCPool(func(d *C.ZSTD_DCtx) { C.ZSTD_freeDCtx(d) })
)

func ptr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(unsafe.SliceData(b))
}

// libdeflateInflate decodes a gzip (all members) or zlib stream of b
// into a buffer of capacity bytes, refusing anything after it. fits is
// false when the output does not fit.
func libdeflateInflate(container string, b []byte, capacity int) (out []byte, fits bool, err error) {
	d := inflaters.get(func() *C.struct_libdeflate_decompressor { return C.libdeflate_alloc_decompressor() })
	defer inflaters.put(d)
	if d == nil {
		return nil, true, errs.New(errs.ResourceExhausted, "%s: no memory for a decompressor", container)
	}
	buf := bufpool.Get(capacity) // not zeroed: returned up to what libdeflate wrote
	defer func() {
		if len(out) == 0 { // refused, or empty: nothing of buf is returned
			bufpool.Put(buf)
		}
	}()
	var in, n int
	for first := true; first || (container == "gzip" && in < len(b)); first = false {
		var inN, outN C.size_t
		var r C.enum_libdeflate_result
		src, dst := b[in:], buf[n:]
		if container == "gzip" {
			r = C.libdeflate_gzip_decompress_ex(d, ptr(src), C.size_t(len(src)), ptr(dst), C.size_t(len(dst)), &inN, &outN)
		} else {
			r = C.libdeflate_zlib_decompress_ex(d, ptr(src), C.size_t(len(src)), ptr(dst), C.size_t(len(dst)), &inN, &outN)
		}
		switch r {
		case C.LIBDEFLATE_SUCCESS:
		case C.LIBDEFLATE_INSUFFICIENT_SPACE:
			return nil, false, nil
		default:
			return nil, true, errs.New(errs.DataLoss, "%s: corrupt or truncated data", container)
		}
		in += int(inN)
		n += int(outN)
	}
	if in < len(b) {
		return nil, true, errs.New(errs.DataLoss, "%s: %d bytes of garbage after the stream", container, len(b)-in)
	}
	if n == 0 {
		return []byte{}, true, nil
	}
	return buf[:n], true, nil // the whole pool buffer, for Put (deflateCodec decodes into the pool)
}

// libzstdAppend appends one libzstd frame of src to dst, with its
// content size and, if asked, a checksum, growing dst if its spare
// capacity is short of libzstd's bound (Blosc's zstd blocks come here
// through complevel.EncodeZstd).
func libzstdAppend(dst, src []byte, level int, checksum bool) ([]byte, error) {
	c := zstdCCtxs.get(func() *C.ZSTD_CCtx { return C.ZSTD_createCCtx() })
	defer zstdCCtxs.put(c)
	if c == nil {
		return nil, errs.New(errs.ResourceExhausted, "zstd: no memory for an encoder")
	}
	C.ZSTD_CCtx_reset(c, C.ZSTD_reset_session_and_parameters)
	C.ZSTD_CCtx_setParameter(c, C.ZSTD_c_compressionLevel, C.int(level))
	C.ZSTD_CCtx_setParameter(c, C.ZSTD_c_checksumFlag, C.int(map[bool]int{true: 1}[checksum]))
	dst = slices.Grow(dst, int(C.ZSTD_compressBound(C.size_t(len(src)))))
	free := dst[len(dst):cap(dst)]
	n := C.ZSTD_compress2(c, ptr(free), C.size_t(len(free)), ptr(src), C.size_t(len(src)))
	if C.ZSTD_isError(n) != 0 {
		return nil, errs.New(errs.Internal, "zstd: %s", C.GoString(C.ZSTD_getErrorName(n)))
	}
	return dst[:len(dst)+int(n)], nil
}

// libzstdEncode compresses b at a libzstd level into one frame, in a
// pooled buffer, not zeroed (libzstd writes what it returns), returned
// whole for a caller that may hand it back (Local.EncodesOwned).
func libzstdEncode(b []byte, level int, checksum bool) ([]byte, error) {
	out := bufpool.Get(int(C.ZSTD_compressBound(C.size_t(len(b)))))
	enc, err := libzstdAppend(out[:0], b, level, checksum) // in out: it has the bound
	if err != nil {
		bufpool.Put(out)
		return nil, err
	}
	return enc, nil
}

// libzstdDecode decodes the zstd frames of b (every one, skippable ones
// skipped) into dst, never more than len(dst) bytes: the bytes written,
// or tooSmall when they do not fit. One-shot decoding into dst keeps no
// window of its own (back-references reach into dst only), so a frame's
// window size allocates nothing.
func libzstdDecode(dst, b []byte) (n int, tooSmall bool, err error) {
	d := zstdDCtxs.get(func() *C.ZSTD_DCtx { return C.ZSTD_createDCtx() })
	defer zstdDCtxs.put(d)
	if d == nil {
		return 0, false, errs.New(errs.ResourceExhausted, "zstd: no memory for a decoder")
	}
	r := C.ZSTD_decompressDCtx(d, ptr(dst), C.size_t(len(dst)), ptr(b), C.size_t(len(b)))
	if C.ZSTD_isError(r) != 0 {
		msg := C.GoString(C.ZSTD_getErrorName(r))
		if C.ZSTD_getErrorCode(r) == C.ZSTD_error_dstSize_tooSmall {
			return 0, true, errs.New(errs.DataLoss, "zstd: %s", msg)
		}
		return 0, false, errs.New(errs.DataLoss, "zstd: %s", msg)
	}
	return int(r), false, nil
}
