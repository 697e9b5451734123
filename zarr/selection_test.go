package zarr

import (
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// naive maps every selected element to (chunk coords, offset in chunk,
// output position), element by element.
func naive(shape, chunks []int64, sel []Range) map[string][][2][]int64 {
	out := map[string][][2][]int64{}
	nd := len(sel)
	idx := make([]int64, nd)
	counts := make([]int64, nd)
	for i, r := range sel {
		counts[i] = r.Count()
		if counts[i] == 0 {
			return out
		}
	}
	for {
		chunk := make([]int64, nd)
		inner := make([]int64, nd)
		outPos := make([]int64, nd)
		for i := range nd {
			e := sel[i].Start + idx[i]*sel[i].Step
			chunk[i], inner[i], outPos[i] = e/chunks[i], e%chunks[i], idx[i]
		}
		k := DefaultKeyEncoding.Key("", chunk)
		out[k] = append(out[k], [2][]int64{inner, outPos})
		i := nd - 1
		for ; i >= 0; i-- {
			idx[i]++
			if idx[i] < counts[i] {
				break
			}
			idx[i] = 0
		}
		if i < 0 {
			return out
		}
	}
}

func fromProjection(p *Projection) map[string][][2][]int64 {
	out := map[string][][2][]int64{}
	p.Each(func(coords []int64, dims []DimProjection) bool {
		k := DefaultKeyEncoding.Key("", coords)
		nd := len(dims)
		idx := make([]int64, nd)
		for _, d := range dims {
			if d.Count <= 0 || d.Start+(d.Count-1)*d.Step >= d.Stop || d.Start+d.Count*d.Step < d.Stop {
				panic("inconsistent projection")
			}
		}
		for {
			inner := make([]int64, nd)
			outPos := make([]int64, nd)
			for i, d := range dims {
				inner[i] = d.Start + idx[i]*d.Step
				outPos[i] = d.OutStart + idx[i]
			}
			out[k] = append(out[k], [2][]int64{inner, outPos})
			i := nd - 1
			for ; i >= 0; i-- {
				idx[i]++
				if idx[i] < dims[i].Count {
					break
				}
				idx[i] = 0
			}
			if i < 0 {
				break
			}
		}
		return true
	})
	return out
}

// randomSelection is a small random array (0 to 3 dimensions), its chunk
// shape and a selection of it with steps.
func randomSelection(rng *rand.Rand) (shape, chunks []int64, sel []Range) {
	nd := rng.IntN(4)
	shape, chunks, sel = make([]int64, nd), make([]int64, nd), make([]Range, nd)
	for i := range nd {
		shape[i] = rng.Int64N(20)
		chunks[i] = 1 + rng.Int64N(8)
		a, b := rng.Int64N(shape[i]+1), rng.Int64N(shape[i]+1)
		sel[i] = Range{min(a, b), max(a, b), 1 + rng.Int64N(7)}
	}
	return shape, chunks, sel
}

func TestProjectAgainstNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 3000 {
		shape, chunks, sel := randomSelection(rng)
		nd := len(shape)
		p, err := Project(shape, chunks, sel)
		if err != nil {
			t.Fatalf("%d: %v", iter, err)
		}
		want, got := naive(shape, chunks, sel), fromProjection(p)
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("%d: shape %v chunks %v sel %v:\nwant %v\ngot  %v", iter, shape, chunks, sel, want, got)
		}
		if int64(len(got)) != p.NumChunks() && nd > 0 {
			t.Fatalf("%d: NumChunks %d, touched %d", iter, p.NumChunks(), len(got))
		}
		for i := range nd {
			if p.Shape[i] != sel[i].Count() {
				t.Fatalf("output shape")
			}
		}
	}
}

func TestProjectErrors(t *testing.T) {
	shape, chunks := []int64{10, 10}, []int64{3, 3}
	tests := []struct {
		sel  []Range
		kind *ErrorKind
		want string
	}{
		{[]Range{{0, 10, 1}}, ErrInvalid, "dimensions"},
		{[]Range{{0, 10, 1}, {0, 10, 0}}, ErrInvalid, "dimension 1"},
		{[]Range{{0, 11, 1}, {0, 10, 1}}, ErrOutOfRange, "dimension 0"},
		{[]Range{{0, 10, 1}, {-1, 10, 1}}, ErrOutOfRange, "dimension 1"},
		{[]Range{{5, 4, 1}, {0, 10, 1}}, ErrOutOfRange, "dimension 0"},
	}
	for _, tc := range tests {
		_, err := Project(shape, chunks, tc.sel)
		if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %v naming %q", tc.sel, err, tc.kind, tc.want)
		}
	}
	// 0-d: one chunk.
	p, err := Project(nil, nil, nil)
	if err != nil || p.NumChunks() != 1 {
		t.Fatal(err)
	}
	n := 0
	p.Each(func(c []int64, d []DimProjection) bool { n++; return true })
	if n != 1 {
		t.Errorf("0-d visits %d", n)
	}
}

