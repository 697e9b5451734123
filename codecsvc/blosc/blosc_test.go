package blosc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/zarrgate/zarrgate/errs"
)

var allCnames = []string{"blosclz", "lz4", "lz4hc", "zstd", "zlib", "snappy"}

// smoothFloat32 is n bytes of a smooth float32 signal (the last element may
// be cut short).
func smoothFloat32(n int) []byte {
	b := make([]byte, (n/4+1)*4)
	for i := 0; i*4 < len(b); i++ {
		v := float32(math.Sin(float64(i)/200)*100 + float64(i)/5000)
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b[:n]
}

func TestRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, cname := range allCnames {
		for _, sh := range []Shuffle{NoShuffle, ByteShuffle, BitShuffle} {
			for _, ts := range []int{1, 2, 4, 8, 3} {
				bs := 4096
				for _, size := range []int{0, 1, 7, 127, 128, bs, 5*bs + 13, 300_001} {
					for _, forced := range []int{0, bs} {
						name := fmt.Sprintf("%s/sh%d/ts%d/n%d/bs%d", cname, sh, ts, size, forced)
						in := smoothFloat32(size)
						if size == 5*bs+13 {
							// Half noise: some streams compress, some don't.
							for i := size / 2; i < size; i++ {
								in[i] = byte(rng.Uint32())
							}
						}
						o := Options{Cname: cname, Clevel: 5, Shuffle: sh, Typesize: ts, Blocksize: forced}
						frame, err := Compress(in, o)
						if err != nil {
							t.Fatalf("%s: Compress: %v", name, err)
						}
						if len(frame) > size+HeaderSize {
							t.Fatalf("%s: frame of %d bytes for %d input bytes", name, len(frame), size)
						}
						nb, cb, _, err := Info(frame)
						if err != nil || nb != size || cb != len(frame) {
							t.Fatalf("%s: Info = %d, %d, %v", name, nb, cb, err)
						}
						got, err := Decompress(frame, size)
						if err != nil {
							t.Fatalf("%s: Decompress: %v", name, err)
						}
						if !bytes.Equal(got, in) {
							t.Fatalf("%s: round trip differs", name)
						}
					}
				}
			}
		}
	}
}

func TestCompressLevels(t *testing.T) {
	in := smoothFloat32(200_000)
	for _, cname := range allCnames {
		for clevel := 0; clevel <= 9; clevel++ {
			frame, err := Compress(in, Options{Cname: cname, Clevel: clevel, Shuffle: ByteShuffle, Typesize: 4})
			if err != nil {
				t.Fatal(err)
			}
			got, err := Decompress(frame, len(in))
			if err != nil || !bytes.Equal(got, in) {
				t.Fatalf("%s clevel %d: %v", cname, clevel, err)
			}
			if clevel > 0 && len(frame) > len(in)*9/10 {
				t.Errorf("%s clevel %d: poor ratio %d/%d", cname, clevel, len(frame), len(in))
			}
		}
	}
}

func TestBadOptions(t *testing.T) {
	for _, o := range []Options{
		{Cname: "lzma", Clevel: 5, Typesize: 4},
		{Cname: "lz4", Clevel: 10, Typesize: 4},
		{Cname: "lz4", Clevel: -1, Typesize: 4},
		{Cname: "lz4", Clevel: 5, Typesize: 0},
		{Cname: "lz4", Clevel: 5, Typesize: 4, Shuffle: 3},
		{Cname: "lz4", Clevel: 5, Typesize: 4, Blocksize: -1},
	} {
		if _, err := Compress([]byte("x"), o); !errors.Is(err, errs.InvalidArgument) {
			t.Errorf("%+v: err = %v, want InvalidArgument", o, err)
		}
	}
	// Typesizes above 255 are treated as 1, like c-blosc.
	frame, err := Compress(smoothFloat32(1000), Options{Cname: "lz4", Clevel: 5, Typesize: 1000, Shuffle: ByteShuffle})
	if err != nil || frame[3] != 1 {
		t.Fatalf("typesize 1000: %v, header typesize %d", err, frame[3])
	}
}

func TestBitshuffleInverse(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, ts := range []int{1, 2, 3, 4, 5, 8, 16, 17} {
		for _, n := range []int{0, 1, 8, 64, 65, 1000, 1024} {
			src := make([]byte, n)
			for i := range src {
				src[i] = byte(rng.Uint32())
			}
			sh, back, tmp := make([]byte, n), make([]byte, n), make([]byte, n)
			bitshuffle(ts, src, sh, tmp)
			bitunshuffle(ts, sh, back, tmp)
			if !bytes.Equal(src, back) {
				t.Fatalf("bitshuffle ts %d n %d is not inverted", ts, n)
			}
			shuffle(ts, src, sh)
			unshuffle(ts, sh, back)
			if !bytes.Equal(src, back) {
				t.Fatalf("shuffle ts %d n %d is not inverted", ts, n)
			}
		}
	}
}

