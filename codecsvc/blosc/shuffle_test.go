package blosc

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
)

// refShuffle and refUnshuffle are the byte shuffle by its definition: byte
// j of element i sits at j*n+i once shuffled; bytes past the last whole
// element stay where they are.
func refShuffle(ts int, src []byte) []byte {
	n := len(src) / ts
	dst := bytes.Clone(src)
	for i := range n {
		for j := range ts {
			dst[j*n+i] = src[i*ts+j]
		}
	}
	return dst
}

func refUnshuffle(ts int, src []byte) []byte {
	n := len(src) / ts
	dst := bytes.Clone(src)
	for i := range n {
		for j := range ts {
			dst[i*ts+j] = src[j*n+i]
		}
	}
	return dst
}

// withLevel runs f at each SIMD level this machine has (0 is the Go code).
func withLevel(t *testing.T, f func(t *testing.T, level int)) {
	saved := simdLevel
	defer func() { simdLevel = saved }()
	for _, level := range simdLevels() {
		simdLevel = level
		f(t, level)
	}
}

// guarded returns a slice of n bytes at offset off of a larger buffer whose
// other bytes are 0xA5, and a check that they still are.
func guarded(n, off int) ([]byte, func() bool) {
	buf := bytes.Repeat([]byte{0xA5}, off+n+64)
	return buf[off : off+n : off+n], func() bool {
		for _, b := range buf[:off] {
			if b != 0xA5 {
				return false
			}
		}
		for _, b := range buf[off+n:] {
			if b != 0xA5 {
				return false
			}
		}
		return true
	}
}

// checkShuffles compares shuffle, unshuffle and unshufflePlanes (planes
// taken from separate, unaligned buffers) with the reference on src.
func checkShuffles(t *testing.T, level, ts int, src []byte, off int) {
	t.Helper()
	name := fmt.Sprintf("level %d ts %d len %d off %d", level, ts, len(src), off)
	in, _ := guarded(len(src), off)
	copy(in, src)
	want := refShuffle(ts, src)
	dst, intact := guarded(len(src), (off+1)%7)
	shuffle(ts, in, dst)
	if !bytes.Equal(dst, want) || !intact() {
		t.Fatalf("%s: shuffle differs from the reference (guards intact %v)", name, intact())
	}
	want = refUnshuffle(ts, src)
	dst, intact = guarded(len(src), (off+3)%7)
	unshuffle(ts, in, dst)
	if !bytes.Equal(dst, want) || !intact() {
		t.Fatalf("%s: unshuffle differs from the reference (guards intact %v)", name, intact())
	}
	n := len(src) / ts
	if n == 0 || ts > maxSplits {
		return
	}
	planes := make([][]byte, ts)
	for j := range planes {
		planes[j], _ = guarded(n, (off+j)%5)
		copy(planes[j], src[j*n:])
	}
	dst, intact = guarded(n*ts, (off+2)%7)
	unshufflePlanes(planes, dst)
	if !bytes.Equal(dst, want[:n*ts]) || !intact() {
		t.Fatalf("%s: unshufflePlanes differs from the reference (guards intact %v)", name, intact())
	}
}

// TestShuffleEquivalence checks every kernel against the reference for
// typesizes 1 to 16 and every length up to several SIMD groups plus
// tails, at unaligned offsets.
func TestShuffleEquivalence(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	src := make([]byte, 16*300)
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	withLevel(t, func(t *testing.T, level int) {
		for ts := 1; ts <= 16; ts++ {
			maxLen := ts*40 + ts
			if ts == 2 || ts == 4 || ts == 8 {
				maxLen = ts*100 + ts
			}
			for n := 0; n <= maxLen; n++ {
				checkShuffles(t, level, ts, src[:n], n%3)
			}
		}
	})
}

