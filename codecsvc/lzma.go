package codecsvc

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"hash"
	"hash/crc32"
	"hash/crc64"
	"io"
	"strconv"

	"github.com/ulikunitz/xz"
	"github.com/ulikunitz/xz/lzma"

	"github.com/zarrgate/zarrgate/errs"
)

// numcodecs LZMA: Python's lzma module (liblzma) in one of its container
// formats: xz (format 1, the default), the legacy .lzma "alone" format
// (2), or raw LZMA2/LZMA1 data (3) described by the filters; format 0
// (auto) reads xz or alone and writes xz. Encoding and decoding use
// github.com/ulikunitz/xz's LZMA coders, but the xz container is read here:
// its reader allocates the dictionary an xz block header declares (up to
// 1.5 GiB, and liblzma declares 8 MiB for a chunk of a few bytes), whereas
// a dictionary as large as the output is all decoding ever needs. So the
// blocks are walked first, their sizes summed from the LZMA2 chunk headers
// and checked against the bound before anything is allocated, and each is
// decoded with a dictionary no larger than its output.
func init() { Register("numcodecs.lzma", newLZMA) }

const (
	lzmaFormatAuto, lzmaFormatXZ, lzmaFormatAlone, lzmaFormatRaw = 0, 1, 2, 3

	filterLZMA1 = 0x4000000000000001
	filterLZMA2 = 0x21
)

// liblzma's dictionary size for each preset.
var presetDict = [10]int{256 << 10, 1 << 20, 2 << 20, 4 << 20, 4 << 20, 8 << 20, 8 << 20, 16 << 20, 32 << 20, 64 << 20}

type lzmaCodec struct {
	format  int
	check   byte // xz check id
	dict    int  // encoder dictionary
	lzma1   bool // raw: LZMA1 rather than LZMA2
	props   lzma.Properties
	rawDict int // raw: the filter's dictionary (decoding)
}

func newLZMA(cfg json.RawMessage, _ ChunkSpec) (any, error) {
	c := struct {
		Format  *int                          `json:"format"`
		Check   *int                          `json:"check"`
		Preset  *int64                        `json:"preset"`
		Filters *[]map[string]json.RawMessage `json:"filters"`
	}{}
	if err := lenient(cfg, &c); err != nil {
		return nil, err
	}
	l := lzmaCodec{format: lzmaFormatXZ, check: xz.CRC64, props: lzma.Properties{LC: 3, LP: 0, PB: 2}, rawDict: presetDict[6]}
	if c.Format != nil {
		l.format = *c.Format
	}
	if l.format < 0 || l.format > 3 {
		return nil, errs.New(errs.InvalidArgument, "configuration.format %d: want 0 (auto), 1 (xz), 2 (alone) or 3 (raw)", l.format)
	}
	if c.Check != nil && *c.Check != -1 {
		switch ch := *c.Check; {
		case l.format != lzmaFormatXZ && ch != 0:
			return nil, errs.New(errs.InvalidArgument, "configuration.check %d: only the xz format (1) has checks", ch)
		case ch == 0 || ch == 1 || ch == 4 || ch == 10:
			l.check = byte(ch)
		default:
			return nil, errs.New(errs.InvalidArgument, "configuration.check %d: want -1, 0 (none), 1 (CRC32), 4 (CRC64) or 10 (SHA-256)", ch)
		}
	}
	preset := 6
	if c.Preset != nil {
		p := *c.Preset &^ 0x80000000 // PRESET_EXTREME only slows the encoder
		if p < 0 || p > 9 {
			return nil, errs.New(errs.InvalidArgument, "configuration.preset %d: want 0 to 9, optionally | 0x80000000", *c.Preset)
		}
		preset = int(p)
	}
	l.dict = presetDict[preset]
	if c.Filters != nil {
		if c.Preset != nil {
			return nil, errs.New(errs.InvalidArgument, "configuration.preset and configuration.filters cannot both be given")
		}
		fs := *c.Filters
		if len(fs) != 1 {
			return nil, errs.New(errs.InvalidArgument, "configuration.filters: only a single LZMA1 or LZMA2 filter is supported, not %d filters", len(fs))
		}
		if err := l.filter(fs[0]); err != nil {
			return nil, err
		}
	} else if l.format == lzmaFormatRaw {
		return nil, errs.New(errs.InvalidArgument, "configuration.filters: the raw format (3) needs them")
	}
	return l, nil
}

