package zarr

import "github.com/zarrgate/zarrgate/errs"

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
// of one DimProjection per dimension.
type Projection struct {
	// Shape is the shape of the selection's output.
	Shape []int64
	// Dims lists, per dimension, the touched chunks in increasing order.
	Dims [][]DimProjection
}

// Project validates a selection against an array's shape and chunk shape
// and projects it onto the chunk grid. A selection with the wrong number of
// dimensions or a step below 1 is errs.InvalidArgument, one outside the
// array errs.OutOfRange; both name the dimension. A 0-d array has one
// chunk and an empty selection.
func Project(shape, chunks []int64, sel []Range) (*Projection, error) {
	if len(sel) != len(shape) || len(chunks) != len(shape) {
		return nil, errs.New(errs.InvalidArgument, "selection: has %d dimensions, the array %d", len(sel), len(shape))
	}
	p := &Projection{Shape: make([]int64, len(sel)), Dims: make([][]DimProjection, len(sel))}
	for d, r := range sel {
		if r.Step <= 0 {
			return nil, errs.New(errs.InvalidArgument, "selection dimension %d: step %d must be at least 1", d, r.Step)
		}
		if r.Start < 0 || r.Stop > shape[d] || r.Start > r.Stop {
			return nil, errs.New(errs.OutOfRange, "selection dimension %d: [%d, %d) is outside [0, %d)", d, r.Start, r.Stop, shape[d])
		}
		if chunks[d] <= 0 {
			return nil, errs.New(errs.InvalidArgument, "chunk shape dimension %d: %d must be positive", d, chunks[d])
		}
		p.Shape[d] = r.Count()
		p.Dims[d] = projectDim(r, chunks[d])
	}
	return p, nil
}

func projectDim(r Range, l int64) []DimProjection {
	n := r.Count()
	if n == 0 {
		return nil
	}
	last := r.Start + (n-1)*r.Step
	if r.Step >= l {
		// At most one element per chunk: walk the elements.
		out := make([]DimProjection, n)
		for k := range n {
			e := r.Start + k*r.Step
			c := e / l
			off := e - c*l
			out[k] = DimProjection{Chunk: c, Start: off, Stop: off + 1, Step: r.Step, OutStart: k, Count: 1}
		}
		return out
	}
	c0, c1 := r.Start/l, last/l
	out := make([]DimProjection, 0, c1-c0+1)
	for c := c0; c <= c1; c++ {
		lo := c * l
		first := r.Start
		if lo > first {
			first += (lo - first + r.Step - 1) / r.Step * r.Step
		}
		hi := min(lo+l-1, last)
		if first > hi {
			continue
		}
		out = append(out, DimProjection{
			Chunk: c, Start: first - lo, Stop: hi - lo + 1, Step: r.Step,
			OutStart: (first - r.Start) / r.Step, Count: (hi-first)/r.Step + 1,
		})
	}
	return out
}

// NumChunks is the number of chunks the selection touches.
func (p *Projection) NumChunks() int64 {
	n := int64(1)
	for _, d := range p.Dims {
		n *= int64(len(d))
	}
	return n
}

// Each calls fn for every touched chunk, in C order of chunk coordinates,
// with the chunk's grid coordinates and its projection per dimension, until
// fn returns false. The slices are reused between calls: fn must copy what
// it keeps.
func (p *Projection) Each(fn func(coords []int64, dims []DimProjection) bool) {
	nd := len(p.Dims)
	for _, d := range p.Dims {
		if len(d) == 0 {
			return
		}
	}
	idx := make([]int, nd)
	coords := make([]int64, nd)
	dims := make([]DimProjection, nd)
	for i := range nd {
		dims[i] = p.Dims[i][0]
		coords[i] = dims[i].Chunk
	}
	for {
		if !fn(coords, dims) {
			return
		}
		i := nd - 1
		for ; i >= 0; i-- {
			idx[i]++
			if idx[i] < len(p.Dims[i]) {
				break
			}
			idx[i] = 0
		}
		if i < 0 {
			return
		}
		for j := i; j < nd; j++ {
			dims[j] = p.Dims[j][idx[j]]
			coords[j] = dims[j].Chunk
		}
	}
}