func BenchmarkProject(b *testing.B) {
	shape := []int64{10000, 10000, 100}
	chunks := []int64{100, 100, 10}
	sel := []Range{{17, 9000, 3}, {0, 10000, 1}, {5, 95, 2}}
	b.ReportAllocs()
	for b.Loop() {
		p, err := Project(shape, chunks, sel)
		if err != nil {
			b.Fatal(err)
		}
		var total int64
		p.Each(func(c []int64, d []DimProjection) bool {
			total += d[0].Count * d[1].Count * d[2].Count
			return true
		})
		if total == 0 {
			b.Fatal("empty")
		}
	}
}

func BenchmarkChunkKey(b *testing.B) {
	coords := []int64{12, 345, 6}
	b.ReportAllocs()
	for b.Loop() {
		_ = DefaultKeyEncoding.Key("group/array", coords)
	}
}

// Search finds the projection holding each output position, and Slice
// gives exactly the projections in between, on random ranges.
func TestDimProjectionsSearchSlice(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for iter := range 2000 {
		n := 1 + rng.Int64N(60)
		l := 1 + rng.Int64N(9)
		a, b := rng.Int64N(n+1), rng.Int64N(n+1)
		r := Range{min(a, b), max(a, b), 1 + rng.Int64N(12)}
		p := projectDim(r, l).Shift(rng.Int64N(5))
		var all []DimProjection
		for i := range p.Len() {
			all = append(all, p.At(i))
		}
		for out := p.out - 1; out <= p.out+r.Count(); out++ {
			want := int64(len(all))
			for i, dp := range all {
				if dp.OutStart+dp.Count > out {
					want = int64(i)
					break
				}
			}
			if got := p.Search(out); got != want {
				t.Fatalf("%d: %v l=%d: Search(%d) = %d, want %d", iter, r, l, out, got, want)
			}
		}
		i := rng.Int64N(p.Len() + 1)
		j := i + rng.Int64N(p.Len()-i+1)
		s := p.Slice(i, j)
		if s.Len() != j-i {
			t.Fatalf("%d: Slice(%d, %d) has %d", iter, i, j, s.Len())
		}
		for k := range s.Len() {
			if s.At(k) != all[i+k] {
				t.Fatalf("%d: Slice(%d, %d).At(%d) = %+v, want %+v", iter, i, j, k, s.At(k), all[i+k])
			}
		}
	}
}

// Projecting a selection over a billion chunks allocates nothing per
// chunk (issue 12: the per-dimension projection of a [10^12] array with
// [1000] chunks was allocated whole before any size check).
func TestProjectHugeIsLazy(t *testing.T) {
	shape, chunks := []int64{1e12, 1 << 60}, []int64{1000, 1}
	sel := []Range{{0, 1e12, 1}, {0, 1 << 60, 1000}}
	allocs := testing.AllocsPerRun(10, func() {
		p, err := Project(shape, chunks, sel)
		if err != nil {
			t.Fatal(err)
		}
		if p.Dims[0].Len() != 1e9 || p.NumChunks() <= 0 {
			t.Fatal("wrong chunk count")
		}
	})
	if allocs > 5 {
		t.Fatalf("Project allocated %v times", allocs)
	}
	p, _ := Project(shape, chunks, sel)
	if got := p.Dims[0].At(123456789); got.Chunk != 123456789 || got.Count != 1000 {
		t.Fatalf("At = %+v", got)
	}
	if p.NumChunks() != math.MaxInt64 {
		t.Fatalf("NumChunks = %d, want saturated", p.NumChunks())
	}
}

// Iterate visits what Each visits, and resumes where it stopped.
func TestIterateMatchesEach(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for iter := range 300 {
		p, err := Project(randomSelection(rng))
		if err != nil {
			t.Fatal(err)
		}
		var want, got [][]int64
		var wantDims, gotDims [][]DimProjection
		p.Each(func(c []int64, d []DimProjection) bool {
			want, wantDims = append(want, clone(c)), append(wantDims, clone(d))
			return true
		})
		it := p.Iterate()
		for c, d, ok := it.Next(); ok; c, d, ok = it.Next() {
			got, gotDims = append(got, clone(c)), append(gotDims, clone(d))
		}
		if _, _, ok := it.Next(); ok {
			t.Fatal("Next after the end")
		}
		if !reflect.DeepEqual(want, got) || !reflect.DeepEqual(wantDims, gotDims) {
			t.Fatalf("%d: Each %v, Iterate %v", iter, want, got)
		}
	}
}

func clone[T any](s []T) []T { return append([]T(nil), s...) }
