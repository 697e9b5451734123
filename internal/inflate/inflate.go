// Package inflate decodes DEFLATE (RFC 1951) in the gzip (RFC 1952) and
// zlib (RFC 1950) containers, whole streams into buffers of known size:
// codecsvc's gzip and zlib codecs in the pure-Go build, and Blosc's zlib
// blocks.
//
// A chunk decodes whole into a buffer of known size, so, unlike a stream
// decoder (klauspost/compress's flate reads its input a byte at a time and
// writes through a 32 KiB window), this one reads its input 8 bytes at a
// time, writes straight into the output and copies matches 8 bytes at a
// time, with table decoding in the manner of libdeflate and zlib's
// inflate: a first table indexed by the next bits of the input, and
// second-level tables for the longer codes. It refuses what
// klauspost/compress refuses (incomplete or over-subscribed codes but
// zlib's one code of one bit, more than 286 literal/length or 30 distance
// codes, a distance before the start of the stream, a stored block's
// length not matching its complement) and, in addition, a literal/length
// code without the end-of-block symbol, which can never end its block.
// FuzzInflate checks it against klauspost's.
package inflate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/adler32"
	"hash/crc32"
	"math/bits"
	"sync"
)

const (
	litRoot  = 10 // bits of the literal/length first table
	distRoot = 8  // bits of the distance first table
	clenRoot = 7  // code length codes are at most 7 bits: one table

	// Sizes of the tables, first table and second-level ones together:
	// the most a complete code needs is 1024 + 1536 (48 second-level
	// tables of 32 entries, each holding at least 6 of the 288 codes)
	// and 256 + 512; powers of two, so that a masked index needs no
	// bounds check.
	litTable  = 4096
	distTable = 1024

	maxCodeLen = 15
)

// An entry of a decoding table: the code's length in bits (0–7), its kind
// (8–10), the count of extra bits after it (11–15) and its value (16–31):
// a literal byte, a length or distance base, or for a link to a
// second-level table, that table's offset, with its index bits in 0–7.
const (
	kindLiteral = 0 << 8
	kindBase    = 1 << 8 // a length (literal/length code) or a distance
	kindEnd     = 2 << 8
	kindLink    = 3 << 8
	kindInvalid = 4 << 8
	kindMask    = 7 << 8
)

var (
	lengthBase  = [29]uint16{3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258}
	lengthExtra = [29]uint8{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0}
	distBase    = [30]uint16{1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577}
	distExtra   = [30]uint8{0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13}
	clenOrder   = [19]uint8{16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15}
)

func litEntry(sym int) uint32 {
	switch {
	case sym < 256:
		return kindLiteral | uint32(sym)<<16
	case sym == 256:
		return kindEnd
	case sym < 286:
		return kindBase | uint32(lengthExtra[sym-257])<<11 | uint32(lengthBase[sym-257])<<16
	}
	return kindInvalid // 286 and 287: in the fixed code, never valid
}

func distEntry(sym int) uint32 {
	if sym < 30 {
		return kindBase | uint32(distExtra[sym])<<11 | uint32(distBase[sym])<<16
	}
	return kindInvalid // 30 and 31: in the fixed code, never valid
}

func clenEntry(sym int) uint32 { return uint32(sym) << 16 }

