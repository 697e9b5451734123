package gateway

import "math/bits"

func popcount(x uint64) int { return bits.OnesCount64(x) }

// view addresses a strided box inside a C-order array of fixed-size
// elements: element k (a vector, one entry per dimension, 0 <= k < count)
// of the box sits at array index start + k*step.
type view struct {
	shape []int64 // the whole array's shape
	start []int64
	step  []int64
}

// dense is the view of a whole array, or of its box from origin with unit
// steps.
func dense(shape, origin []int64) view {
	step := make([]int64, len(shape))
	for i := range step {
		step[i] = 1
	}
	return view{shape: shape, start: origin, step: step}
}

// copyBox copies count elements (a box) from src, addressed by sv, to dst,
// addressed by dv; both hold elemSize-byte elements in C order. The hot
// path, innermost steps of 1 on both sides, is one copy per row.
func copyBox(dst []byte, dv view, src []byte, sv view, count []int64, elemSize int) {
	nd := len(count)
	for _, c := range count {
		if c == 0 {
			return
		}
	}
	if nd == 0 {
		copy(dst[:elemSize], src[:elemSize])
		return
	}
	e := int64(elemSize)
	// Byte strides of one step along each dimension, and byte offsets of
	// the box's first element.
	dstStride, srcStride := make([]int64, nd), make([]int64, nd)
	dOff, sOff := int64(0), int64(0)
	dAcc, sAcc := e, e
	for d := nd - 1; d >= 0; d-- {
		dstStride[d] = dAcc * dv.step[d]
		srcStride[d] = sAcc * sv.step[d]
		dOff += dv.start[d] * dAcc
		sOff += sv.start[d] * sAcc
		dAcc *= dv.shape[d]
		sAcc *= sv.shape[d]
	}
	inner := count[nd-1]
	dIn, sIn := dstStride[nd-1], srcStride[nd-1]
	contiguous := dIn == e && sIn == e
	rowBytes := inner * e
	idx := make([]int64, nd-1)
	for {
		if contiguous {
			copy(dst[dOff:dOff+rowBytes], src[sOff:sOff+rowBytes])
		} else {
			copyStridedRow(dst[dOff:], dIn, src[sOff:], sIn, inner, elemSize)
		}
		// Advance the odometer over the outer dimensions.
		d := nd - 2
		for ; d >= 0; d-- {
			idx[d]++
			dOff += dstStride[d]
			sOff += srcStride[d]
			if idx[d] < count[d] {
				break
			}
			dOff -= dstStride[d] * count[d]
			sOff -= srcStride[d] * count[d]
			idx[d] = 0
		}
		if d < 0 {
			return
		}
	}
}

// copyStridedRow copies n elements with byte strides ds and ss.
func copyStridedRow(dst []byte, ds int64, src []byte, ss int64, n int64, elemSize int) {
	var di, si int64
	switch elemSize {
	case 1:
		for range n {
			dst[di] = src[si]
			di += ds
			si += ss
		}
	case 4:
		for range n {
			copy(dst[di:di+4], src[si:si+4])
			di += ds
			si += ss
		}
	case 8:
		for range n {
			copy(dst[di:di+8], src[si:si+8])
			di += ds
			si += ss
		}
	default:
		e := int64(elemSize)
		for range n {
			copy(dst[di:di+e], src[si:si+e])
			di += ds
			si += ss
		}
	}
}

// markBox sets, in a per-element bitmap of an array of shape, the bits of
// the box v addresses, and reports how many were already set (an overlap).
func markBox(bits []uint64, v view, count []int64) (overlap int64) {
	nd := len(count)
	for _, c := range count {
		if c == 0 {
			return 0
		}
	}
	if nd == 0 {
		if bits[0]&1 != 0 {
			overlap++
		}
		bits[0] |= 1
		return overlap
	}
	stride := make([]int64, nd)
	off := int64(0)
	acc := int64(1)
	for d := nd - 1; d >= 0; d-- {
		stride[d] = acc * v.step[d]
		off += v.start[d] * acc
		acc *= v.shape[d]
	}
	idx := make([]int64, nd-1)
	inner, in := count[nd-1], stride[nd-1]
	for {
		if in == 1 {
			overlap += markRun(bits, off, inner)
		} else {
			for k, o := int64(0), off; k < inner; k, o = k+1, o+in {
				w, b := o>>6, uint64(1)<<(o&63)
				if bits[w]&b != 0 {
					overlap++
				}
				bits[w] |= b
			}
		}
		d := nd - 2
		for ; d >= 0; d-- {
			idx[d]++
			off += stride[d]
			if idx[d] < count[d] {
				break
			}
			off -= stride[d] * count[d]
			idx[d] = 0
		}
		if d < 0 {
			return overlap
		}
	}
}

// markRun sets bits [off, off+n) a word at a time and counts those already
// set.
func markRun(bits []uint64, off, n int64) (overlap int64) {
	for n > 0 {
		w, b := off>>6, off&63
		take := min(n, 64-b)
		mask := ^uint64(0)
		if take < 64 {
			mask = (uint64(1)<<take - 1) << b
		}
		overlap += int64(popcount(bits[w] & mask))
		bits[w] |= mask
		off += take
		n -= take
	}
	return overlap
}