// TestBitshuffleLayout checks the bit layout against its definition.
func TestBitshuffleLayout(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, ts := range []int{1, 2, 3, 4, 8} {
		const n = 64
		src := make([]byte, n*ts)
		for i := range src {
			src[i] = byte(rng.Uint32())
		}
		dst, tmp := make([]byte, len(src)), make([]byte, len(src))
		bitshuffle(ts, src, dst, tmp)
		for i := 0; i < n; i++ {
			for j := 0; j < ts; j++ {
				for b := 0; b < 8; b++ {
					want := src[i*ts+j] >> b & 1
					got := dst[(8*j+b)*(n/8)+i/8] >> (i % 8) & 1
					if got != want {
						t.Fatalf("ts %d: element %d byte %d bit %d misplaced", ts, i, j, b)
					}
				}
			}
		}
	}
}

func TestBlosclzStreams(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	inputs := [][]byte{
		bytes.Repeat([]byte{7}, 100_000),
		bytes.Repeat([]byte("abcdefghij"), 10_000),
		ramp(70_000),
	}
	far := make([]byte, 100_000) // repeats at distances beyond 8191
	for i := range 20_000 {
		far[i] = byte(rng.Uint32())
	}
	for i := 20_000; i < len(far); i++ {
		far[i] = far[i-20_000]
	}
	inputs = append(inputs, far)
	for i, in := range inputs {
		buf := make([]byte, len(in))
		n := blosclzCompress(buf, in, 5)
		if n == 0 || n >= len(in) {
			t.Fatalf("input %d: compressed to %d bytes", i, n)
		}
		out := make([]byte, len(in))
		m, err := blosclzDecompress(buf[:n], out)
		if err != nil || m != len(in) || !bytes.Equal(out, in) {
			t.Fatalf("input %d: decompress = %d, %v", i, m, err)
		}
	}
}

func TestCorruptFrames(t *testing.T) {
	in := smoothFloat32(300_000)
	for _, cname := range allCnames {
		frame, err := Compress(in, Options{Cname: cname, Clevel: 5, Shuffle: ByteShuffle, Typesize: 4, Blocksize: 65536})
		if err != nil {
			t.Fatal(err)
		}
		// Every truncation fails cleanly.
		for _, cut := range []int{0, 1, 15, 16, 17, 20, len(frame) / 2, len(frame) - 1} {
			if _, err := Decompress(frame[:cut], len(in)); !errors.Is(err, errs.DataLoss) {
				t.Errorf("%s truncated to %d: err = %v, want DataLoss", cname, cut, err)
			}
		}
		// Corrupt cbytes that still fit the buffer.
		bad := bytes.Clone(frame)
		binary.LittleEndian.PutUint32(bad[12:], uint32(len(frame)/2))
		if _, err := Decompress(bad, len(in)); !errors.Is(err, errs.DataLoss) {
			t.Errorf("%s with short cbytes: err = %v", cname, err)
		}
		// A block offset pointing outside the frame.
		bad = bytes.Clone(frame)
		binary.LittleEndian.PutUint32(bad[HeaderSize:], uint32(len(frame)+100))
		if _, err := Decompress(bad, len(in)); !errors.Is(err, errs.DataLoss) {
			t.Errorf("%s with bad bstarts: err = %v", cname, err)
		}
		// Flip bytes throughout: must not panic; errors must carry DataLoss.
		rng := rand.New(rand.NewPCG(9, 10))
		for range 300 {
			bad = bytes.Clone(frame)
			for range 1 + rng.IntN(4) {
				bad[rng.IntN(len(bad))] ^= byte(1 + rng.IntN(255))
			}
			if _, err := Decompress(bad, len(in)); err != nil && !errors.Is(err, errs.DataLoss) {
				t.Errorf("%s: err = %v, want DataLoss", cname, err)
			}
		}
	}
}