// buildTable fills table with the canonical Huffman code of lengths (a
// first table of 1<<root entries, then second-level tables), each symbol's
// entry from entry. It reports false for a code that is over-subscribed,
// or incomplete other than as one code of one bit (zlib's exception), or
// that needs more room than table has; an empty code (every length zero)
// is valid and decodes nothing.
func buildTable(table []uint32, lengths []uint8, root uint, entry func(int) uint32, codes []uint16) bool {
	var count [maxCodeLen + 1]int
	maxLen := 0
	for _, l := range lengths {
		count[l]++
		maxLen = max(maxLen, int(l))
	}
	first := table[:1<<root]
	left := 1
	for l := 1; l <= maxCodeLen; l++ {
		left = left<<1 - count[l]
		if left < 0 {
			return false // over-subscribed
		}
	}
	if left > 0 {
		if maxLen > 1 || count[1] > 1 {
			return false // incomplete
		}
		// Empty, or one code of one bit: the rest decodes to nothing.
		for i := range first {
			first[i] = kindInvalid
		}
		if maxLen == 0 {
			return true
		}
	}
	var next [maxCodeLen + 2]int
	for l := 1; l <= maxCodeLen; l++ {
		next[l+1] = (next[l] + count[l]) << 1
	}
	// Each symbol's code, bit-reversed (DEFLATE sends codes from their
	// first bit, read here from the input's low bits first).
	var sub [1 << litRoot]uint8 // per first-table index: its second-level table's bits
	for s, l := range lengths {
		if l == 0 {
			continue
		}
		c := uint16(bits.Reverse16(uint16(next[l])) >> (16 - l))
		next[l]++
		codes[s] = c
		if uint(l) > root {
			p := c & (1<<root - 1)
			sub[p] = max(sub[p], l-uint8(root))
		}
	}
	off := 1 << root
	if uint(maxLen) > root {
		for p := range 1 << root {
			if sub[p] == 0 {
				continue
			}
			if off+1<<sub[p] > len(table) {
				return false
			}
			first[p] = kindLink | uint32(sub[p]) | uint32(off)<<16
			off += 1 << sub[p]
		}
	}
	for s, l := range lengths {
		if l == 0 {
			continue
		}
		e, c := entry(s)|uint32(l), uint(codes[s])
		if uint(l) <= root {
			for i := c; i < 1<<root; i += 1 << l {
				first[i] = e
			}
			continue
		}
		p := c & (1<<root - 1)
		at := int(first[p] >> 16) // the link made above
		t := table[at : at+1<<sub[p]]
		for i := c >> root; i < uint(len(t)); i += 1 << (uint(l) - root) {
			t[i] = e
		}
	}
	return true
}

// inflater holds the tables of one decoding (pooled: 20 KiB).
type inflater struct {
	lit     [litTable]uint32
	dist    [distTable]uint32
	clen    [1 << clenRoot]uint32
	lengths [286 + 30]uint8
	codes   [288]uint16
}

var (
	pool sync.Pool

	fixedOnce sync.Once
	fixedLit  *[litTable]uint32
	fixedDist *[distTable]uint32
)

func fixedTables() {
	var lengths [288]uint8
	for i := range lengths {
		switch {
		case i < 144:
			lengths[i] = 8
		case i < 256:
			lengths[i] = 9
		case i < 280:
			lengths[i] = 7
		default:
			lengths[i] = 8
		}
	}
	var dl [32]uint8
	for i := range dl {
		dl[i] = 5
	}
	var codes [288]uint16
	fixedLit, fixedDist = new([litTable]uint32), new([distTable]uint32)
	if !buildTable(fixedLit[:], lengths[:], litRoot, litEntry, codes[:]) ||
		!buildTable(fixedDist[:], dl[:], distRoot, distEntry, codes[:]) {
		panic("inflate: the fixed code does not build")
	}
}

// The errors of a stream that cannot be decoded: ErrShort when its output
// does not fit the buffer, the others for damage.
var (
	ErrShort     = errors.New("output does not fit")
	ErrCorrupt   = errors.New("corrupt data")
	ErrTruncated = errors.New("truncated data")
)

// bitReader reads a DEFLATE stream's bits from its low bits up.
type bitReader struct {
	in     []byte
	pos    int    // the next byte of in to load; past len(in), bytes of zeros are loaded
	bitbuf uint64 // nbits valid bits; the bits above them may hold the next byte's first bits
	nbits  uint
}

// refill makes nbits at least 56: 8 bytes at once (the bytes that fit
// whole, as libdeflate does; the next byte's first bits, loaded above
// nbits, are loaded again with the same values) or, near the end, a byte
// at a time and zeros past it. It reports false when the stream has
// asked for more than a refill past its end, which no complete stream
// does.
func (r *bitReader) refill() bool {
	if r.pos+8 <= len(r.in) {
		r.bitbuf |= binary.LittleEndian.Uint64(r.in[r.pos:]) << r.nbits
		r.pos += int((63 - r.nbits) >> 3)
		r.nbits |= 56
		return true
	}
	for r.nbits < 56 {
		if r.pos < len(r.in) {
			r.bitbuf |= uint64(r.in[r.pos]) << r.nbits
		} else if r.pos >= len(r.in)+8 {
			return false
		}
		r.pos++
		r.nbits += 8
	}
	return true
}

