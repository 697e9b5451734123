package gateway

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// naiveCopyBox is the element-by-element reference for copyBox.
func naiveCopyBox(dst []byte, dv view, src []byte, sv view, count []int64, e int) {
	nd := len(count)
	total := int64(1)
	for _, c := range count {
		total *= c
	}
	k := make([]int64, nd)
	for n := int64(0); n < total; n++ {
		rem := n
		for d := nd - 1; d >= 0; d-- {
			k[d] = rem % count[d]
			rem /= count[d]
		}
		var di, si int64
		for d := range nd {
			di = di*dv.shape[d] + dv.start[d] + k[d]*dv.step[d]
			si = si*sv.shape[d] + sv.start[d] + k[d]*sv.step[d]
		}
		copy(dst[di*int64(e):(di+1)*int64(e)], src[si*int64(e):(si+1)*int64(e)])
	}
}

func randView(r *rand.Rand, count []int64) view {
	nd := len(count)
	v := view{shape: make([]int64, nd), start: make([]int64, nd), step: make([]int64, nd)}
	for d := range nd {
		v.step[d] = 1 + r.Int64N(3)
		if r.IntN(2) == 0 {
			v.step[d] = 1
		}
		v.start[d] = r.Int64N(3)
		v.shape[d] = v.start[d] + (count[d]-1)*v.step[d] + 1 + r.Int64N(3)
		if count[d] == 0 {
			v.shape[d] = 1 + r.Int64N(3)
		}
	}
	return v
}

func size(shape []int64) int64 {
	n := int64(1)
	for _, s := range shape {
		n *= s
	}
	return n
}

func TestCopyBoxMatchesNaive(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for iter := range 3000 {
		nd := r.IntN(5)
		count := make([]int64, nd)
		for d := range count {
			count[d] = r.Int64N(6)
			if iter%7 != 0 && count[d] == 0 {
				count[d] = 1
			}
		}
		e := []int{1, 2, 3, 4, 8, 16}[r.IntN(6)]
		sv, dv := randView(r, count), randView(r, count)
		src := make([]byte, size(sv.shape)*int64(e))
		for i := range src {
			src[i] = byte(r.Uint32())
		}
		got := make([]byte, size(dv.shape)*int64(e))
		want := make([]byte, len(got))
		copyBox(got, dv, src, sv, count, e)
		naiveCopyBox(want, dv, src, sv, count, e)
		if !bytes.Equal(got, want) {
			t.Fatalf("iteration %d: count %v elem %d src %+v dst %+v: mismatch", iter, count, e, sv, dv)
		}
		bits := make([]uint64, (size(dv.shape)+63)/64)
		if ov := markBox(bits, dv, count); ov != 0 {
			t.Fatalf("fresh bitmap reported %d overlaps", ov)
		}
		n := size(count)
		set := int64(0)
		for _, w := range bits {
			for ; w != 0; w &= w - 1 {
				set++
			}
		}
		if set != n {
			t.Fatalf("markBox set %d bits for %d elements", set, n)
		}
		if ov := markBox(bits, dv, count); ov != n {
			t.Fatalf("second mark reported %d overlaps, want %d", ov, n)
		}
	}
}

// BenchmarkCopyBoxChunk copies a whole 256x256 float32 chunk into a larger
// output (the ReadSlab hot path) and a strided half of it.
func BenchmarkCopyBoxChunk(b *testing.B) {
	const n = 256
	src := make([]byte, n*n*4)
	dst := make([]byte, 4*n*n*4)
	b.Run("contiguous", func(b *testing.B) {
		b.SetBytes(int64(len(src)))
		for b.Loop() {
			copyBox(dst, dense([]int64{2 * n, 2 * n}, []int64{n, 0}), src, dense([]int64{n, n}, []int64{0, 0}), []int64{n, n}, 4)
		}
	})
	b.Run("stride2", func(b *testing.B) {
		b.SetBytes(int64(len(src)) / 4)
		for b.Loop() {
			copyBox(dst, dense([]int64{n, n}, []int64{0, 0}), src, view{shape: []int64{n, n}, start: []int64{0, 0}, step: []int64{2, 2}}, []int64{n / 2, n / 2}, 4)
		}
	})
}
