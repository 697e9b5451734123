package codecsvc

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/zarr"
)

// prefixSpec is a 256 × 256 chunk of float32 stored as bytes + zstd
// (256 KiB: two zstd blocks), the chunk of the random-read benchmarks.
func prefixSpec(codecs string) *codec.BatchSpec {
	var cs []zarr.CodecSpec
	if err := json.Unmarshal([]byte(codecs), &cs); err != nil {
		panic(err)
	}
	return &codec.BatchSpec{Codecs: cs, Shape: []int64{256, 256}, DataType: zarr.MustDataType("float32"), FillValue: make([]byte, 4)}
}

const prefixCodecs = `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":3}}]`

// smoothChunk is a 256 × 256 chunk of float32 that compresses as real
// data does (a smooth field with noise), so that zstd writes compressed
// blocks.
func smoothChunk(seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, 256*256*4)
	for i := range 256 {
		for j := range 256 {
			v := float32(math.Sin(float64(i)*0.01)*1000 + math.Cos(float64(j)*0.02)*100 + float64(r.IntN(17)))
			binary.LittleEndian.PutUint32(b[(i*256+j)*4:], math.Float32bits(v))
		}
	}
	return b
}

// packed is what a selection of the whole chunk holds: the reference.
func packed(chunk []byte, s codec.Selection) []byte {
	n, err := codec.CheckSelection(s, []int64{256, 256}, 4)
	if err != nil {
		panic(err)
	}
	out := make([]byte, n)
	codec.Pack(out, chunk, []int64{256, 256}, 4, s)
	return out
}

func box(r0, nr, c0, nc int64) codec.Selection {
	return codec.Selection{Start: []int64{r0, c0}, Step: []int64{1, 1}, Count: []int64{nr, nc}}
}

// TestDecodeSelectedPrefix: Local.DecodeSelected of a bytes + zstd chunk
// gives the selected elements of the whole chunk, whatever the selection
// (top rows, which decode from the first block alone, bottom rows, a box
// across the blocks' boundary, strided, single elements at the corners,
// the whole chunk), in a batch with whole chunks; and a selection of the
// top half decodes the first block only.
func TestDecodeSelectedPrefix(t *testing.T) {
	spec := prefixSpec(prefixCodecs)
	l := NewLocal()
	c, err := l.Chain(spec)
	if err != nil {
		t.Fatal(err)
	}
	if !c.prefix {
		t.Fatal("bytes + zstd: the chain should decode selections from a prefix")
	}
	chunks := [][]byte{smoothChunk(1), smoothChunk(2)}
	var encoded [][]byte
	for _, ch := range chunks {
		e, err := c.Encode(Chunk{Data: ch})
		if err != nil {
			t.Fatal(err)
		}
		encoded = append(encoded, bytes.Clone(e))
	}
	// The first block alone: a cut frame decodes to its 128 KiB.
	if data, ok := zstdPrefix(encoded[0], 64*1024, 256*1024); !ok || len(data) != 128*1024 || !bytes.Equal(data, chunks[0][:len(data)]) {
		t.Fatalf("the top quarter of the chunk: decoded %d bytes (ok %v), want the first block's 128 KiB, equal to the chunk's", len(data), ok)
	}
	sels := []codec.Selection{
		box(0, 64, 0, 64), box(3, 61, 100, 64), box(64, 64, 192, 64), box(127, 1, 0, 256), box(128, 1, 0, 256),
		box(100, 64, 30, 64), box(192, 64, 0, 64), box(0, 256, 0, 256), box(0, 1, 0, 1), box(255, 1, 255, 1), box(0, 1, 255, 1),
		{Start: []int64{1, 2}, Step: []int64{3, 5}, Count: []int64{40, 20}},
		{},
	}
	r := rand.New(rand.NewPCG(7, 8))
	for range 200 {
		y, x := r.Int64N(256), r.Int64N(256)
		sels = append(sels, codec.Selection{Start: []int64{y, x}, Step: []int64{1 + r.Int64N(3), 1 + r.Int64N(3)},
			Count: []int64{1 + r.Int64N((255-y)/3+1), 1 + r.Int64N((255-x)/3+1)}})
	}
	for _, s := range sels {
		out, err := l.DecodeSelected(context.Background(), spec, encoded, []codec.Selection{s, {}})
		if err != nil {
			t.Fatalf("selection %v: %v", s, err)
		}
		want := chunks[0]
		if !s.Whole() {
			want = packed(chunks[0], s)
		}
		if !bytes.Equal(out[0].Data, want) {
			t.Fatalf("selection %v: the decoded elements differ from the chunk's", s)
		}
		if !bytes.Equal(out[1].Data, chunks[1]) {
			t.Fatalf("selection %v: the whole chunk beside it differs", s)
		}
		out[0].Release()
		out[1].Release()
	}
}

