package codecsvc

import (
	codecv1 "github.com/zarrgate/zarrgate/gen/zarrgate/codec/v1"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/bufpool"
)

// SelectionsToProto converts the selections of a decode batch for the
// wire (nil: every chunk whole).
func SelectionsToProto(sel []codec.Selection, elem int) []*codecv1.Selection {
	if sel == nil {
		return nil
	}
	out := make([]*codecv1.Selection, len(sel))
	for i, s := range sel {
		p := &codecv1.Selection{ElementSize: uint32(elem)}
		for d := range s.Start {
			start, step := uint64(s.Start[d]), uint64(s.Step[d])
			p.Dims = append(p.Dims, &codecv1.DimSelection{Start: start, Step: step, Stop: start + uint64(s.Count[d]-1)*step + 1})
		}
		out[i] = p
	}
	return out
}

// SelectionsFromProto converts and checks the selections of a decode
// batch of n chunks of spec: none (nil), or one per chunk, each within the
// chunk (codec.CheckSelection) and for a fixed-size data type of the
// element size given. Nothing is allocated before the count is checked.
func SelectionsFromProto(p []*codecv1.Selection, n int, spec *codec.BatchSpec) ([]codec.Selection, error) {
	if len(p) == 0 {
		return nil, nil
	}
	if len(p) != n {
		return nil, errs.New(errs.InvalidArgument, "decode: %d selections for %d chunks", len(p), n)
	}
	if spec.DataType.VariableLength() {
		return nil, errs.New(errs.Unimplemented, "decode: selections of a variable-length data type (%s)", spec.DataType)
	}
	elem := spec.DataType.Size
	out := make([]codec.Selection, n)
	for i, ps := range p {
		if es := ps.GetElementSize(); es != 0 && int64(es) != int64(elem) {
			return nil, errs.New(errs.InvalidArgument, "decode: selection %d: element size %d, the data type's is %d", i, es, elem)
		}
		dims := ps.GetDims()
		if len(dims) == 0 {
			continue // the whole chunk
		}
		if len(dims) != len(spec.Shape) {
			return nil, errs.New(errs.InvalidArgument, "decode: selection %d has %d dimensions, the chunk %d", i, len(dims), len(spec.Shape))
		}
		s := codec.Selection{Start: make([]int64, len(dims)), Step: make([]int64, len(dims)), Count: make([]int64, len(dims))}
		for d, ds := range dims {
			ext := uint64(spec.Shape[d])
			start, stop, step := ds.GetStart(), ds.GetStop(), ds.GetStep()
			if step < 1 || start >= stop || stop > ext {
				return nil, errs.New(errs.InvalidArgument, "decode: selection %d dimension %d: start %d, stop %d, step %d do not select within an extent of %d", i, d, start, stop, step, ext)
			}
			// stop <= ext <= 2^40 (SpecFromProto): no overflow below. A
			// step past the extent selects start alone, as the extent does.
			step = min(step, ext)
			s.Start[d], s.Step[d], s.Count[d] = int64(start), int64(step), int64((stop-start+step-1)/step)
		}
		if _, err := codec.CheckSelection(s, spec.Shape, elem); err != nil {
			return nil, errs.New(errs.InvalidArgument, "decode: selection %d: %v", i, err)
		}
		out[i] = s
	}
	return out, nil
}

// selectChunk returns the part of a decoded chunk of spec that s selects,
// packed in a pooled buffer lent with the result, and hands the whole
// chunk's buffer back; the chunk itself for a whole s.
func selectChunk(ch Chunk, spec *codec.BatchSpec, s codec.Selection) (Chunk, error) {
	if s.Whole() {
		return ch, nil
	}
	elem := spec.DataType.Size
	n, err := codec.CheckSelection(s, spec.Shape, elem)
	if err != nil {
		return Chunk{}, err
	}
	if want := wholeBytes(spec); int64(len(ch.Data)) != want {
		return Chunk{}, errs.New(errs.DataLoss, "decoded chunk has %d bytes, want %d", len(ch.Data), want)
	}
	buf := bufpool.Get(int(n))
	codec.Pack(buf, ch.Data, spec.Shape, elem, s)
	ch.Release()
	return codec.Lend(buf, nil, buf, bufpool.Put), nil
}

func wholeBytes(spec *codec.BatchSpec) int64 {
	n := int64(spec.DataType.Size)
	for _, d := range spec.Shape {
		n *= d
	}
	return n
}