func TestDecompressionBomb(t *testing.T) {
	// A header claiming 1 GiB is refused before any allocation.
	h := make([]byte, 32)
	h[0], h[1], h[2], h[3] = formatVersion, codecVersion, formatLZ4<<5, 4
	binary.LittleEndian.PutUint32(h[4:], 1<<30)
	binary.LittleEndian.PutUint32(h[8:], 1<<20)
	binary.LittleEndian.PutUint32(h[12:], 32)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 10 {
		if _, err := Decompress(h, 1<<20); !errors.Is(err, errs.DataLoss) {
			t.Fatalf("err = %v", err)
		}
	}
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
		t.Errorf("refusing a bomb 10 times allocated %d bytes", n)
	}
	// Streams that claim (or decode to) more than their block hold fail.
	in := bytes.Repeat([]byte{1}, 1<<20)
	for _, cname := range allCnames {
		frame, err := Compress(in, Options{Cname: cname, Clevel: 5, Typesize: 1, Blocksize: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		// Halve nbytes and blocksize: every stream now decodes to twice its block.
		bad := bytes.Clone(frame)
		binary.LittleEndian.PutUint32(bad[4:], 1<<19)
		binary.LittleEndian.PutUint32(bad[8:], 1<<19)
		bad[2] |= flagDontSplit
		if _, err := Decompress(bad, 1<<20); !errors.Is(err, errs.DataLoss) {
			t.Errorf("%s: err = %v, want DataLoss", cname, err)
		}
	}
	if _, err := Decompress(h, -1); !errors.Is(err, errs.InvalidArgument) {
		t.Errorf("negative maxSize: %v", err)
	}
}

// A header claiming blocks far larger than the content makes the decoder
// size its scratch space by the content, not by the claim.
func TestBlocksizeClaim(t *testing.T) {
	in := make([]byte, 4000)
	for i := range in {
		in[i] = byte(i % 7)
	}
	frame, err := Compress(in, Options{Cname: "lz4", Clevel: 5, Shuffle: ByteShuffle, Typesize: 4})
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(frame)
	binary.LittleEndian.PutUint32(bad[8:], 1<<29) // blocksize: 512 MiB (the format allows ~700 MB)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 4 {
		Decompress(bad, len(in)) // decodes or fails; either way cheaply
	}
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 4<<20 {
		t.Errorf("a 512 MiB block size claim made decoding allocate %d bytes", n)
	}
}

func TestDecompressIntoShort(t *testing.T) {
	in := smoothFloat32(10_000)
	frame, _ := Compress(in, Options{Cname: "lz4", Clevel: 5, Typesize: 4, Shuffle: ByteShuffle})
	if _, err := DecompressInto(make([]byte, len(in)-1), frame); !errors.Is(err, errs.DataLoss) {
		t.Fatalf("err = %v", err)
	}
}

// dirtyAlloc returns buffers full of 0xA5, as a recycled buffer may be.
func dirtyAlloc(n int) []byte { return bytes.Repeat([]byte{0xA5}, n+7) }

// TestDecompressWithDirtyBuffer: decoding into a buffer that holds old data
// writes every byte of the output, for every codec, filter and layout
// (split, unsplit, leftover blocks, raw streams), so recycled buffers never
// leak what they held.
func TestDecompressWithDirtyBuffer(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, cname := range allCnames {
		for _, sh := range []Shuffle{NoShuffle, ByteShuffle, BitShuffle} {
			for _, ts := range []int{1, 2, 3, 4, 8, 16} {
				for _, size := range []int{0, 5, 200, 4096*3 + 11, 70_000} {
					in := smoothFloat32(size)
					for i := size / 2; i < size; i++ {
						in[i] = byte(rng.Uint32())
					}
					frame, err := Compress(in, Options{Cname: cname, Clevel: 5, Shuffle: sh, Typesize: ts, Blocksize: 4096})
					if err != nil {
						t.Fatal(err)
					}
					got, err := DecompressWith(frame, size, dirtyAlloc)
					if err != nil || !bytes.Equal(got, in) {
						t.Fatalf("%s sh%d ts%d n%d: DecompressWith differs from the input (%v)", cname, sh, ts, size, err)
					}
				}
			}
		}
	}
}

// TestDecompressWithRefusesFirst: a frame refused by the checks never
// reaches alloc.
func TestDecompressWithRefusesFirst(t *testing.T) {
	h := make([]byte, 32)
	h[0], h[1], h[2], h[3] = formatVersion, codecVersion, formatLZ4<<5, 4
	binary.LittleEndian.PutUint32(h[4:], 1<<20)
	binary.LittleEndian.PutUint32(h[8:], 1<<16)
	binary.LittleEndian.PutUint32(h[12:], 32)
	called := false
	_, err := DecompressWith(h, 1<<20, func(n int) []byte { called = true; return make([]byte, n) })
	if !errors.Is(err, errs.DataLoss) || called {
		t.Fatalf("err = %v, alloc called %v; want DataLoss without alloc", err, called)
	}
}

// TestCompressFramesOwnTheirBytes: frames kept across later Compress calls
// (which recycle the block buffers) still decode to their own input.
func TestCompressFramesOwnTheirBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	var frames, inputs [][]byte
	for i := range 6 {
		in := smoothFloat32(300_000 + 1000*i)
		for k := range in[:len(in)/3] {
			in[k] ^= byte(rng.Uint32())
		}
		fr, err := Compress(in, Options{Cname: "lz4", Clevel: 5, Shuffle: ByteShuffle, Typesize: 4, Blocksize: 64 << 10})
		if err != nil {
			t.Fatal(err)
		}
		frames, inputs = append(frames, fr), append(inputs, in)
	}
	for i, fr := range frames {
		if out, err := Decompress(fr, len(inputs[i])); err != nil || !bytes.Equal(out, inputs[i]) {
			t.Fatalf("frame %d no longer decodes to its input (%v)", i, err)
		}
	}
}