func (r *bitReader) drop(n uint) {
	r.bitbuf >>= n
	r.nbits -= n
}

// byteAt is the input offset of the next whole byte not yet read.
func (r *bitReader) byteAt() int { return r.pos - int(r.nbits>>3) }

// inflate decodes the raw DEFLATE stream at the start of in into out[o:],
// its history starting at o (a gzip member's stream refers to no earlier
// member). It returns the output's new length and the bytes of in the
// stream took (its last byte counted whole).
func (f *inflater) inflate(in, out []byte, o int) (int, int, error) {
	start := o
	r := bitReader{in: in}
	for {
		if !r.refill() {
			return o, 0, ErrTruncated
		}
		final, typ := r.bitbuf&1, r.bitbuf>>1&3
		r.drop(3)
		switch typ {
		case 0: // stored
			at := r.byteAt()
			if at+4 > len(in) {
				return o, 0, ErrTruncated
			}
			n := int(binary.LittleEndian.Uint16(in[at:]))
			if uint16(n) != ^binary.LittleEndian.Uint16(in[at+2:]) {
				return o, 0, ErrCorrupt
			}
			at += 4
			if at+n > len(in) {
				return o, 0, ErrTruncated
			}
			if n > len(out)-o {
				return o, 0, ErrShort
			}
			o += copy(out[o:], in[at:at+n])
			r.pos, r.bitbuf, r.nbits = at+n, 0, 0
		case 1: // fixed
			var err error
			if o, err = decodeBlock(fixedLit, fixedDist, out, o, start, &r); err != nil {
				return o, 0, err
			}
		case 2: // dynamic
			if err := f.readCodes(&r); err != nil {
				return o, 0, err
			}
			var err error
			if o, err = decodeBlock(&f.lit, &f.dist, out, o, start, &r); err != nil {
				return o, 0, err
			}
		default:
			return o, 0, ErrCorrupt
		}
		if final != 0 {
			used := r.byteAt()
			if used > len(in) {
				return o, 0, ErrTruncated
			}
			return o, used, nil
		}
	}
}

// readCodes reads a dynamic block's code lengths and builds f.lit and
// f.dist from them.
func (f *inflater) readCodes(r *bitReader) error {
	if !r.refill() {
		return ErrTruncated
	}
	nlit, ndist, nclen := int(r.bitbuf&31)+257, int(r.bitbuf>>5&31)+1, int(r.bitbuf>>10&15)+4
	r.drop(14)
	if nlit > 286 || ndist > 30 {
		return ErrCorrupt
	}
	var cl [19]uint8
	for i := range nclen {
		if r.nbits < 3 && !r.refill() {
			return ErrTruncated
		}
		cl[clenOrder[i]] = uint8(r.bitbuf & 7)
		r.drop(3)
	}
	var codes [19]uint16
	if !buildTable(f.clen[:], cl[:], clenRoot, clenEntry, codes[:]) {
		return ErrCorrupt
	}
	lengths := f.lengths[:nlit+ndist]
	for i := 0; i < len(lengths); {
		if r.nbits < 7+7 && !r.refill() {
			return ErrTruncated
		}
		e := f.clen[r.bitbuf&(1<<clenRoot-1)]
		if e&kindMask == kindInvalid {
			return ErrCorrupt
		}
		r.drop(uint(e & 0xff))
		sym := e >> 16
		if sym < 16 {
			lengths[i] = uint8(sym)
			i++
			continue
		}
		var rep int
		var val uint8
		switch sym {
		case 16:
			if i == 0 {
				return ErrCorrupt
			}
			rep, val = 3+int(r.bitbuf&3), lengths[i-1]
			r.drop(2)
		case 17:
			rep = 3 + int(r.bitbuf&7)
			r.drop(3)
		default:
			rep = 11 + int(r.bitbuf&127)
			r.drop(7)
		}
		if i+rep > len(lengths) {
			return ErrCorrupt
		}
		for range rep {
			lengths[i] = val
			i++
		}
	}
	if lengths[256] == 0 {
		return ErrCorrupt // no end of block: the block could never end
	}
	if !buildTable(f.lit[:], lengths[:nlit], litRoot, litEntry, f.codes[:]) ||
		!buildTable(f.dist[:], lengths[nlit:], distRoot, distEntry, f.codes[:]) {
		return ErrCorrupt
	}
	return nil
}

