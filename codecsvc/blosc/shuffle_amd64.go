//go:build amd64 && !purego

package blosc

import "golang.org/x/sys/cpu"

// Assembly kernels (shuffle_amd64.s). The unshuffle kernels interleave the
// first n bytes of each plane into dst; the shuffle kernels split the first
// n elements of src into planes that start stride bytes apart in dst. The
// SSE2 kernels take n a multiple of 16, the AVX2 ones a multiple of 32.

//go:noescape
func unshuffle2SSE2(dst, p0, p1 *byte, n int)

//go:noescape
func unshuffle4SSE2(dst, p0, p1, p2, p3 *byte, n int)

//go:noescape
func unshuffle8SSE2(dst *byte, p *[8]*byte, n int)

//go:noescape
func unshuffle2AVX2(dst, p0, p1 *byte, n int)

//go:noescape
func unshuffle4AVX2(dst, p0, p1, p2, p3 *byte, n int)

//go:noescape
func unshuffle8AVX2(dst *byte, p *[8]*byte, n int)

//go:noescape
func shuffle2SSE2(dst *byte, stride int, src *byte, n int)

//go:noescape
func shuffle4SSE2(dst *byte, stride int, src *byte, n int)

//go:noescape
func shuffle8SSE2(dst *byte, stride int, src *byte, n int)

//go:noescape
func shuffle2AVX2(dst *byte, stride int, src *byte, n int)

//go:noescape
func shuffle4AVX2(dst *byte, stride int, src *byte, n int)

//go:noescape
func shuffle8AVX2(dst *byte, stride int, src *byte, n int)

//go:noescape
func trans8x8SSE2(b *byte, n int)

//go:noescape
func trans8x8AVX2(b *byte, n int)

// simdLevel selects the kernels: 2 AVX2, 1 SSE2 (every amd64 CPU), 0 none
// (the Go code). Tests lower it to check each level against the Go code.
var simdLevel = func() int {
	if cpu.X86.HasAVX2 {
		return 2
	}
	return 1
}()

// simdLevels lists the levels this machine can run, for tests.
func simdLevels() []int {
	if cpu.X86.HasAVX2 {
		return []int{0, 1, 2}
	}
	return []int{0, 1}
}

// unshuffleSIMD interleaves a leading part of the planes (all n bytes
// long) into dst and returns the number of elements it did; the caller
// does the rest.
func unshuffleSIMD(planes [][]byte, dst []byte, n int) int {
	ts := len(planes)
	var m int
	switch simdLevel {
	case 2:
		m = n &^ 31
	case 1:
		m = n &^ 15
	default:
		return 0
	}
	if m == 0 || len(dst) < ts*m {
		return 0
	}
	for _, p := range planes {
		if len(p) < m {
			return 0
		}
	}
	avx := simdLevel == 2
	switch ts {
	case 2:
		if avx {
			unshuffle2AVX2(&dst[0], &planes[0][0], &planes[1][0], m)
		} else {
			unshuffle2SSE2(&dst[0], &planes[0][0], &planes[1][0], m)
		}
	case 4:
		if avx {
			unshuffle4AVX2(&dst[0], &planes[0][0], &planes[1][0], &planes[2][0], &planes[3][0], m)
		} else {
			unshuffle4SSE2(&dst[0], &planes[0][0], &planes[1][0], &planes[2][0], &planes[3][0], m)
		}
	case 8:
		var p [8]*byte
		for j := range p {
			p[j] = &planes[j][0]
		}
		if avx {
			unshuffle8AVX2(&dst[0], &p, m)
		} else {
			unshuffle8SSE2(&dst[0], &p, m)
		}
	default:
		return 0
	}
	return m
}

// shuffleSIMD splits a leading part of the n elements of src into the
// typesize planes of dst, plane j at dst[j*n:], and returns the number of
// elements it did; the caller does the rest.
func shuffleSIMD(typesize int, src, dst []byte, n int) int {
	var m int
	switch simdLevel {
	case 2:
		m = n &^ 31
	case 1:
		m = n &^ 15
	default:
		return 0
	}
	if m == 0 || len(src) < typesize*m || len(dst) < typesize*n {
		return 0
	}
	avx := simdLevel == 2
	switch typesize {
	case 2:
		if avx {
			shuffle2AVX2(&dst[0], n, &src[0], m)
		} else {
			shuffle2SSE2(&dst[0], n, &src[0], m)
		}
	case 4:
		if avx {
			shuffle4AVX2(&dst[0], n, &src[0], m)
		} else {
			shuffle4SSE2(&dst[0], n, &src[0], m)
		}
	case 8:
		if avx {
			shuffle8AVX2(&dst[0], n, &src[0], m)
		} else {
			shuffle8SSE2(&dst[0], n, &src[0], m)
		}
	default:
		return 0
	}
	return m
}

// trans8x8SIMD applies trans8x8 to a leading part of the words of b and
// returns the number of bytes it did.
func trans8x8SIMD(b []byte) int {
	switch simdLevel {
	case 2:
		m := len(b) &^ 31
		if m > 0 {
			trans8x8AVX2(&b[0], m)
		}
		return m
	case 1:
		m := len(b) &^ 15
		if m > 0 {
			trans8x8SSE2(&b[0], m)
		}
		return m
	}
	return 0
}
