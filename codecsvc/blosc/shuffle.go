package blosc

import "encoding/binary"

// Byte shuffle, as c-blosc applies it to a block of n elements of typesize
// bytes: byte j of element i moves to j*n+i, so that the block becomes
// typesize planes of n bytes. Trailing bytes that don't fill an element stay
// where they are.

func shuffle(typesize int, src, dst []byte) {
	n := len(src) / typesize
	nb := n * typesize
	if n == 0 {
		copy(dst, src)
		return
	}
	if typesize == 1 {
		copy(dst, src)
		return
	}
	shufflePlanes(typesize, src, dst, n, shuffleSIMD(typesize, src, dst, n))
	copy(dst[nb:], src[nb:])
}

// shufflePlanes does elements m to n of shuffle.
func shufflePlanes(typesize int, src, dst []byte, n, m int) {
	switch typesize {
	case 2:
		p0, p1 := dst[m:n], dst[n+m:2*n]
		s := src[2*m : 2*n]
		for i := range p0 {
			v := binary.LittleEndian.Uint16(s[2*i:])
			p0[i], p1[i] = byte(v), byte(v>>8)
		}
	case 4:
		p0, p1, p2, p3 := dst[m:n], dst[n+m:2*n], dst[2*n+m:3*n], dst[3*n+m:4*n]
		s := src[4*m : 4*n]
		for i := range p0 {
			v := binary.LittleEndian.Uint32(s[4*i:])
			p0[i], p1[i], p2[i], p3[i] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
		}
	case 8:
		p0, p1, p2, p3 := dst[m:n], dst[n+m:2*n], dst[2*n+m:3*n], dst[3*n+m:4*n]
		p4, p5, p6, p7 := dst[4*n+m:5*n], dst[5*n+m:6*n], dst[6*n+m:7*n], dst[7*n+m:8*n]
		s := src[8*m : 8*n]
		for i := range p0 {
			v := binary.LittleEndian.Uint64(s[8*i:])
			p0[i], p1[i], p2[i], p3[i] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
			p4[i], p5[i], p6[i], p7[i] = byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56)
		}
	default:
		for j := 0; j < typesize; j++ {
			p := dst[j*n+m : (j+1)*n]
			s := src[m*typesize+j:]
			for i := range p {
				p[i] = s[i*typesize]
			}
		}
	}
}

func unshuffle(typesize int, src, dst []byte) {
	n := len(src) / typesize
	nb := n * typesize
	if n == 0 || typesize == 1 {
		copy(dst, src)
		return
	}
	var buf [maxSplits][]byte
	planes := buf[:0]
	for j := 0; j < typesize; j++ {
		planes = append(planes, src[j*n:(j+1)*n])
	}
	unshufflePlanes(planes, dst[:nb])
	copy(dst[nb:], src[nb:])
}

// unshufflePlanes interleaves len(planes) planes of equal length into dst:
// dst[i*len(planes)+j] = planes[j][i].
func unshufflePlanes(planes [][]byte, dst []byte) {
	ts := len(planes)
	n := len(planes[0])
	if ts == 1 {
		copy(dst, planes[0])
		return
	}
	i := unshuffleSIMD(planes, dst, n)
	switch ts {
	case 2:
		i += interleave2(planes[0][i:n], planes[1][i:n], dst[2*i:2*n])
	case 4:
		i += interleave4(planes[0][i:n], planes[1][i:n], planes[2][i:n], planes[3][i:n], dst[4*i:4*n])
	case 8:
		var p [8][]byte
		for j := range p {
			p[j] = planes[j][i:n]
		}
		i += interleave8(&p, dst[8*i:8*n])
	}
	for j, p := range planes {
		d := dst[j:]
		for k := i; k < n; k++ {
			d[k*ts] = p[k]
		}
	}
}