// decodeBlock decodes one Huffman-coded block's symbols into out[o:], up
// to its end-of-block symbol; start is where the stream's output began.
func decodeBlock(lit *[litTable]uint32, dist *[distTable]uint32, out []byte, o, start int, r *bitReader) (int, error) {
	// The reader's state in locals for the loop, back in r at the end.
	in, pos, bitbuf, nbits := r.in, r.pos, r.bitbuf, r.nbits
	defer func() { r.pos, r.bitbuf, r.nbits = pos, bitbuf, nbits }()
	for {
		if pos+8 <= len(in) {
			bitbuf |= binary.LittleEndian.Uint64(in[pos:]) << nbits
			pos += int((63 - nbits) >> 3)
			nbits |= 56
		} else {
			r.pos, r.bitbuf, r.nbits = pos, bitbuf, nbits
			if !r.refill() {
				return o, ErrTruncated
			}
			pos, bitbuf, nbits = r.pos, r.bitbuf, r.nbits
		}
		// At least 56 bits: a literal/length code and its extra bits (15 +
		// 5), then a distance code and its extra bits (15 + 13); or up to
		// four literals whose codes the first table holds (10 bits each).
		e := lit[bitbuf&(1<<litRoot-1)]
		if e&kindMask == kindLiteral && len(out)-o >= 4 {
			w := out[o : o+4 : o+4]
			k := 0
			for {
				n := uint(e & 0xff)
				bitbuf >>= n
				nbits -= n
				w[k] = byte(e >> 16)
				if k++; k == len(w) {
					break
				}
				if e = lit[bitbuf&(1<<litRoot-1)]; e&kindMask != kindLiteral {
					break
				}
			}
			o += k
			continue
		}
		if e&kindMask == kindLink {
			e = lit[(e>>16+uint32(bitbuf>>litRoot)&(1<<(e&0xff)-1))&(litTable-1)]
		}
		n := uint(e & 0xff)
		bitbuf >>= n
		nbits -= n
		switch e & kindMask {
		case kindLiteral:
			if o >= len(out) {
				return o, shortOrTruncated(in, pos, nbits)
			}
			out[o] = byte(e >> 16)
			o++
			continue
		case kindEnd:
			return o, nil
		case kindInvalid:
			return o, ErrCorrupt
		}
		x := uint(e >> 11 & 31)
		length := int(e>>16) + int(bitbuf&(1<<x-1))
		bitbuf >>= x
		nbits -= x
		e = dist[bitbuf&(1<<distRoot-1)]
		if e&kindMask == kindLink {
			e = dist[(e>>16+uint32(bitbuf>>distRoot)&(1<<(e&0xff)-1))&(distTable-1)]
		}
		if e&kindMask != kindBase {
			return o, ErrCorrupt
		}
		n = uint(e & 0xff)
		bitbuf >>= n
		x = uint(e >> 11 & 31)
		d := int(e>>16) + int(bitbuf&(1<<x-1))
		bitbuf >>= x
		nbits -= n + x
		if d > o-start {
			return o, ErrCorrupt
		}
		if length > len(out)-o {
			return o, shortOrTruncated(in, pos, nbits)
		}
		from := o - d
		if d >= 8 && len(out)-o >= length+8 {
			// 8 bytes at a time, past the match's end (later output
			// overwrites them): every byte read lies d ≥ 8 before the
			// one written, so is written already.
			for i := 0; i < length; i += 8 {
				binary.LittleEndian.PutUint64(out[o+i:], binary.LittleEndian.Uint64(out[from+i:]))
			}
		} else if d == 1 && len(out)-o >= length+8 {
			// A run of one byte, 8 at a time.
			v := uint64(out[from]) * 0x0101010101010101
			for i := 0; i < length; i += 8 {
				binary.LittleEndian.PutUint64(out[o+i:], v)
			}
		} else {
			// The d bytes before o, repeated: each copy doubles what is
			// there to copy from (a multiple of d bytes, so the pattern
			// keeps its phase).
			for done := 0; done < length; {
				done += copy(out[o+done:o+length], out[from:o+done])
			}
		}
		o += length
	}
}