// streamFrame encodes data with klauspost's stream encoder, flushing
// (ending a block) after each of cuts' offsets: compressed blocks smaller
// than their 128 KiB maximum, with the content size in the header.
func streamFrame(t *testing.T, data []byte, cuts ...int) []byte {
	var buf bytes.Buffer
	w, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderCRC(false))
	if err != nil {
		t.Fatal(err)
	}
	w.ResetContentSize(&buf, int64(len(data)))
	at := 0
	for _, c := range append(cuts, len(data)) {
		if _, err := w.Write(data[at:c]); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		at = c
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestDecodeSelectedPrefixFallsBack: frames whose prefix cannot be cut or
// decodes short are decoded whole, with the same result: blocks smaller
// than their maximum (the cut frame decodes to fewer bytes than the
// selection needs), two frames (the first not the whole chunk), a content
// checksum (checked: a whole decode), raw blocks (sizes known: cut).
func TestDecodeSelectedPrefixFallsBack(t *testing.T) {
	spec := prefixSpec(prefixCodecs)
	chunk := smoothChunk(3)
	for i := 0; i < len(chunk); i += 4 { // compressible: whole numbers
		v := math.Float32frombits(binary.LittleEndian.Uint32(chunk[i:]))
		binary.LittleEndian.PutUint32(chunk[i:], math.Float32bits(float32(int(v))))
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderCRC(true), zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	rawBlocks := func() []byte { // a frame of 1000-byte raw blocks, by hand
		f := []byte{0x28, 0xb5, 0x2f, 0xfd, 0xa0, 0, 0, 4, 0} // single segment, 4-byte content size 256 KiB
		for at := 0; at < len(chunk); at += 1000 {
			n := min(1000, len(chunk)-at)
			h := uint32(n) << 3
			if at+n == len(chunk) {
				h |= 1
			}
			f = append(f, byte(h), byte(h>>8), byte(h>>16))
			f = append(f, chunk[at:at+n]...)
		}
		return f
	}()
	frames := map[string]struct {
		frame []byte
		cut   bool // zstdPrefix decodes it in part
	}{
		"small blocks": {streamFrame(t, chunk, 1000, 5000), false},
		"two frames":   {append(streamFrame(t, chunk[:100000]), streamFrame(t, chunk[100000:])...), false},
		"checksum":     {enc.EncodeAll(chunk, nil), false},
		"raw blocks":   {rawBlocks, true},
		"large blocks": {streamFrame(t, chunk, 131072), true},
	}
	for name, f := range frames {
		t.Run(name, func(t *testing.T) {
			need := selectionEnd(box(2, 3, 0, 64), []int64{256, 256}, 4)
			if data, ok := zstdPrefix(f.frame, need, int64(len(chunk))); ok != f.cut || ok && !bytes.Equal(data, chunk[:len(data)]) {
				t.Fatalf("zstdPrefix: ok %v, want %v (or wrong bytes)", ok, f.cut)
			}
			// box(0, 1, 250, 1): the element of bytes 1000-1003, just
			// past the first raw block; box(0, 1, 249, 1): its last.
			for _, s := range []codec.Selection{box(2, 3, 0, 64), box(200, 50, 7, 9), box(0, 1, 250, 1), box(0, 1, 249, 1), box(0, 2, 0, 1)} {
				out, err := NewLocal().DecodeSelected(context.Background(), spec, [][]byte{f.frame}, []codec.Selection{s})
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(out[0].Data, packed(chunk, s)) {
					t.Fatalf("selection %v differs from the chunk's", s)
				}
			}
		})
	}
}

// TestDecodeSelectedPrefixCorrupt: a damaged chunk read in part is
// DataLoss (never a panic): a reserved block type in the first block, a
// frame cut short in the blocks the selection needs, a content size that
// is not the chunk's, garbage, nothing, a damaged checksum (such frames are
// decoded whole and checked). Bytes of the first block flipped: DataLoss,
// or the elements a whole decode of the same bytes gives (zstd without a
// checksum need not notice), never others.
func TestDecodeSelectedPrefixCorrupt(t *testing.T) {
	spec := prefixSpec(prefixCodecs)
	chunk := smoothChunk(4)
	c, err := NewLocal().Chain(spec)
	if err != nil {
		t.Fatal(err)
	}
	good, err := c.Encode(Chunk{Data: chunk})
	if err != nil {
		t.Fatal(err)
	}
	good = bytes.Clone(good)
	var h zstd.Header
	if err := h.Decode(good); err != nil {
		t.Fatal(err)
	}
	reserved := bytes.Clone(good)
	reserved[h.HeaderSize] |= 3 << 1 // the first block's type: reserved
	plain, _ := zstd.NewWriter(nil)
	crc, _ := zstd.NewWriter(nil, zstd.WithEncoderCRC(true))
	withCRC := crc.EncodeAll(chunk, nil)
	withCRC[len(withCRC)-1] ^= 0xff
	sel := box(1, 10, 3, 64)
	for name, frame := range map[string][]byte{
		"reserved block type":          reserved,
		"truncated in the first block": good[:len(good)/4],
		"content size of half a chunk": plain.EncodeAll(chunk[:len(chunk)/2], nil),
		"garbage":                      bytes.Repeat([]byte{0x28, 0xb5, 0x2f, 0xfd, 0x77}, 100),
		"empty":                        {},
		"checksum damaged":             withCRC,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := NewLocal().DecodeSelected(context.Background(), spec, [][]byte{frame}, []codec.Selection{sel})
			if errs.CodeOf(err) != errs.CodeDataLoss {
				t.Fatalf("%v, want DataLoss", err)
			}
		})
	}
	r := rand.New(rand.NewPCG(9, 10))
	for i := range 200 {
		frame := bytes.Clone(good)
		for range 1 + r.IntN(4) {
			frame[h.HeaderSize+3+r.IntN(len(frame)/3)] ^= byte(1 + r.IntN(255))
		}
		out, err := NewLocal().DecodeSelected(context.Background(), spec, [][]byte{frame}, []codec.Selection{sel})
		if err != nil {
			if errs.CodeOf(err) != errs.CodeDataLoss {
				t.Fatalf("damage %d: %v, want DataLoss", i, err)
			}
			continue
		}
		whole, werr := c.Decode(frame)
		want := packed(chunk, sel) // the damage lies past the cut
		if werr == nil {
			want = packed(whole.Data, sel)
		}
		if !bytes.Equal(out[0].Data, want) {
			t.Fatalf("damage %d: the elements differ from a whole decode's (whole decode: %v)", i, werr)
		}
	}
}

