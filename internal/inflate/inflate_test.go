package inflate

import (
	"bytes"
	stdflate "compress/flate"
	stdgzip "compress/gzip"
	stdzlib "compress/zlib"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zlib"

	"github.com/zarrgate/zarrgate/internal/testenv"
)

// decode is Gzip or Zlib into a buffer of capacity bytes, as codecsvc
// calls them: fits is false when the output does not fit; a zlib stream
// with bytes after it is refused.
func decode(container string, b []byte, capacity int) ([]byte, bool, error) {
	out := make([]byte, capacity)
	var n int
	var err error
	if container == "gzip" {
		n, err = Gzip(b, out)
	} else {
		var used int
		if n, used, err = Zlib(b, out); err == nil && used < len(b) {
			err = errors.New("garbage after the stream")
		}
	}
	if errors.Is(err, ErrShort) {
		return nil, false, nil
	}
	if err != nil {
		return nil, true, err
	}
	return out[:n], true, nil
}

// inflateSamples are inputs that exercise the decoder's paths: literals
// only (random bytes: dynamic codes with long literal codes), matches at
// every short distance (overlapping copies of 1 to 7 bytes), long runs
// (distance 1, length 258), float data as in the benchmarks, and the
// empty and one-byte inputs (fixed-code blocks).
func inflateSamples() map[string][]byte {
	r := rand.New(rand.NewPCG(7, 7))
	random := make([]byte, 64<<10)
	for i := range random {
		random[i] = byte(r.Uint32())
	}
	short := make([]byte, 0, 100_000)
	for len(short) < 50_000 {
		d := 1 + r.IntN(9)
		pat := make([]byte, d)
		for i := range pat {
			pat[i] = byte(r.Uint32())
		}
		for range 1 + r.IntN(40) {
			short = append(short, pat...)
		}
	}
	floats := make([]byte, 4*50_000)
	for i := range 50_000 {
		binary.LittleEndian.PutUint32(floats[4*i:], math.Float32bits(float32(math.Sin(float64(i)/100))))
	}
	skewed := make([]byte, 100_000) // a few symbols very often, the rest rarely: codes of up to 15 bits
	for i := range skewed {
		v := r.ExpFloat64() * 3
		skewed[i] = byte(min(v, 255))
	}
	return map[string][]byte{
		"empty":  {},
		"one":    {42},
		"text":   bytes.Repeat([]byte("the quick brown fox jumps over the lazy dog. "), 3000),
		"zeros":  make([]byte, 256<<10),
		"random": random,
		"short":  short,
		"floats": floats,
		"skewed": skewed,
	}
}

// TestInflate decodes what Go's and klauspost's encoders write,
// at every level (stored blocks at 0, fixed codes for small inputs,
// dynamic codes, the Huffman-only and run-length strategies), in both
// containers and as several gzip members.
func TestInflate(t *testing.T) {
	for name, data := range inflateSamples() {
		var streams []struct {
			what      string
			container string
			enc       []byte
		}
		add := func(what, container string, enc []byte) {
			streams = append(streams, struct {
				what      string
				container string
				enc       []byte
			}{what, container, enc})
		}
		for level := -2; level <= 9; level++ {
			var kg, sg, kz, sz bytes.Buffer
			w1, _ := gzip.NewWriterLevel(&kg, level)
			w2, _ := stdgzip.NewWriterLevel(&sg, level)
			w3, _ := zlib.NewWriterLevel(&kz, level)
			w4, _ := stdzlib.NewWriterLevel(&sz, level)
			for _, w := range []io.WriteCloser{w1, w2, w3, w4} {
				w.Write(data)
				w.Close()
			}
			add(fmt.Sprintf("klauspost gzip, level %d", level), "gzip", kg.Bytes())
			add(fmt.Sprintf("go gzip, level %d", level), "gzip", sg.Bytes())
			add(fmt.Sprintf("klauspost zlib, level %d", level), "zlib", kz.Bytes())
			add(fmt.Sprintf("go zlib, level %d", level), "zlib", sz.Bytes())
		}
		// Three members, the middle one with every optional header field.
		var m bytes.Buffer
		w, _ := stdgzip.NewWriterLevel(&m, 6)
		w.Write(data[:len(data)/3])
		w.Close()
		w.Reset(&m)
		w.Header.Name, w.Header.Comment, w.Header.Extra = "a name", "a comment", []byte("extra")
		w.Write(data[len(data)/3 : len(data)/2])
		w.Close()
		w.Reset(&m)
		w.Write(data[len(data)/2:])
		w.Close()
		add("three members", "gzip", m.Bytes())
		add("header checksum", "gzip", withHeaderCRC(t, data))
		for _, s := range streams {
			out, fits, err := decode(s.container, s.enc, len(data))
			if err != nil || !fits || !bytes.Equal(out, data) {
				t.Fatalf("%s, %s (%s): fits %v, err %v, equal %v", name, s.what, s.container, fits, err, bytes.Equal(out, data))
			}
			if len(data) > 0 {
				if _, fits, err := decode(s.container, s.enc, len(data)-1); fits || err != nil {
					t.Fatalf("%s, %s: one byte short of room: fits %v, err %v; want not fits", name, s.what, fits, err)
				}
			}
		}
	}
}