// filter reads the one filter of a configuration.
func (l *lzmaCodec) filter(f map[string]json.RawMessage) error {
	num := func(key string, def int64) (int64, error) {
		v, ok := f[key]
		if !ok || string(v) == "null" {
			return def, nil
		}
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			return 0, errs.New(errs.InvalidArgument, "configuration.filters[0].%s: %s is not an integer", key, v)
		}
		return n, nil
	}
	id, err := strconv.ParseUint(string(f["id"]), 10, 64)
	if err != nil {
		return errs.New(errs.InvalidArgument, "configuration.filters[0].id: missing or not an integer")
	}
	switch {
	case id == filterLZMA2 && l.format != lzmaFormatAlone:
	case id == filterLZMA1 && (l.format == lzmaFormatAlone || l.format == lzmaFormatRaw):
		l.lzma1 = true
	default:
		return errs.New(errs.InvalidArgument, "configuration.filters[0].id %d is not supported in format %d (LZMA2 %d for xz and raw, LZMA1 %d for alone and raw)", id, l.format, filterLZMA2, uint64(filterLZMA1))
	}
	p, err := num("preset", 6)
	if err != nil {
		return err
	}
	if p &^= 0x80000000; p < 0 || p > 9 {
		return errs.New(errs.InvalidArgument, "configuration.filters[0].preset %d: want 0 to 9", p)
	}
	dict, err := num("dict_size", int64(presetDict[p]))
	if err != nil {
		return err
	}
	if dict < lzma.MinDictCap || dict > 1536<<20 {
		return errs.New(errs.InvalidArgument, "configuration.filters[0].dict_size %d: want 4096 to 1.5 GiB", dict)
	}
	l.dict, l.rawDict = int(dict), int(dict)
	for _, k := range []struct {
		key      string
		to       *int
		def, top int64
	}{{"lc", &l.props.LC, 3, 4}, {"lp", &l.props.LP, 0, 4}, {"pb", &l.props.PB, 2, 4}} {
		v, err := num(k.key, k.def)
		if err != nil {
			return err
		}
		if v < 0 || v > k.top {
			return errs.New(errs.InvalidArgument, "configuration.filters[0].%s %d: want 0 to %d", k.key, v, k.top)
		}
		*k.to = int(v)
	}
	if !l.lzma1 && l.props.LC+l.props.LP > 4 {
		return errs.New(errs.InvalidArgument, "configuration.filters[0]: lc + lp must be at most 4 for LZMA2")
	}
	return nil
}

// encoderDict is the dictionary for encoding n bytes: the configured one,
// or less when the input is smaller (no match can reach further back).
func (l lzmaCodec) encoderDict(n int) int {
	return min(l.dict, max(n, lzma.MinDictCap))
}

func (l lzmaCodec) Encode(b []byte) ([]byte, error) {
	var out bytes.Buffer
	var w io.WriteCloser
	var err error
	switch {
	case l.format == lzmaFormatAlone:
		w, err = lzma.WriterConfig{Properties: &l.props, DictCap: l.encoderDict(len(b)), SizeInHeader: true, Size: int64(len(b))}.NewWriter(&out)
	case l.format == lzmaFormatRaw && l.lzma1:
		// liblzma's raw LZMA1 stream: no header, an end marker. Written
		// as the alone format with an end marker, its header cut off.
		w, err = lzma.WriterConfig{Properties: &l.props, DictCap: l.encoderDict(len(b)), EOSMarker: true}.NewWriter(&out)
	case l.format == lzmaFormatRaw:
		w, err = lzma.Writer2Config{Properties: &l.props, DictCap: l.encoderDict(len(b))}.NewWriter2(&out)
	default:
		w, err = xz.WriterConfig{Properties: &l.props, DictCap: l.encoderDict(len(b)), CheckSum: l.check, NoCheckSum: l.check == xz.None}.NewWriter(&out)
	}
	if err != nil {
		return nil, errs.Wrap(errs.Internal, err, "numcodecs.lzma")
	}
	if _, err := w.Write(b); err != nil {
		return nil, errs.Wrap(errs.Internal, err, "numcodecs.lzma")
	}
	if err := w.Close(); err != nil {
		return nil, errs.Wrap(errs.Internal, err, "numcodecs.lzma")
	}
	if l.format == lzmaFormatRaw && l.lzma1 {
		return out.Bytes()[lzma.HeaderLen:], nil
	}
	return out.Bytes(), nil
}

