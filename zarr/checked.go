package zarr

import (
	"math"
	"math/bits"
)

// Overflow-checked arithmetic for the sizes that come from metadata and
// requests (shapes, chunk shapes, selections, block origins): every count
// or byte size the service computes from client input goes through these,
// so that an overflow is an error instead of a wrapped number that later
// sizes a buffer or an index.

// MulChecked returns a*b for non-negative a and b, and false if the product
// does not fit in an int64.
func MulChecked(a, b int64) (int64, bool) {
	if a < 0 || b < 0 {
		return 0, false
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return 0, false
	}
	return int64(lo), true
}

// AddChecked returns a+b for non-negative a and b, and false on overflow.
func AddChecked(a, b int64) (int64, bool) {
	if a < 0 || b < 0 || a > math.MaxInt64-b {
		return 0, false
	}
	return a + b, true
}

// ProductChecked is the product of non-negative dims (1 for none), and
// false if a dimension is negative or the product overflows an int64.
func ProductChecked(dims []int64) (int64, bool) {
	n := int64(1)
	for _, d := range dims {
		var ok bool
		if n, ok = MulChecked(n, d); !ok {
			return 0, false
		}
	}
	return n, true
}

// SaturatingProduct is the product of non-negative dims, or math.MaxInt64
// if it overflows: for comparisons against a limit.
func SaturatingProduct(dims []int64) int64 {
	n, ok := ProductChecked(dims)
	if !ok {
		return math.MaxInt64
	}
	return n
}

// Bytes is the byte size of n elements of size elem (0: variable length,
// counted as 0), and an ErrInvalid naming what if it overflows.
func Bytes(what string, shape []int64, elem int) (int64, error) {
	n, ok := ProductChecked(shape)
	if ok {
		n, ok = MulChecked(n, int64(elem))
	}
	if !ok {
		return 0, newError(ErrInvalid, "%s: shape %v of %d-byte elements has more than 2^63 bytes", what, shape, elem)
	}
	return n, nil
}
