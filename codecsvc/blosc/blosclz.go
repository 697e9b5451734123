package blosc

import (
	"encoding/binary"
	"errors"
	"math/bits"
)

// BloscLZ is c-blosc's FastLZ derivative. A stream is a sequence of
// instructions, each starting with a control byte:
//
//   - ctrl < 32: a literal run of ctrl+1 bytes that follow.
//   - otherwise a match. len = ctrl>>5; if len is 7, bytes follow that are
//     added to it up to and including the first that isn't 255. Then one byte
//     lo; the match copies len+2 bytes from distance ((ctrl&31)<<8 | lo) + 1.
//     When (ctrl&31) is 31 and lo is 255 two more bytes follow, a big-endian
//     d, and the distance is d + 8191 + 1.
//
// The first instruction is always a literal; its control byte has bit 5 set
// as a marker, which decoders mask off. c-blosc's decoder needs a byte after
// every match, so streams end with a literal.

const (
	lzMaxCopy        = 32
	lzMaxDistance    = 8191
	lzMaxFarDistance = 65535 + lzMaxDistance - 1
	lzHashLog        = 14
)

var errBlosclz = errors.New("corrupt blosclz stream")

// blosclzDecompress decodes in into out and returns the number of bytes
// written. It never writes beyond out.
func blosclzDecompress(in, out []byte) (int, error) {
	if len(in) == 0 {
		return 0, errBlosclz
	}
	ip, op := 1, 0
	ctrl := int(in[0] & 31)
	for {
		if ctrl >= 32 {
			l := ctrl>>5 - 1
			hi := (ctrl & 31) << 8
			if l == 6 {
				for {
					if ip >= len(in) {
						return op, errBlosclz
					}
					c := in[ip]
					ip++
					l += int(c)
					if c != 255 {
						break
					}
				}
			}
			if ip >= len(in) {
				return op, errBlosclz
			}
			lo := int(in[ip])
			ip++
			l += 3
			dist := hi + lo + 1
			if lo == 255 && hi == 31<<8 {
				if ip+2 > len(in) {
					return op, errBlosclz
				}
				dist = int(in[ip])<<8 | int(in[ip+1]) + lzMaxDistance + 1
				ip += 2
			}
			if dist > op || l > len(out)-op {
				return op, errBlosclz
			}
			end := op + l
			if dist >= l {
				copy(out[op:end], out[op-dist:])
				op = end
			} else {
				// Overlapping copy: the period-dist pattern doubles each round.
				for op < end {
					n := copy(out[op:end], out[op-dist:op])
					op += n
					dist += n
				}
			}
		} else {
			n := ctrl + 1
			if n > len(out)-op || n > len(in)-ip {
				return op, errBlosclz
			}
			copy(out[op:], in[ip:ip+n])
			op += n
			ip += n
		}
		if ip >= len(in) {
			return op, nil
		}
		ctrl = int(in[ip])
		ip++
	}
}

// blosclzCompress encodes src into dst and returns the encoded size, or 0 if
// the encoding doesn't fit in dst. It is a greedy single-probe LZ77, simpler
// than c-blosc's encoder, that writes streams c-blosc decodes.
func blosclzCompress(dst, src []byte, clevel int) int {
	n := len(src)
	if n < 16 || len(dst) < 66 {
		return 0
	}
	var htab [1 << lzHashLog]int32
	ipLimit := n - 12 // no match starts at or after this
	matchEnd := n - 1 // matches stop here, leaving a final literal
	op, lit := 0, 0

	literals := func(end int) bool {
		for lit < end {
			c := min(end-lit, lzMaxCopy)
			if op+1+c > len(dst) {
				return false
			}
			dst[op] = byte(c - 1)
			copy(dst[op+1:], src[lit:lit+c])
			op += 1 + c
			lit += c
		}
		return true
	}
	hash := func(v uint32) uint32 { return (v * 2654435761) >> (32 - lzHashLog) }

	ip := 0
	for ip < ipLimit {
		seq := binary.LittleEndian.Uint32(src[ip:])
		h := hash(seq)
		ref := int(htab[h])
		htab[h] = int32(ip)
		dist := ip - ref
		if dist <= 0 || dist >= lzMaxFarDistance || binary.LittleEndian.Uint32(src[ref:]) != seq {
			ip++
			continue
		}
		l := 4
		for ip+l+8 <= matchEnd {
			x := binary.LittleEndian.Uint64(src[ip+l:]) ^ binary.LittleEndian.Uint64(src[ref+l:])
			if x != 0 {
				l += bits.TrailingZeros64(x) / 8
				goto matched
			}
			l += 8
		}
		for ip+l < matchEnd && src[ip+l] == src[ref+l] {
			l++
		}
	matched:
		if !literals(ip) {
			return 0
		}
		if op+8+(l/255) > len(dst) {
			return 0
		}
		lf := l - 2
		d := dist - 1
		far := d >= lzMaxDistance
		hi := 31
		if !far {
			hi = d >> 8
		}
		if lf < 7 {
			dst[op] = byte(lf<<5 | hi)
			op++
		} else {
			dst[op] = byte(7<<5 | hi)
			op++
			rem := lf - 7
			for ; rem >= 255; rem -= 255 {
				dst[op] = 255
				op++
			}
			dst[op] = byte(rem)
			op++
		}
		if far {
			d -= lzMaxDistance
			dst[op], dst[op+1], dst[op+2] = 255, byte(d>>8), byte(d)
			op += 3
		} else {
			dst[op] = byte(d)
			op++
		}
		ip += l
		lit = ip
		if ip < ipLimit {
			htab[hash(binary.LittleEndian.Uint32(src[ip-1:]))] = int32(ip - 1)
		}
	}
	if !literals(n) {
		return 0
	}
	dst[0] |= 1 << 5
	return op
}
