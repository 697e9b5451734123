package codec

import (
	"context"

	"github.com/zarrgate/zarrgate/errs"
)

// Selection is a strided box of one chunk, in chunk-local element
// coordinates: per dimension d, the Count[d] indices Start[d],
// Start[d]+Step[d], ... A zero Selection (no dimensions) is the whole
// chunk.
type Selection struct {
	Start, Step, Count []int64
}

// Whole reports whether s is the whole chunk, by its zero value.
func (s Selection) Whole() bool { return len(s.Start) == 0 }

// Elems is the number of elements s selects (for a non-whole s).
func (s Selection) Elems() int64 {
	n := int64(1)
	for _, c := range s.Count {
		n *= c
	}
	return n
}

// SelectDecoder is an Engine that can answer a decode batch with only part
// of each chunk: DecodeSelected decodes encoded[i] and returns, for a
// non-whole sel[i], only the elements it selects, packed in C order
// (Chunk.Data of Elems()·element size bytes); a whole sel[i] returns the
// whole chunk. Fixed-size data types only. Engines whose batches run
// elsewhere implement it so that partial reads move fewer bytes (the
// remote engine); codecsvc.Local implements it so that a chunk that is
// zstd over its elements is decoded only as far as the selection needs.
type SelectDecoder interface {
	DecodeSelected(ctx context.Context, spec *BatchSpec, encoded [][]byte, sel []Selection) ([]Chunk, error)
}

// CheckSelection checks that s selects at least one element of every
// dimension within a chunk of shape (InvalidArgument saying what does not
// fit), and returns the bytes its elements take at elem bytes each.
func CheckSelection(s Selection, shape []int64, elem int) (int64, error) {
	if s.Whole() {
		n := int64(elem)
		for _, d := range shape {
			n *= d
		}
		return n, nil
	}
	if len(s.Start) != len(shape) || len(s.Step) != len(shape) || len(s.Count) != len(shape) {
		return 0, errs.New(errs.InvalidArgument, "selection of %d dimensions for a chunk of %d", len(s.Start), len(shape))
	}
	n := int64(elem)
	for d, ext := range shape {
		start, step, count := s.Start[d], s.Step[d], s.Count[d]
		if start < 0 || step < 1 || count < 1 || start >= ext || (count-1) > (ext-1-start)/step {
			return 0, errs.New(errs.InvalidArgument, "selection dimension %d: start %d, step %d, count %d do not fit an extent of %d", d, start, step, count, ext)
		}
		n *= count // count <= ext: no overflow beyond the chunk's own size
	}
	return n, nil
}

// Pack copies the elements of chunk (shape, elem bytes each, C order) that
// s selects into dst, packed in C order. s must have passed
// CheckSelection, and dst hold its bytes.
func Pack(dst, chunk []byte, shape []int64, elem int, s Selection) {
	nd := len(shape)
	if nd == 0 {
		copy(dst, chunk[:elem])
		return
	}
	// strides in bytes of the chunk
	stride := make([]int64, nd)
	st := int64(elem)
	for d := nd - 1; d >= 0; d-- {
		stride[d] = st
		st *= shape[d]
	}
	last := nd - 1
	rowContig := s.Step[last] == 1
	rowBytes := s.Count[last] * int64(elem)
	k := make([]int64, nd) // index within the selection, last dimension not used
	var out int64
	for {
		off := int64(0)
		for d := range last {
			off += (s.Start[d] + k[d]*s.Step[d]) * stride[d]
		}
		off += s.Start[last] * stride[last]
		if rowContig {
			copy(dst[out:out+rowBytes], chunk[off:off+rowBytes])
			out += rowBytes
		} else {
			step := s.Step[last] * stride[last]
			for range s.Count[last] {
				copy(dst[out:out+int64(elem)], chunk[off:off+int64(elem)])
				out += int64(elem)
				off += step
			}
		}
		d := last - 1
		for ; d >= 0; d-- {
			k[d]++
			if k[d] < s.Count[d] {
				break
			}
			k[d] = 0
		}
		if d < 0 {
			return
		}
	}
}
