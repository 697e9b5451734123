package codecsvc

import (
	"encoding/binary"
	"encoding/json"

	"github.com/zarrgate/zarrgate/errs"
)

func init() { Register("transpose", newTranspose) }

// transpose is the v3 transpose codec: encoded dimension i is decoded
// dimension order[i].
type transpose struct{ order, inverse []int }

func newTranspose(cfg json.RawMessage, in ChunkSpec) (any, error) {
	var c struct {
		Order json.RawMessage `json:"order"`
	}
	if err := configOf(cfg, &c); err != nil {
		return nil, err
	}
	nd := len(in.Shape)
	var order []int
	var name string
	switch {
	case json.Unmarshal(c.Order, &order) == nil:
	// "C" and "F" predate the accepted specification; early zarr-python
	// versions wrote them, so they are still read.
	case json.Unmarshal(c.Order, &name) == nil && name == "C":
		order = identity(nd)
	case json.Unmarshal(c.Order, &name) == nil && name == "F":
		order = make([]int, nd)
		for i := range order {
			order[i] = nd - 1 - i
		}
	default:
		return nil, errs.New(errs.InvalidArgument, "configuration.order: want a permutation of 0..%d", nd-1)
	}
	if len(order) != nd {
		return nil, errs.New(errs.InvalidArgument, "configuration.order %v: has %d entries, the chunk %d dimensions", order, len(order), nd)
	}
	inverse := make([]int, nd)
	seen := make([]bool, nd)
	for i, o := range order {
		if o < 0 || o >= nd || seen[o] {
			return nil, errs.New(errs.InvalidArgument, "configuration.order %v is not a permutation of 0..%d", order, nd-1)
		}
		seen[o] = true
		inverse[o] = i
	}
	return transpose{order: order, inverse: inverse}, nil
}

func identity(n int) []int {
	o := make([]int, n)
	for i := range o {
		o[i] = i
	}
	return o
}

func permuted(shape, order []int) []int {
	out := make([]int, len(order))
	for i, o := range order {
		out[i] = shape[o]
	}
	return out
}

func (t transpose) Resolve(in ChunkSpec) (ChunkSpec, error) {
	out := in
	out.Shape = permuted(in.Shape, t.order)
	return out, nil
}

func (t transpose) Encode(c Chunk, in ChunkSpec) (Chunk, error) {
	return reorder(c, in, in.Shape, t.order)
}

func (t transpose) Decode(c Chunk, in ChunkSpec) (Chunk, error) {
	return reorder(c, in, permuted(in.Shape, t.order), t.inverse)
}

// reorder returns c, an array of the given shape, with its dimensions
// permuted: result dimension i is dimension order[i] of c.
func reorder(c Chunk, in ChunkSpec, shape, order []int) (Chunk, error) {
	n := in.Elements()
	if in.DataType.VariableLength() {
		if len(c.Offsets) != n+1 {
			return Chunk{}, errs.New(errs.DataLoss, "transpose: %d offsets for %d elements", len(c.Offsets), n)
		}
		// Permute the element numbers, then gather the elements.
		ids := make([]byte, 4*n)
		for i := range n {
			binary.LittleEndian.PutUint32(ids[4*i:], uint32(i))
		}
		perm := make([]byte, 4*n)
		permute(perm, ids, shape, order, 4)
		out := Chunk{Data: make([]byte, 0, len(c.Data)), Offsets: make([]int64, 1, n+1)}
		for j := range n {
			s := binary.LittleEndian.Uint32(perm[4*j:])
			out.Data = append(out.Data, c.Data[c.Offsets[s]:c.Offsets[s+1]]...)
			out.Offsets = append(out.Offsets, int64(len(out.Data)))
		}
		return out, nil
	}
	e := in.DataType.Size
	if len(c.Data) != n*e {
		return Chunk{}, errs.New(errs.DataLoss, "transpose: %d bytes for %d elements of %s", len(c.Data), n, in.DataType)
	}
	out := make([]byte, len(c.Data))
	permute(out, c.Data, shape, order, e)
	return Chunk{Data: out}, nil
}