// lzmaOverhead bounds what the containers and incompressible data add.
func (lzmaCodec) MaxEncodedSize(n int64) int64 { return bound(n, n/16+4096) }

var xzMagic = []byte{0xfd, '7', 'z', 'X', 'Z', 0}

func (l lzmaCodec) Decode(b []byte, max int64) ([]byte, error) {
	if max < 0 {
		max = DefaultMaxChunkBytes
	}
	switch {
	case l.format == lzmaFormatRaw && l.lzma1:
		return decodeAlone(lzmaAloneHeader(l.props, l.rawDict), b, max)
	case l.format == lzmaFormatRaw:
		size, end, err := lzma2Walk(b)
		if err != nil {
			return nil, err
		}
		if end != len(b) {
			return nil, errs.New(errs.DataLoss, "numcodecs.lzma: %d bytes of garbage after the stream", len(b)-end)
		}
		if size > max {
			return nil, overBoundError("numcodecs.lzma", max)
		}
		return decodeLZMA2(b, size)
	case l.format == lzmaFormatXZ || bytes.HasPrefix(b, xzMagic):
		return decodeXZ(b, max)
	default:
		if len(b) < lzma.HeaderLen {
			return nil, errs.New(errs.DataLoss, "numcodecs.lzma: %d bytes, too short for an .lzma header", len(b))
		}
		return decodeAlone(b[:lzma.HeaderLen], b[lzma.HeaderLen:], max)
	}
}

// lzmaAloneHeader is the .lzma header of a raw LZMA1 stream (size unknown).
func lzmaAloneHeader(p lzma.Properties, dict int) []byte {
	h := make([]byte, lzma.HeaderLen)
	h[0] = byte((p.PB*5+p.LP)*9 + p.LC)
	binary.LittleEndian.PutUint32(h[1:], uint32(dict))
	binary.LittleEndian.PutUint64(h[5:], math64)
	return h
}

const math64 = ^uint64(0)

// decodeAlone decodes an .lzma stream (header, then data). The header's
// dictionary is lowered to the most the output may hold, and a known size
// is checked against the bound before anything is allocated.
func decodeAlone(header, data []byte, max int64) ([]byte, error) {
	h := bytes.Clone(header)
	if h[0] >= 9*5*5 {
		return nil, errs.New(errs.DataLoss, "numcodecs.lzma: invalid properties byte %#x", h[0])
	}
	size := binary.LittleEndian.Uint64(h[5:])
	if size != math64 && size > uint64(max) {
		return nil, errs.New(errs.DataLoss, "numcodecs.lzma: header claims %d bytes, more than the %d expected%w", size, max, errOverBound)
	}
	dict := int64(binary.LittleEndian.Uint32(h[1:]))
	binary.LittleEndian.PutUint32(h[1:], uint32(min(dict, int64(lzma.MinDictCap)+max)))
	in := bytes.NewReader(data)
	r, err := lzma.ReaderConfig{DictCap: int(min(int64(1)<<31-1, int64(lzma.MinDictCap)+max))}.NewReader(io.MultiReader(bytes.NewReader(h), in))
	if err != nil {
		return nil, errs.New(errs.DataLoss, "numcodecs.lzma: %v", err)
	}
	initial := int64(len(data)) * 4
	if size != math64 {
		initial = int64(size)
	}
	out, err := readLimited(r, max, initial, "numcodecs.lzma")
	if err != nil {
		return nil, err
	}
	if in.Len() > 0 {
		return nil, errs.New(errs.DataLoss, "numcodecs.lzma: %d bytes of garbage after the stream", in.Len())
	}
	return out, nil
}

// lzma2Walk follows the chunk headers of an LZMA2 stream to its end
// marker without decoding: the decoded size and where the stream ends.
func lzma2Walk(b []byte) (size int64, end int, err error) {
	p := 0
	for {
		if p >= len(b) {
			return 0, 0, errs.New(errs.DataLoss, "numcodecs.lzma: LZMA2 stream truncated")
		}
		c := b[p]
		switch {
		case c == 0:
			return size, p + 1, nil
		case c == 1 || c == 2:
			if p+3 > len(b) {
				return 0, 0, errs.New(errs.DataLoss, "numcodecs.lzma: LZMA2 chunk header truncated")
			}
			n := int(binary.BigEndian.Uint16(b[p+1:])) + 1
			size += int64(n)
			p += 3 + n
		case c >= 0x80:
			hl := 5
			if c>>5&3 >= 2 {
				hl = 6
			}
			if p+hl > len(b) {
				return 0, 0, errs.New(errs.DataLoss, "numcodecs.lzma: LZMA2 chunk header truncated")
			}
			size += int64(c&0x1f)<<16 + int64(binary.BigEndian.Uint16(b[p+1:])) + 1
			p += hl + int(binary.BigEndian.Uint16(b[p+3:])) + 1
		default:
			return 0, 0, errs.New(errs.DataLoss, "numcodecs.lzma: invalid LZMA2 control byte %#x", c)
		}
	}
}