// TestInflateZlibsStreams decodes what zlib itself writes (Python's zlib
// and gzip modules): every level, each strategy (filtered, Huffman only,
// run-length, fixed codes), small windows and memory levels, as numcodecs'
// GZip and Zlib write chunks.
func TestInflateZlibsStreams(t *testing.T) {
	py := testenv.Python(t)
	dir := t.TempDir()
	samples := inflateSamples()
	for name, data := range samples {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const script = `
import gzip, os, sys, zlib
d = sys.argv[1]
for name in sorted(os.listdir(d)):
    data = open(os.path.join(d, name), "rb").read()
    out = []
    for level in range(10):
        out.append(("gzip-%d" % level, "gzip", gzip.compress(data, level, mtime=0)))
        out.append(("zlib-%d" % level, "zlib", zlib.compress(data, level)))
    for strategy in ("Z_FILTERED", "Z_HUFFMAN_ONLY", "Z_RLE", "Z_FIXED"):
        for wbits, mem in ((15, 8), (9, 1), (31, 9)):
            c = zlib.compressobj(6, zlib.DEFLATED, wbits, mem, getattr(zlib, strategy))
            out.append(("%s-%d-%d" % (strategy, wbits, mem), "gzip" if wbits > 15 else "zlib", c.compress(data) + c.flush()))
    c = zlib.compressobj(6)
    parts = [c.compress(data[i:i + 5000]) + c.flush(zlib.Z_FULL_FLUSH) for i in range(0, len(data), 5000)]
    out.append(("full-flushes", "zlib", b"".join(parts) + c.flush()))
    for what, container, enc in out:
        open(os.path.join(d, "%s.%s.%s" % (name, what, container)), "wb").write(enc)
`
	if out, err := exec.Command(py, "-c", script, dir).CombinedOutput(); err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	n := 0
	for name, data := range samples {
		files, _ := filepath.Glob(filepath.Join(dir, name+".*"))
		for _, f := range files {
			enc, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			got, fits, err := decode(filepath.Ext(f)[1:], enc, len(data))
			if err != nil || !fits || !bytes.Equal(got, data) {
				t.Fatalf("%s: fits %v, %v, equal %v", filepath.Base(f), fits, err, bytes.Equal(got, data))
			}
			n++
		}
	}
	if n != len(samples)*33 {
		t.Fatalf("decoded %d of zlib's streams, want %d", n, len(samples)*33)
	}
}

// withHeaderCRC is a gzip member of data with FHCRC, FEXTRA, FNAME and
// FCOMMENT (Go's writer sets no FHCRC).
func withHeaderCRC(t *testing.T, data []byte) []byte {
	t.Helper()
	var raw bytes.Buffer
	fw, _ := stdflate.NewWriter(&raw, 5)
	fw.Write(data)
	fw.Close()
	h := []byte{0x1f, 0x8b, 8, 2 | 4 | 8 | 16, 0, 0, 0, 0, 0, 255, 3, 0, 'a', 'b', 'c', 'n', 'm', 0, 'c', 0}
	h = binary.LittleEndian.AppendUint16(h, uint16(crc32.ChecksumIEEE(h)))
	h = append(h, raw.Bytes()...)
	h = binary.LittleEndian.AppendUint32(h, crc32.ChecksumIEEE(data))
	return binary.LittleEndian.AppendUint32(h, uint32(len(data)))
}

// TestInflateRefuses: damaged streams are refused (never a panic), and
// each check the decoder makes has a case that fails without it.
func TestInflateRefuses(t *testing.T) {
	data := inflateSamples()["floats"]
	var g, z bytes.Buffer
	w, _ := gzip.NewWriterLevel(&g, 6)
	w.Write(data)
	w.Close()
	zw, _ := zlib.NewWriterLevel(&z, 6)
	zw.Write(data)
	zw.Close()
	gz, zl := g.Bytes(), z.Bytes()
	set := func(b []byte, i int, v byte) []byte { b = bytes.Clone(b); b[i] = v; return b }
	// Raw DEFLATE streams of one final block, written bit by bit.
	stored := func(n, nn uint16, payload int) []byte {
		b := []byte{1}
		b = binary.LittleEndian.AppendUint16(b, n)
		b = binary.LittleEndian.AppendUint16(b, nn)
		return append(b, make([]byte, payload)...)
	}
	cases := map[string]struct {
		container string
		enc       []byte
	}{
		// A dynamic block whose literal/length code has no end of block.
		"no end of block": {"raw", dynBlock(append(lensOf(256, 8), 0), []uint8{1}, func(w *bitWriter, lit, _ []uint16) {
			for range 40 {
				w.code(int(lit['x']), 8)
			}
		})},
		// The same block with the distance code's missing second code.
		"degenerate distance code, other bit": {"raw", degenerate(1)},
		"gzip magic":                          {"gzip", set(gz, 0, 0x1e)},
		"gzip method":                         {"gzip", set(gz, 2, 7)},
		"gzip reserved flag":                  {"gzip", set(gz, 3, 0x20)},
		"gzip crc":                            {"gzip", set(gz, len(gz)-8, gz[len(gz)-8]^1)},
		"gzip size":                           {"gzip", set(gz, len(gz)-4, gz[len(gz)-4]^1)},
		"gzip garbage after":                  {"gzip", append(bytes.Clone(gz), "junk"...)},
		"gzip no trailer":                     {"gzip", gz[:len(gz)-8]},
		"gzip header only":                    {"gzip", gz[:10]},
		"gzip nothing":                        {"gzip", nil},
		"gzip header crc":                     {"gzip", func() []byte { b := withHeaderCRC(t, data); return set(b, 20, b[20]^1) }()},
		"zlib header check":                   {"zlib", set(zl, 1, zl[1]^1)},
		"zlib method":                         {"zlib", append([]byte{0x77, 0x01}, zl[2:]...)},
		"zlib dictionary":                     {"zlib", append([]byte{0x78, 0xbb}, zl[2:]...)},
		"zlib adler":                          {"zlib", set(zl, len(zl)-1, zl[len(zl)-1]^1)},
		"zlib garbage after":                  {"zlib", append(bytes.Clone(zl), 0)},
		"zlib truncated":                      {"zlib", zl[:len(zl)/2]},
		"block type 3":                        {"raw", []byte{7, 0, 0, 0}},
		"stored length":                       {"raw", stored(5, 5, 5)},
		"stored short":                        {"raw", stored(5, ^uint16(5), 4)},
		"too many lengths":                    {"raw", []byte{0x05 | 30<<3, 0, 0, 0, 0, 0, 0, 0}}, // dynamic, HLIT 287
		"too many distances":                  {"raw", []byte{0x05, 0x1f << 0, 0, 0, 0, 0, 0, 0}}, // dynamic, HDIST 32
		"distance too far":                    {"raw", farDistance()},
		"fixed code literal 286":              {"raw", fixedSymbols(286)},
		"fixed code distance 30":              {"raw", fixedMatch(30)},
		"no code length codes":                {"raw", []byte{0x05, 0xe0, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
		"incomplete code":                     {"raw", incompleteCode()},
		"empty":                               {"raw", nil},
		"no final block":                      {"raw", []byte{0x00, 0x00, 0x00, 0xff, 0xff}},
	}
	for name, c := range cases {
		var err error
		var fits bool
		if c.container == "raw" {
			f := new(inflater)
			fixedOnce.Do(fixedTables)
			out := make([]byte, 1<<16)
			_, _, err = f.inflate(c.enc, out, 0)
			fits = !errors.Is(err, ErrShort)
			want := ErrCorrupt
			if name == "stored short" || name == "empty" || name == "no final block" {
				want = ErrTruncated
			}
			if !errors.Is(err, want) {
				t.Errorf("%s: %v, want %v", name, err, want)
			}
		} else {
			_, fits, err = decode(c.container, c.enc, len(data))
		}
		if err == nil || !fits {
			t.Errorf("%s: fits %v, err %v; want an error", name, fits, err)
		}
	}
	// Truncations of a valid stream (of 16 KiB of the floats: at every
	// length in its first and last 400 bytes, every 61st between), and
	// three kinds of one-byte damage to each of the first 300 bytes (the
	// header and the code lengths): an error or, where the damage leaves
	// a valid stream, what klauspost decodes.
	small := data[:16<<10]
	var sg, sz bytes.Buffer
	w.Reset(&sg)
	w.Write(small)
	w.Close()
	zw.Reset(&sz)
	zw.Write(small)
	zw.Close()
	for i := range sz.Len() {
		if i < 400 || i > sz.Len()-400 || i%61 == 0 {
			if _, _, err := decode("zlib", sz.Bytes()[:i], len(small)); err == nil {
				t.Fatalf("zlib cut at %d of %d decodes", i, sz.Len())
			}
		}
	}
	for i := range min(300, sg.Len()) {
		for _, x := range []byte{1, 0x80, 0xff} {
			checkInflateAgainst(t, "gzip", set(sg.Bytes(), i, sg.Bytes()[i]^x), len(small))
		}
	}
}

// TestInflateDegenerateCode decodes a block whose distance code is one
// code of one bit, which zlib writes and accepts (and so klauspost).
func TestInflateDegenerateCode(t *testing.T) {
	out := make([]byte, 16)
	fixedOnce.Do(fixedTables)
	n, used, err := new(inflater).inflate(degenerate(0), out, 0)
	if err != nil || string(out[:n]) != "aaaa" || used != len(degenerate(0)) {
		t.Fatalf("%q, used %d, %v; want aaaa", out[:n], used, err)
	}
}

// TestInflateTruncatedIntoFullBuffer: a stream cut short, whose missing
// end (read as zeros) would decode to more than the buffer holds, is
// truncated, not too large.
func TestInflateTruncatedIntoFullBuffer(t *testing.T) {
	// Zero bits decode to a match of 258 at distance 1: symbol 285 has
	// the 1-bit code 0, the distance code one 1-bit code.
	lit := append(lensOf(255, 9), 0, 10, 10)
	lit = append(lit, lensOf(285-len(lit), 0)...)
	lit = append(lit, 1)
	n := 0
	enc := dynBlock(lit, []uint8{1}, func(w *bitWriter, lc, _ []uint16) {
		for n == 0 || w.nbits != 0 { // literals up to a byte's end: the zeros after it are past the input
			w.code(int(lc['a']), 9)
			n++
		}
	})
	fixedOnce.Do(fixedTables)
	if _, _, err := new(inflater).inflate(enc, make([]byte, n+10), 0); !errors.Is(err, ErrTruncated) {
		t.Fatalf("%v, want %v", err, ErrTruncated)
	}
	// Literals up to where the last byte has 2 to 7 bits of zero
	// padding: the match comes from the stream's own bits, and does not
	// fit.
	k := 0
	padded := dynBlock(lit, []uint8{1}, func(w *bitWriter, lc, _ []uint16) {
		for k == 0 || w.nbits == 0 || w.nbits == 7 {
			w.code(int(lc['a']), 9)
			k++
		}
	})
	if _, _, err := new(inflater).inflate(padded, make([]byte, k+10), 0); !errors.Is(err, ErrShort) {
		t.Fatalf("padded: %v, want %v", err, ErrShort)
	}
}

// TestBuildTable: complete codes and zlib's one code of one bit build;
// over-subscribed and other incomplete codes do not.
func TestBuildTable(t *testing.T) {
	for _, c := range []struct {
		lengths []uint8
		ok      bool
	}{
		{nil, true}, {[]uint8{0, 0}, true}, {[]uint8{1}, true}, {[]uint8{0, 1}, true},
		{[]uint8{1, 1}, true}, {[]uint8{2, 2, 2, 2}, true}, {[]uint8{1, 2, 3, 3}, true},
		{lensOf(256, 8), true}, {lensOf(2, 15), false}, {[]uint8{2}, false},
		{[]uint8{1, 2}, false}, {[]uint8{1, 2, 3}, false}, {[]uint8{1, 1, 1}, false},
		{[]uint8{2, 2, 2, 2, 2}, false}, {[]uint8{1, 1, 2}, false},
	} {
		var table [litTable]uint32
		codes := make([]uint16, len(c.lengths))
		if ok := buildTable(table[:], c.lengths, litRoot, litEntry, codes); ok != c.ok {
			t.Errorf("lengths %v: %v, want %v", c.lengths, ok, c.ok)
		}
	}
	// A complete code down to 15 bits: 254/256 + 3/512 + 1/1024 + … +
	// 2/32768. Every symbol decodes through the first table or its link.
	lengths := append(lensOf(254, 8), 9, 9, 9, 10, 11, 12, 13, 14, 15, 15)
	lengths = append(lengths, lensOf(286-len(lengths), 0)...)
	var table [litTable]uint32
	codes := make([]uint16, len(lengths))
	if !buildTable(table[:], lengths, litRoot, litEntry, codes) {
		t.Fatal("the long code does not build")
	}
	for s, l := range lengths {
		if l == 0 {
			continue
		}
		bitbuf := uint64(codes[s])
		e := table[bitbuf&(1<<litRoot-1)]
		if e&kindMask == kindLink {
			e = table[(e>>16+uint32(bitbuf>>litRoot)&(1<<(e&0xff)-1))&(litTable-1)]
		}
		if e&0xff != uint32(l) || e&^0xff != litEntry(s) {
			t.Fatalf("symbol %d (%d bits): entry %#x, want %#x", s, l, e, litEntry(s)|uint32(l))
		}
	}
}

// lensOf is n code lengths of l.
func lensOf(n int, l uint8) []uint8 {
	b := make([]uint8, n)
	for i := range b {
		b[i] = l
	}
	return b
}

// degenerate is a dynamic block of "a" then a match of length 3 at
// distance 1 through a distance code of one 1-bit code, sent as bit
// (0 the code, 1 the missing one).
func degenerate(bit int) []byte {
	lit := append(lensOf(255, 8), 0, 9, 9) // 0–254 8 bits, 256 and 257 9 bits
	return dynBlock(lit, []uint8{1}, func(w *bitWriter, lc, _ []uint16) {
		w.code(int(lc['a']), 8)
		w.code(int(lc[257]), 9)
		w.bits(uint64(bit), 1)
		w.code(int(lc[256]), 9)
	})
}

// dynBlock is a final dynamic block of the literal/length and distance
// code lengths given (sent with a code length code of sixteen 4-bit codes
// for 0–15), then what body writes with their canonical codes.
func dynBlock(lit, dist []uint8, body func(w *bitWriter, lit, dist []uint16)) []byte {
	var w bitWriter
	w.bits(1, 1)
	w.bits(2, 2)
	w.bits(uint64(len(lit)-257), 5)
	w.bits(uint64(len(dist)-1), 5)
	w.bits(19-4, 4)
	for _, s := range clenOrder {
		if s < 16 {
			w.bits(4, 3)
		} else {
			w.bits(0, 3)
		}
	}
	for _, l := range append(append([]uint8{}, lit...), dist...) {
		w.code(int(l), 4) // the code of symbol s is s
	}
	body(&w, canonical(lit), canonical(dist))
	return w.done()
}

// canonical is DEFLATE's canonical code of each length (RFC 1951 3.2.2).
func canonical(lengths []uint8) []uint16 {
	var count, next [17]int
	for _, l := range lengths {
		if l > 0 {
			count[l]++
		}
	}
	code := 0
	for l := 1; l <= 16; l++ {
		code = (code + count[l-1]) << 1
		next[l] = code
	}
	codes := make([]uint16, len(lengths))
	for s, l := range lengths {
		if l > 0 {
			codes[s] = uint16(next[l])
			next[l]++
		}
	}
	return codes
}

// incompleteCode is a dynamic block whose code length code is one code
// of two bits.
func incompleteCode() []byte {
	var w bitWriter
	w.bits(1, 1)
	w.bits(2, 2)
	w.bits(0, 5+5+4)
	w.bits(2, 3)
	w.bits(0, 3*3+8)
	return w.done()
}

// farDistance is a fixed-code block of one literal then a match of
// distance 2: one byte further back than the stream's start.
func farDistance() []byte {
	var w bitWriter
	w.bits(1, 1)
	w.bits(1, 2) // fixed
	w.code(0x30+'a', 8)
	w.code(257-256, 7) // length 3
	w.code(1, 5)       // distance 2
	w.code(0, 7)       // end of block
	return w.done()
}

// fixedSymbols is a fixed-code block of one literal/length symbol (280–287
// have 8-bit codes from 0xc0).
func fixedSymbols(sym int) []byte {
	var w bitWriter
	w.bits(1, 1)
	w.bits(1, 2)
	w.code(0xc0+sym-280, 8)
	w.code(0, 7)
	return w.done()
}

// fixedMatch is a fixed-code block of two literals then a match of
// length 3 at distance code dcode.
func fixedMatch(dcode int) []byte {
	var w bitWriter
	w.bits(1, 1)
	w.bits(1, 2)
	w.code(0x30+'a', 8)
	w.code(0x30+'b', 8)
	w.code(1, 7)
	w.code(dcode, 5)
	w.code(0, 7)
	return w.done()
}

// bitWriter writes DEFLATE's bits: fields from their low bit, Huffman
// codes from their high bit.
type bitWriter struct {
	b     []byte
	n     uint
	acc   uint64
	nbits uint
}

func (w *bitWriter) bits(v uint64, n uint) {
	w.acc |= v << w.nbits
	w.nbits += n
	for w.nbits >= 8 {
		w.b = append(w.b, byte(w.acc))
		w.acc >>= 8
		w.nbits -= 8
	}
}

func (w *bitWriter) code(c int, n uint) {
	for i := int(n) - 1; i >= 0; i-- {
		w.bits(uint64(c>>i&1), 1)
	}
}

func (w *bitWriter) done() []byte {
	if w.nbits > 0 {
		w.b = append(w.b, byte(w.acc))
	}
	return w.b
}

// checkInflateAgainst decodes enc with decode and with klauspost's
// reader (capacity bytes at most): both must refuse it or both decode it
// to the same bytes. Two differences are klauspost's own: it refuses a
// gzip name or comment of 512 bytes or more, which zlib and libdeflate
// read, and it accepts a literal/length code without the end-of-block
// symbol where no block can end (so such a stream fails later anyway).
func checkInflateAgainst(t *testing.T, container string, enc []byte, capacity int) {
	t.Helper()
	var want []byte
	var werr error
	var r io.Reader
	if container == "gzip" {
		r, werr = gzip.NewReader(bytes.NewReader(enc))
	} else {
		r, werr = zlib.NewReader(bytes.NewReader(enc))
	}
	in := bytes.NewReader(enc)
	if werr == nil {
		if container == "gzip" {
			r, _ = gzip.NewReader(in)
		} else {
			r, _ = zlib.NewReader(in)
		}
		want, werr = io.ReadAll(io.LimitReader(r, int64(capacity)+1))
		if werr == nil && in.Len() > 0 && container == "zlib" {
			werr = errors.New("garbage after")
		}
	}
	got, fits, err := decode(container, enc, capacity)
	switch {
	case werr == nil && len(want) > capacity:
		if fits && err == nil {
			t.Fatalf("%x: klauspost decodes more than %d bytes, decode %d", enc, capacity, len(got))
		}
	case werr == nil:
		if err != nil || !fits || !bytes.Equal(got, want) {
			t.Fatalf("%x: klauspost decodes %d bytes, decode: fits %v, %v, equal %v", enc, len(want), fits, err, bytes.Equal(got, want))
		}
	case err == nil && fits:
		if !(container == "gzip" && errors.Is(werr, gzip.ErrHeader) && longGzipString(enc)) {
			t.Fatalf("%x: klauspost refuses it (%v), decode decodes %d bytes", enc, werr, len(got))
		}
	}
}

// longGzipString reports whether a gzip member header at the start of b
// has a name or comment of 512 bytes or more.
func longGzipString(b []byte) bool {
	if len(b) < 10 {
		return false
	}
	h := 10
	if b[3]&4 != 0 && len(b) >= 12 {
		h += 2 + int(binary.LittleEndian.Uint16(b[10:]))
	}
	for _, flag := range []byte{8, 16} {
		if b[3]&flag == 0 || h >= len(b) {
			continue
		}
		end := bytes.IndexByte(b[h:], 0)
		if end < 0 || end >= 511 {
			return true
		}
		h += end + 1
	}
	return false
}

// FuzzInflate checks decode against klauspost/compress's gzip and
// zlib readers on any input: the same bytes or both refusing.
func FuzzInflate(f *testing.F) {
	for _, data := range inflateSamples() {
		data = data[:min(len(data), 3000)]
		for _, level := range []int{0, 1, 6, 9, -2} {
			var g, z bytes.Buffer
			w, _ := gzip.NewWriterLevel(&g, level)
			w.Write(data)
			w.Close()
			zw, _ := zlib.NewWriterLevel(&z, level)
			zw.Write(data)
			zw.Close()
			f.Add(g.Bytes(), false)
			f.Add(z.Bytes(), true)
		}
	}
	f.Fuzz(func(t *testing.T, enc []byte, isZlib bool) {
		container := "gzip"
		if isZlib {
			container = "zlib"
		}
		checkInflateAgainst(t, container, enc, 1<<16)
	})
}

// BenchmarkInflate compares decode with klauspost's reader on the
// float sample (gzip level 6).
//
//	go test -run '^$' -bench Inflate -cpu 1 ./codecsvc/
func BenchmarkInflate(b *testing.B) {
	data := inflateSamples()["floats"]
	var g bytes.Buffer
	w, _ := gzip.NewWriterLevel(&g, 6)
	w.Write(data)
	w.Close()
	enc := g.Bytes()
	b.Run("go", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			out, _, err := decode("gzip", enc, len(data))
			if err != nil {
				b.Fatal(err)
			}
			_ = out
		}
	})
	b.Run("klauspost", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		out := make([]byte, len(data))
		for b.Loop() {
			r, err := gzip.NewReader(bytes.NewReader(enc))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(r, out); err != nil {
				b.Fatal(err)
			}
		}
	})
}