// checkTrans8x8 compares trans8x8Words with trans8x8 word by word.
func checkTrans8x8(t *testing.T, level int, src []byte, off int) {
	t.Helper()
	n := len(src) &^ 7
	b, intact := guarded(n, off)
	copy(b, src)
	trans8x8Words(b)
	for i := 0; i < n; i += 8 {
		if want := trans8x8(binary.LittleEndian.Uint64(src[i:])); binary.LittleEndian.Uint64(b[i:]) != want {
			t.Fatalf("level %d len %d off %d: word %d transposed wrong", level, n, off, i/8)
		}
	}
	if !intact() {
		t.Fatalf("level %d len %d off %d: wrote outside the words", level, n, off)
	}
}

// TestTrans8x8Equivalence checks the bit-transpose kernels against
// trans8x8 for every length up to several vectors plus tails.
func TestTrans8x8Equivalence(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	src := make([]byte, 1024)
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	withLevel(t, func(t *testing.T, level int) {
		for n := 0; n <= len(src); n += 8 {
			checkTrans8x8(t, level, src[:n], n%5)
		}
	})
}

// TestShuffleSIMDUsed: on amd64 the kernels do the bulk of typesizes 2, 4
// and 8, so that TestShuffleEquivalence tests them and not only the Go code.
func TestShuffleSIMDUsed(t *testing.T) {
	withLevel(t, func(t *testing.T, level int) {
		if level == 0 {
			return
		}
		for _, ts := range []int{2, 4, 8} {
			const n = 100
			src, dst := make([]byte, ts*n), make([]byte, ts*n)
			if m := shuffleSIMD(ts, src, dst, n); m != 96 {
				t.Errorf("level %d ts %d: shuffleSIMD did %d of %d elements", level, ts, m, n)
			}
			planes := make([][]byte, ts)
			for j := range planes {
				planes[j] = src[j*n : (j+1)*n]
			}
			if m := unshuffleSIMD(planes, dst, n); m != 96 {
				t.Errorf("level %d ts %d: unshuffleSIMD did %d of %d elements", level, ts, m, n)
			}
		}
		if m := trans8x8SIMD(make([]byte, 100)); m != 96 {
			t.Errorf("level %d: trans8x8SIMD did %d of 100 bytes", level, m)
		}
	})
}

// FuzzShuffle compares the kernels with the reference on arbitrary input.
func FuzzShuffle(f *testing.F) {
	f.Add(bytes.Repeat([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9}, 40), uint8(4), uint8(1))
	f.Add(bytes.Repeat([]byte{0xFF, 0}, 300), uint8(8), uint8(0))
	f.Add(bytes.Repeat([]byte{7}, 97), uint8(2), uint8(3))
	f.Fuzz(func(t *testing.T, src []byte, ts, off uint8) {
		typesize := int(ts%16) + 1
		withLevel(t, func(t *testing.T, level int) {
			checkShuffles(t, level, typesize, src, int(off%8))
			checkTrans8x8(t, level, src, int(off%8))
		})
	})
}

func BenchmarkUnshuffle(b *testing.B) {
	const size = 512 << 10 // a blosc-lz4 block of float32 at clevel 5
	src := smoothFloat32(size)
	dst := make([]byte, size)
	for _, ts := range []int{2, 4, 8} {
		for _, level := range simdLevels() {
			b.Run(fmt.Sprintf("ts%d/level%d", ts, level), func(b *testing.B) {
				saved := simdLevel
				simdLevel = level
				defer func() { simdLevel = saved }()
				b.SetBytes(size)
				for b.Loop() {
					unshuffle(ts, src, dst)
				}
			})
		}
	}
}

func BenchmarkShuffle(b *testing.B) {
	const size = 512 << 10
	src := smoothFloat32(size)
	dst := make([]byte, size)
	for _, ts := range []int{2, 4, 8} {
		for _, level := range simdLevels() {
			b.Run(fmt.Sprintf("ts%d/level%d", ts, level), func(b *testing.B) {
				saved := simdLevel
				simdLevel = level
				defer func() { simdLevel = saved }()
				b.SetBytes(size)
				for b.Loop() {
					shuffle(ts, src, dst)
				}
			})
		}
	}
}