// decodeLZMA2 decodes one LZMA2 stream that lzma2Walk found to hold size
// bytes, with a dictionary no larger than that.
func decodeLZMA2(b []byte, size int64) ([]byte, error) {
	r, err := lzma.Reader2Config{DictCap: int(max(size, lzma.MinDictCap))}.NewReader2(bytes.NewReader(b))
	if err != nil {
		return nil, errs.New(errs.DataLoss, "numcodecs.lzma: %v", err)
	}
	out := make([]byte, size)
	if _, err := io.ReadFull(r, out); err != nil {
		return nil, errs.New(errs.DataLoss, "numcodecs.lzma: corrupt LZMA2 data: %v", err)
	}
	var one [1]byte
	if n, err := r.Read(one[:]); n != 0 || err != io.EOF {
		return nil, errs.New(errs.DataLoss, "numcodecs.lzma: corrupt LZMA2 data: more than its chunk headers say")
	}
	return out, nil
}

// uvarint reads an xz multibyte integer (at most 9 bytes, minimal).
func uvarint(b []byte, p *int) (uint64, bool) {
	var v uint64
	for i := 0; i < 9; i++ {
		if *p >= len(b) {
			return 0, false
		}
		c := b[*p]
		*p++
		v |= uint64(c&0x7f) << (7 * i)
		if c&0x80 == 0 {
			return v, c != 0 || i == 0
		}
	}
	return 0, false
}

func xzCheckSize(check byte) int {
	switch {
	case check == 0:
		return 0
	case check <= 3:
		return 4
	case check <= 6:
		return 8
	case check <= 9:
		return 16
	case check <= 12:
		return 32
	}
	return 64
}

var crc64Table = crc64.MakeTable(crc64.ECMA)

func xzHash(check byte) hash.Hash {
	switch check {
	case 1:
		return crc32.NewIEEE()
	case 4:
		return crc64.New(crc64Table)
	case 10:
		return sha256.New()
	}
	return nil
}

type xzBlock struct {
	data     []byte // LZMA2 stream
	size     int64  // decoded size
	check    []byte
	unpadded int64
}

