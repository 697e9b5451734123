package zarr

// Range is a hyperslab along one dimension: the elements Start, Start+Step,
// Start+2*Step, ... below Stop. 0 <= Start <= Stop <= the dimension's
// length, Step >= 1.
type Range struct {
	Start, Stop, Step int64
}

// Count is the number of elements the range selects.
func (r Range) Count() int64 {
	if r.Stop <= r.Start || r.Step <= 0 {
		return 0
	}
	return (r.Stop - r.Start + r.Step - 1) / r.Step
}

// FullSelection selects every element of an array of the given shape.
func FullSelection(shape []int64) []Range {
	sel := make([]Range, len(shape))
	for i, n := range shape {
		sel[i] = Range{0, n, 1}
	}
	return sel
}

// DimProjection is the part of a selection along one dimension that falls in
// one chunk: the chunk-relative elements Start, Start+Step, ... below Stop
// (Count of them) go to output positions OutStart, OutStart+1, ... along
// that dimension.
type DimProjection struct {
	Chunk             int64
	Start, Stop, Step int64
	OutStart, Count   int64
}

// Projection is a selection projected onto a regular chunk grid. The
// chunks it touches are the cartesian product of Dims: every combination
// of one DimProjection per dimension. Nothing is allocated per chunk: each
// dimension's projections are computed when asked for, so projecting a
// selection over a billion chunks costs as little as over one.
type Projection struct {
	// Shape is the shape of the selection's output.
	Shape []int64
	// Dims lists, per dimension, the touched chunks in increasing order.
	Dims []DimProjections
}

// DimProjections are the projections of one dimension's range onto the
// chunk grid, in increasing chunk (and output) order, computed on demand.
type DimProjections struct {
	r Range
	l int64 // chunk length
	n int64 // number of projections
	// perElement: the step is at least the chunk length, so every
	// projection holds one element (and chunks may be skipped).
	perElement bool
	c0         int64 // first chunk, when !perElement
	// out is added to every projection's OutStart.
	out int64
	// i0 is the index of the first projection in the whole range's list
	// (non-zero for a Slice).
	i0 int64
}

// Project validates a selection against an array's shape and chunk shape
// and projects it onto the chunk grid. A selection with the wrong number of
// dimensions or a step below 1 is ErrInvalid, one outside the
// array ErrOutOfRange; both name the dimension. A 0-d array has one
// chunk and an empty selection.
func Project(shape, chunks []int64, sel []Range) (*Projection, error) {
	if len(sel) != len(shape) || len(chunks) != len(shape) {
		return nil, newError(ErrInvalid, "selection: has %d dimensions, the array %d", len(sel), len(shape))
	}
	p := &Projection{Shape: make([]int64, len(sel)), Dims: make([]DimProjections, len(sel))}
	for d, r := range sel {
		if r.Step <= 0 {
			return nil, newError(ErrInvalid, "selection dimension %d: step %d must be at least 1", d, r.Step)
		}
		if r.Start < 0 || r.Stop > shape[d] || r.Start > r.Stop {
			return nil, newError(ErrOutOfRange, "selection dimension %d: [%d, %d) is outside [0, %d)", d, r.Start, r.Stop, shape[d])
		}
		if chunks[d] <= 0 {
			return nil, newError(ErrInvalid, "chunk shape dimension %d: %d must be positive", d, chunks[d])
		}
		p.Shape[d] = r.Count()
		p.Dims[d] = projectDim(r, chunks[d])
	}
	return p, nil
}

func projectDim(r Range, l int64) DimProjections {
	n := r.Count()
	p := DimProjections{r: r, l: l}
	if n == 0 {
		return p
	}
	if r.Step >= l {
		p.perElement, p.n = true, n
		return p
	}
	// A step below the chunk length touches every chunk from the first
	// element's to the last's.
	last := r.Start + (n-1)*r.Step
	p.c0 = r.Start / l
	p.n = last/l - p.c0 + 1
	return p
}

// Len is the number of chunks touched along the dimension.
func (p DimProjections) Len() int64 { return p.n }