// interleave2, interleave4 and interleave8 interleave groups of 8 elements
// and return how many elements they did.
func interleave2(p0, p1, d []byte) int {
	i := 0
	for ; i+8 <= len(p0) && i+8 <= len(p1) && 2*i+16 <= len(d); i += 8 {
		a := binary.LittleEndian.Uint64(p0[i:])
		b := binary.LittleEndian.Uint64(p1[i:])
		binary.LittleEndian.PutUint64(d[2*i:], spread8(uint32(a))|spread8(uint32(b))<<8)
		binary.LittleEndian.PutUint64(d[2*i+8:], spread8(uint32(a>>32))|spread8(uint32(b>>32))<<8)
	}
	return i
}

func interleave4(p0, p1, p2, p3, d []byte) int {
	n := len(p0)
	for len(p0) >= 8 && len(p1) >= 8 && len(p2) >= 8 && len(p3) >= 8 && len(d) >= 32 {
		r0 := binary.LittleEndian.Uint64(p0)
		r1 := binary.LittleEndian.Uint64(p1)
		r2 := binary.LittleEndian.Uint64(p2)
		r3 := binary.LittleEndian.Uint64(p3)
		// Transpose the two 4x4 byte blocks.
		r0, r1 = swap8(r0, r1)
		r2, r3 = swap8(r2, r3)
		r0, r2 = swap16(r0, r2)
		r1, r3 = swap16(r1, r3)
		binary.LittleEndian.PutUint64(d, r0&0xFFFFFFFF|r1<<32)
		binary.LittleEndian.PutUint64(d[8:], r2&0xFFFFFFFF|r3<<32)
		binary.LittleEndian.PutUint64(d[16:], r0>>32|r1&0xFFFFFFFF00000000)
		binary.LittleEndian.PutUint64(d[24:], r2>>32|r3&0xFFFFFFFF00000000)
		p0, p1, p2, p3, d = p0[8:], p1[8:], p2[8:], p3[8:], d[32:]
	}
	return n - len(p0)
}

func interleave8(p *[8][]byte, d []byte) int {
	n := len(p[0])
	for _, q := range p {
		n = min(n, len(q))
	}
	n = min(n, len(d)/8)
	i := 0
	for ; i+8 <= n; i += 8 {
		r0 := binary.LittleEndian.Uint64(p[0][i:])
		r1 := binary.LittleEndian.Uint64(p[1][i:])
		r2 := binary.LittleEndian.Uint64(p[2][i:])
		r3 := binary.LittleEndian.Uint64(p[3][i:])
		r4 := binary.LittleEndian.Uint64(p[4][i:])
		r5 := binary.LittleEndian.Uint64(p[5][i:])
		r6 := binary.LittleEndian.Uint64(p[6][i:])
		r7 := binary.LittleEndian.Uint64(p[7][i:])
		// 8x8 byte transpose.
		r0, r1 = swap8(r0, r1)
		r2, r3 = swap8(r2, r3)
		r4, r5 = swap8(r4, r5)
		r6, r7 = swap8(r6, r7)
		r0, r2 = swap16(r0, r2)
		r1, r3 = swap16(r1, r3)
		r4, r6 = swap16(r4, r6)
		r5, r7 = swap16(r5, r7)
		r0, r4 = swap32(r0, r4)
		r1, r5 = swap32(r1, r5)
		r2, r6 = swap32(r2, r6)
		r3, r7 = swap32(r3, r7)
		o := d[8*i : 8*i+64]
		binary.LittleEndian.PutUint64(o, r0)
		binary.LittleEndian.PutUint64(o[8:], r1)
		binary.LittleEndian.PutUint64(o[16:], r2)
		binary.LittleEndian.PutUint64(o[24:], r3)
		binary.LittleEndian.PutUint64(o[32:], r4)
		binary.LittleEndian.PutUint64(o[40:], r5)
		binary.LittleEndian.PutUint64(o[48:], r6)
		binary.LittleEndian.PutUint64(o[56:], r7)
	}
	return i
}

// spread8 puts the 4 bytes of x in the even bytes of the result.
func spread8(x uint32) uint64 {
	v := uint64(x)
	v = (v | v<<16) & 0x0000FFFF0000FFFF
	return (v | v<<8) & 0x00FF00FF00FF00FF
}