// decodeXZ decodes the xz streams of b (.xz file format 1.0.4): every
// structure is walked and checked first, then the blocks are decoded.
func decodeXZ(b []byte, max int64) ([]byte, error) {
	fail := func(format string, a ...any) ([]byte, error) {
		return nil, errs.New(errs.DataLoss, "numcodecs.lzma: xz: "+format, a...)
	}
	type stream struct {
		check  byte
		blocks []xzBlock
	}
	var streams []stream
	var total int64
	p := 0
	for p < len(b) {
		if len(streams) > 0 && b[p] == 0 { // stream padding
			if p+4 > len(b) || !bytes.Equal(b[p:p+4], []byte{0, 0, 0, 0}) {
				return fail("bad stream padding")
			}
			p += 4
			continue
		}
		if p+12 > len(b) || !bytes.Equal(b[p:p+6], xzMagic) {
			return fail("no stream header at byte %d", p)
		}
		flags := b[p+6 : p+8]
		if crc32.ChecksumIEEE(flags) != binary.LittleEndian.Uint32(b[p+8:]) || flags[0] != 0 || flags[1]&0xf0 != 0 {
			return fail("corrupt stream header")
		}
		s := stream{check: flags[1]}
		if xzHash(s.check) == nil && s.check != 0 {
			return fail("unsupported check type %d", s.check)
		}
		p += 12
		for {
			if p >= len(b) {
				return fail("truncated")
			}
			if b[p] == 0 { // the index
				break
			}
			hs := (int(b[p]) + 1) * 4
			if p+hs > len(b) {
				return fail("block header truncated")
			}
			h := b[p : p+hs]
			if crc32.ChecksumIEEE(h[:hs-4]) != binary.LittleEndian.Uint32(h[hs-4:]) {
				return fail("corrupt block header")
			}
			bf := h[1]
			if bf&0x3c != 0 || bf&3 != 0 {
				return fail("block uses %d filters or reserved flags (only LZMA2 alone is supported)", bf&3+1)
			}
			q := 2
			compressed, uncompressed := int64(-1), int64(-1)
			if bf&0x40 != 0 {
				v, ok := uvarint(h[:hs-4], &q)
				if !ok || v == 0 || v > uint64(len(b)) {
					return fail("bad compressed size in block header")
				}
				compressed = int64(v)
			}
			if bf&0x80 != 0 {
				v, ok := uvarint(h[:hs-4], &q)
				if !ok || v > 1<<62 {
					return fail("bad uncompressed size in block header")
				}
				uncompressed = int64(v)
			}
			id, ok1 := uvarint(h[:hs-4], &q)
			psize, ok2 := uvarint(h[:hs-4], &q)
			if !ok1 || !ok2 || id != filterLZMA2 || psize != 1 || q+1 > hs-4 {
				return fail("block filter is not LZMA2 (only LZMA2 alone is supported)")
			}
			if h[q] > 40 {
				return fail("bad LZMA2 dictionary size")
			}
			q++
			for _, z := range h[q : hs-4] {
				if z != 0 {
					return fail("non-zero block header padding")
				}
			}
			p += hs
			size, n, err := lzma2Walk(b[p:])
			if err != nil {
				return nil, err
			}
			if compressed >= 0 && int64(n) != compressed || uncompressed >= 0 && size != uncompressed {
				return fail("block sizes differ from its header")
			}
			blk := xzBlock{data: b[p : p+n], size: size, unpadded: int64(hs + n + xzCheckSize(s.check))}
			p += n
			for ; p%4 != 0 && p < len(b); p++ { // streams start at multiples of 4
				if b[p] != 0 {
					return fail("non-zero block padding")
				}
			}
			cs := xzCheckSize(s.check)
			if p+cs > len(b) {
				return fail("block check truncated")
			}
			blk.check = b[p : p+cs]
			p += cs
			if total += size; total > max {
				return nil, overBoundError("numcodecs.lzma", max)
			}
			s.blocks = append(s.blocks, blk)
		}
		// The index: its records must describe the blocks.
		start := p
		p++
		n, ok := uvarint(b, &p)
		if !ok || n != uint64(len(s.blocks)) {
			return fail("index does not list the %d blocks", len(s.blocks))
		}
		for _, blk := range s.blocks {
			u, ok1 := uvarint(b, &p)
			d, ok2 := uvarint(b, &p)
			if !ok1 || !ok2 || int64(u) != blk.unpadded || int64(d) != blk.size {
				return fail("index does not match the blocks")
			}
		}
		for ; (p-start)%4 != 0; p++ {
			if p >= len(b) || b[p] != 0 {
				return fail("bad index padding")
			}
		}
		if p+4+12 > len(b) || crc32.ChecksumIEEE(b[start:p]) != binary.LittleEndian.Uint32(b[p:]) {
			return fail("corrupt or truncated index")
		}
		p += 4
		f := b[p : p+12]
		if crc32.ChecksumIEEE(f[4:10]) != binary.LittleEndian.Uint32(f) ||
			int64(binary.LittleEndian.Uint32(f[4:]))+1 != int64(p-start)/4 ||
			!bytes.Equal(f[8:10], flags) || f[10] != 'Y' || f[11] != 'Z' {
			return fail("corrupt stream footer")
		}
		p += 12
		streams = append(streams, s)
	}
	if len(streams) == 0 {
		return fail("empty input")
	}
	out := make([]byte, 0, total)
	for _, s := range streams {
		for _, blk := range s.blocks {
			dec, err := decodeLZMA2(blk.data, blk.size)
			if err != nil {
				return nil, err
			}
			if h := xzHash(s.check); h != nil {
				h.Write(dec)
				sum := h.Sum(nil)
				if s.check != 10 { // CRCs are stored little-endian
					for i, j := 0, len(sum)-1; i < j; i, j = i+1, j-1 {
						sum[i], sum[j] = sum[j], sum[i]
					}
				}
				if !bytes.Equal(sum, blk.check) {
					return fail("block check mismatch: the chunk is corrupt")
				}
			}
			out = append(out, dec...)
		}
	}
	return out, nil
}