// At returns the i-th projection, 0 <= i < Len().
func (p DimProjections) At(i int64) DimProjection {
	r, l := p.r, p.l
	i += p.i0
	if p.perElement {
		e := r.Start + i*r.Step
		c := e / l
		off := e - c*l
		return DimProjection{Chunk: c, Start: off, Stop: off + 1, Step: r.Step, OutStart: i + p.out, Count: 1}
	}
	last := r.Start + (r.Count()-1)*r.Step
	c := p.c0 + i
	lo := c * l
	first := r.Start
	if lo > first {
		first += (lo - first + r.Step - 1) / r.Step * r.Step
	}
	hi := min(lo+l-1, last)
	return DimProjection{
		Chunk: c, Start: first - lo, Stop: hi - lo + 1, Step: r.Step,
		OutStart: (first-r.Start)/r.Step + p.out, Count: (hi-first)/r.Step + 1,
	}
}

// Search returns the index of the first projection whose output positions
// reach past out (OutStart+Count > out): the one holding output position
// out, or Len() if none does.
func (p DimProjections) Search(out int64) int64 {
	k := out - p.out // position in the range's own output
	var i int64
	switch {
	case k < 0:
		i = 0
	case k >= p.r.Count():
		i = p.i0 + p.n
	case p.perElement:
		i = k
	default:
		i = (p.r.Start+k*p.r.Step)/p.l - p.c0
	}
	return min(max(i-p.i0, 0), p.n)
}

// Shift returns the projections with off added to every OutStart.
func (p DimProjections) Shift(off int64) DimProjections {
	p.out += off
	return p
}

// NumChunks is the number of chunks the selection touches, or
// math.MaxInt64 if that overflows.
func (p *Projection) NumChunks() int64 {
	n := make([]int64, len(p.Dims))
	for i, d := range p.Dims {
		n[i] = d.Len()
	}
	return SaturatingProduct(n)
}

// Each calls fn for every touched chunk, in C order of chunk coordinates,
// with the chunk's grid coordinates and its projection per dimension, until
// fn returns false. The slices are reused between calls: fn must copy what
// it keeps.
func (p *Projection) Each(fn func(coords []int64, dims []DimProjection) bool) {
	EachCombination(p.Dims, fn)
}

// EachCombination calls fn with one projection of each dimension's list
// for every combination, in C order, with the chunk coordinates they make,
// until fn returns false. The slices are reused between calls.
func EachCombination(lists []DimProjections, fn func(coords []int64, dims []DimProjection) bool) {
	it := (&Projection{Dims: lists}).Iterate()
	for coords, dims, ok := it.Next(); ok; coords, dims, ok = it.Next() {
		if !fn(coords, dims) {
			return
		}
	}
}

// Slice returns the projections i..j-1 (their output positions
// unchanged).
func (p DimProjections) Slice(i, j int64) DimProjections {
	if i < 0 || j > p.n || i > j {
		panic("zarr: DimProjections.Slice out of range")
	}
	p.i0 += i
	p.n = j - i
	return p
}

// Iterator walks the chunks a projection touches in C order, like Each,
// but can stop and resume: for callers that take them in batches.
type Iterator struct {
	lists  []DimProjections
	idx    []int64
	coords []int64
	dims   []DimProjection
	state  int8 // 0 before the first, 1 running, 2 done
}

// Iterate returns an iterator over p's chunks.
func (p *Projection) Iterate() *Iterator {
	nd := len(p.Dims)
	return &Iterator{lists: p.Dims, idx: make([]int64, nd), coords: make([]int64, nd), dims: make([]DimProjection, nd)}
}

// Next advances to the next chunk and returns its coordinates and
// projections (reused by the following call), or false when done.
func (it *Iterator) Next() ([]int64, []DimProjection, bool) {
	nd := len(it.lists)
	switch it.state {
	case 2:
		return nil, nil, false
	case 0:
		for _, d := range it.lists {
			if d.Len() == 0 {
				it.state = 2
				return nil, nil, false
			}
		}
		for i := range nd {
			it.dims[i] = it.lists[i].At(0)
			it.coords[i] = it.dims[i].Chunk
		}
		it.state = 1
		return it.coords, it.dims, true
	}
	i := nd - 1
	for ; i >= 0; i-- {
		it.idx[i]++
		if it.idx[i] < it.lists[i].Len() {
			break
		}
		it.idx[i] = 0
	}
	if i < 0 {
		it.state = 2
		return nil, nil, false
	}
	for j := i; j < nd; j++ {
		it.dims[j] = it.lists[j].At(it.idx[j])
		it.coords[j] = it.dims[j].Chunk
	}
	return it.coords, it.dims, true
}