// shortOrTruncated is the error of output that does not fit, unless the
// stream has run out first: its end was decoded from the zeros refill
// loads past it.
func shortOrTruncated(in []byte, pos int, nbits uint) error {
	if pos-int(nbits>>3) > len(in) {
		return ErrTruncated
	}
	return ErrShort
}

// Gzip decodes the gzip members of b (every one; anything after the
// last refused) into out and returns the bytes written.
func Gzip(b, out []byte) (int, error) {
	f := get()
	defer pool.Put(f)
	n, in := 0, 0
	for first := true; first || in < len(b); first = false {
		h, err := gzipHeader(b[in:])
		if err != nil && !first {
			return 0, fmt.Errorf("%d bytes of garbage after the stream", len(b)-in)
		}
		if err != nil {
			return 0, err
		}
		in += h
		m, used, err := f.inflate(b[in:], out, n)
		if err != nil {
			return 0, err
		}
		in += used
		if len(b)-in < 8 {
			return 0, ErrTruncated
		}
		if binary.LittleEndian.Uint32(b[in:]) != crc32.ChecksumIEEE(out[n:m]) || binary.LittleEndian.Uint32(b[in+4:]) != uint32(m-n) {
			return 0, errors.New("checksum or size mismatch")
		}
		in += 8
		n = m
	}
	return n, nil
}

// gzipHeader checks the member header at the start of b and returns its
// length.
func gzipHeader(b []byte) (int, error) {
	if len(b) < 10 {
		return 0, ErrTruncated
	}
	if b[0] != 0x1f || b[1] != 0x8b || b[2] != 8 {
		return 0, errors.New("not a gzip member")
	}
	flg, h := b[3], 10
	if flg>>5 != 0 {
		return 0, errors.New("reserved header flags set")
	}
	if flg&4 != 0 { // FEXTRA
		if len(b) < h+2 {
			return 0, ErrTruncated
		}
		h += 2 + int(binary.LittleEndian.Uint16(b[h:]))
	}
	for _, flag := range []byte{8, 16} { // FNAME, FCOMMENT: zero-terminated
		if flg&flag == 0 {
			continue
		}
		for {
			if h >= len(b) {
				return 0, ErrTruncated
			}
			h++
			if b[h-1] == 0 {
				break
			}
		}
	}
	if flg&2 != 0 { // FHCRC
		if len(b) < h+2 {
			return 0, ErrTruncated
		}
		if binary.LittleEndian.Uint16(b[h:]) != uint16(crc32.ChecksumIEEE(b[:h])) {
			return 0, errors.New("header checksum mismatch")
		}
		h += 2
	}
	if h > len(b) {
		return 0, ErrTruncated
	}
	return h, nil
}

// Zlib decodes the zlib stream at the start of b into out and returns
// the bytes written and the bytes of b the stream took.
func Zlib(b, out []byte) (n, used int, err error) {
	f := get()
	defer pool.Put(f)
	if len(b) < 2 {
		return 0, 0, ErrTruncated
	}
	if b[0]&15 != 8 || b[0]>>4 > 7 || (uint(b[0])<<8|uint(b[1]))%31 != 0 {
		return 0, 0, errors.New("not a zlib header")
	}
	if b[1]&0x20 != 0 {
		return 0, 0, errors.New("a preset dictionary is not supported")
	}
	n, used, err = f.inflate(b[2:], out, 0)
	if err != nil {
		return 0, 0, err
	}
	in := 2 + used
	if len(b)-in < 4 {
		return 0, 0, ErrTruncated
	}
	if binary.BigEndian.Uint32(b[in:]) != adler32.Checksum(out[:n]) {
		return 0, 0, errors.New("checksum mismatch")
	}
	return n, in + 4, nil
}

func get() *inflater {
	f, _ := pool.Get().(*inflater)
	if f == nil {
		f = new(inflater)
	}
	fixedOnce.Do(fixedTables)
	return f
}