// BenchmarkDecodeSelected64 decodes random 64 × 64 boxes of a 256 × 256
// float32 chunk of bytes + zstd (encoded by this package, as the gateway
// writes it, and by libzstd-like block sizes: two 128 KiB blocks): whole
// (Decode, then the box packed) against DecodeSelected, which decodes
// only the blocks up to the box's last row.
func BenchmarkDecodeSelected64(b *testing.B) {
	spec := prefixSpec(prefixCodecs)
	l := NewLocal()
	c, err := l.Chain(spec)
	if err != nil {
		b.Fatal(err)
	}
	chunk := smoothChunk(5)
	enc, err := c.Encode(Chunk{Data: chunk})
	if err != nil {
		b.Fatal(err)
	}
	enc = bytes.Clone(enc)
	boxes := func() func() codec.Selection {
		r := rand.New(rand.NewPCG(1, 2))
		return func() codec.Selection { return box(r.Int64N(193), 64, r.Int64N(193), 64) }
	}
	b.Run("whole", func(b *testing.B) {
		next := boxes()
		b.SetBytes(int64(len(chunk)))
		defer cpuPerOp(b)()
		for b.Loop() {
			out, err := l.Decode(context.Background(), spec, [][]byte{enc})
			if err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, 64*64*4)
			codec.Pack(buf, out[0].Data, spec.Shape, 4, next())
			out[0].Release()
		}
	})
	b.Run("selected", func(b *testing.B) {
		next := boxes()
		b.SetBytes(int64(len(chunk)))
		defer cpuPerOp(b)()
		for b.Loop() {
			out, err := l.DecodeSelected(context.Background(), spec, [][]byte{enc}, []codec.Selection{next()})
			if err != nil {
				b.Fatal(err)
			}
			out[0].Release()
		}
	})
}

// cpuPerOp starts counting the process's CPU time; the function it
// returns reports it per iteration as cpu-µs/op (steadier than the time
// per op on a busy machine).
func cpuPerOp(b *testing.B) func() {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	c0 := cpu()
	return func() { b.ReportMetric(float64((cpu()-c0).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op") }
}

// A frame whose header declares a window of 1 GiB (a damaged or hostile
// header; the content size is the chunk's) is read in part with a
// decoder history of the chunk's size, not of the declared window.
func TestZstdPrefixHugeWindowBounded(t *testing.T) {
	chunk := smoothChunk(5)
	// Not single-segment, Window_Descriptor 2^31, 4-byte content size.
	f := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x80, byte(30-10) << 3}
	f = binary.LittleEndian.AppendUint32(f, uint32(len(chunk)))
	for at := 0; at < len(chunk); at += 1000 {
		n := min(1000, len(chunk)-at)
		h := uint32(n) << 3
		if at+n == len(chunk) {
			h |= 1
		}
		f = append(f, byte(h), byte(h>>8), byte(h>>16))
		f = append(f, chunk[at:at+n]...)
	}
	need := selectionEnd(box(2, 3, 0, 64), []int64{256, 256}, 4)
	zstdPrefix(f, need, int64(len(chunk))) // the decoder's first use
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	data, ok := zstdPrefix(f, need, int64(len(chunk)))
	runtime.ReadMemStats(&after)
	if !ok || !bytes.Equal(data, chunk[:len(data)]) {
		t.Fatalf("zstdPrefix: ok %v (or wrong bytes)", ok)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Fatalf("a part read of a 256 KiB chunk allocated %d MiB", alloc>>20)
	}
}