// swap8, swap16 and swap32 are the steps of a byte-matrix transpose: with a
// and b two rows, they exchange the odd units of a with the even units of b.
func swap8(a, b uint64) (uint64, uint64) {
	t := (a>>8 ^ b) & 0x00FF00FF00FF00FF
	return a ^ t<<8, b ^ t
}

func swap16(a, b uint64) (uint64, uint64) {
	t := (a>>16 ^ b) & 0x0000FFFF0000FFFF
	return a ^ t<<16, b ^ t
}

func swap32(a, b uint64) (uint64, uint64) {
	t := (a>>32 ^ b) & 0x00000000FFFFFFFF
	return a ^ t<<32, b ^ t
}

// Bit shuffle (the bitshuffle library's layout, as bundled in c-blosc):
// for n elements, n a multiple of 8, bit b of byte j of element i moves to
// bit i%8 of byte (8*j+b)*(n/8) + i/8. A block whose element count is not
// a multiple of 8 is stored unchanged; trailing bytes that don't fill an
// element are copied as they are.

// trans8x8 transposes the 8x8 bit matrix whose rows are the bytes of x.
func trans8x8(x uint64) uint64 {
	t := (x ^ (x >> 7)) & 0x00AA00AA00AA00AA
	x = x ^ t ^ (t << 7)
	t = (x ^ (x >> 14)) & 0x0000CCCC0000CCCC
	x = x ^ t ^ (t << 14)
	t = (x ^ (x >> 28)) & 0x00000000F0F0F0F0
	return x ^ t ^ (t << 28)
}

// trans8x8Words applies trans8x8 to every 8-byte word of b (len(b) a
// multiple of 8).
func trans8x8Words(b []byte) {
	for i := trans8x8SIMD(b); i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], trans8x8(binary.LittleEndian.Uint64(b[i:])))
	}
}

// A plane of n bytes (n a multiple of 8) is bit-shuffled as n/8 words of 8
// bytes: each word's bit matrix is transposed, and byte k of word g goes to
// row k, at k*(n/8)+g; the rows are a byte shuffle of the words with
// typesize 8, done by the same kernels as the byte shuffle.

func bitshuffle(typesize int, src, dst, tmp []byte) {
	n := len(src) / typesize
	if n%8 != 0 {
		copy(dst, src)
		return
	}
	nb := n * typesize
	shuffle(typesize, src[:nb], tmp[:nb])
	for j := 0; j < typesize; j++ {
		plane := tmp[j*n : (j+1)*n]
		trans8x8Words(plane)
		shuffle(8, plane, dst[j*n:(j+1)*n])
	}
	copy(dst[nb:], src[nb:])
}

func bitunshuffle(typesize int, src, dst, tmp []byte) {
	n := len(src) / typesize
	if n%8 != 0 {
		copy(dst, src)
		return
	}
	nb := n * typesize
	for j := 0; j < typesize; j++ {
		plane := tmp[j*n : (j+1)*n]
		unshuffle(8, src[j*n:(j+1)*n], plane)
		trans8x8Words(plane)
	}
	unshuffle(typesize, tmp[:nb], dst[:nb])
	copy(dst[nb:], src[nb:])
}

// ShuffleBytes byte-shuffles src into dst (of the same length) for
// elements of typesize bytes, the layout of a Blosc block and of numcodecs'
// Shuffle codec: byte j of element i goes to j*n+i, for n whole elements;
// trailing bytes that don't fill an element are copied as they are.
func ShuffleBytes(typesize int, src, dst []byte) {
	dst = dst[:len(src)]
	if typesize <= 0 {
		copy(dst, src)
		return
	}
	shuffle(typesize, src, dst)
}

// UnshuffleBytes undoes ShuffleBytes.
func UnshuffleBytes(typesize int, src, dst []byte) {
	dst = dst[:len(src)]
	if typesize <= 0 {
		copy(dst, src)
		return
	}
	unshuffle(typesize, src, dst)
}