// tile is the edge of the square blocks a strided transpose copies, so
// that both the rows it reads and the rows it writes stay in cache.
const tile = 32

// permute writes into dst the C-order array src of the given shape and
// element size e with its dimensions permuted: dst dimension i is src
// dimension order[i].
func permute(dst, src []byte, shape, order []int, e int) {
	nd := len(order)
	stride := make([]int, nd) // of src, in elements
	acc := 1
	for d := nd - 1; d >= 0; d-- {
		stride[d] = acc
		acc *= shape[d]
	}
	if acc == 0 {
		return
	}
	// The dst dimensions with their src strides, without unit dimensions
	// and with neighbours that are contiguous in src merged: a transpose
	// of any rank is then usually a 2-D or 3-D problem.
	dims := make([]axis, 0, nd)
	for _, o := range order {
		if shape[o] == 1 {
			continue
		}
		if k := len(dims) - 1; k >= 0 && dims[k].stride == stride[o]*shape[o] {
			dims[k] = axis{dims[k].size * shape[o], stride[o]}
			continue
		}
		dims = append(dims, axis{shape[o], stride[o]})
	}
	switch {
	case len(dims) == 0 || len(dims) == 1 && dims[0].stride == 1:
		copy(dst, src)
		return
	case len(dims) == 1:
		strided(dst, src, 0, dims[0].size, dims[0].stride*e, e)
		return
	}
	m := len(dims)
	rows, cols := dims[m-2], dims[m-1]
	plane := rows.size * cols.size
	outer := dims[:m-2]
	k := make([]int, len(outer))
	base := 0
	for dbase := 0; dbase < len(dst)/e; dbase += plane {
		copy2D(dst[dbase*e:(dbase+plane)*e], src, base, rows, cols, e)
		for d := len(outer) - 1; d >= 0; d-- {
			k[d]++
			base += outer[d].stride
			if k[d] < outer[d].size {
				break
			}
			base -= k[d] * outer[d].stride
			k[d] = 0
		}
	}
}

// axis is a dimension of a strided view: its size and its stride in
// elements.
type axis struct{ size, stride int }

// copy2D writes into dst (rows.size x cols.size, C order) the elements of
// src at base + i*rows.stride + j*cols.stride.
func copy2D(dst, src []byte, base int, rows, cols axis, e int) {
	r, c := rows.size, cols.size
	if cols.stride == 1 {
		for i := range r {
			s := (base + i*rows.stride) * e
			copy(dst[i*c*e:(i+1)*c*e], src[s:s+c*e])
		}
		return
	}
	for i0 := 0; i0 < r; i0 += tile {
		i1 := min(i0+tile, r)
		for j0 := 0; j0 < c; j0 += tile {
			n := min(tile, c-j0)
			for i := i0; i < i1; i++ {
				d := (i*c + j0) * e
				strided(dst[d:d+n*e], src, (base+i*rows.stride+j0*cols.stride)*e, n, cols.stride*e, e)
			}
		}
	}
}

// strided copies n elements of size e from src, starting at byte off and
// step bytes apart, to the start of dst.
func strided(dst, src []byte, off, n, step, e int) {
	dst = dst[:n*e]
	switch e {
	case 1:
		for j := range dst {
			dst[j] = src[off]
			off += step
		}
	case 2:
		for j := 0; j < len(dst); j += 2 {
			binary.LittleEndian.PutUint16(dst[j:], binary.LittleEndian.Uint16(src[off:]))
			off += step
		}
	case 4:
		for j := 0; j < len(dst); j += 4 {
			binary.LittleEndian.PutUint32(dst[j:], binary.LittleEndian.Uint32(src[off:]))
			off += step
		}
	case 8:
		for j := 0; j < len(dst); j += 8 {
			binary.LittleEndian.PutUint64(dst[j:], binary.LittleEndian.Uint64(src[off:]))
			off += step
		}
	default:
		for j := 0; j < len(dst); j += e {
			copy(dst[j:j+e], src[off:off+e])
			off += step
		}
	}
}
