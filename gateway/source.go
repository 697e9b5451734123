package gateway

import (
	"context"
	"fmt"
	"io"

	"github.com/zarrgate/zarrgate/zarr"
)

// sourceBand is about how many bytes of a shared source one block of a
// WriteSlabShared covers: whole rows of the slab's first dimension, at
// least one. The blocks are views of the client's memory, not copies, so
// the size only sets how often the write's loop takes the next one.
const sourceBand = 1 << 20

// WriteSlabShared writes the slab sel of the array at path from a client's
// memory on this host: the slab's elements, dense, C order, little-endian,
// in the memory file descriptor fd of process pid names (size bytes of
// data, the token in its first page), checked and mapped as a read's
// destination is (OpenDestination). The gateway reads the elements from
// there instead of receiving them; the write itself is WriteSlab's, with
// its checks, memory bound and statuses.
//
// refused is set, and nothing written, when the gateway cannot use the
// memory (shared memory off, a data type without a fixed size, memory too
// small, not the client's sealed memory file): the client then sends the
// slab with WriteSlab. err is the write's error (an unknown array, a bad
// selection, the store's).
//
// The client may change its memory while the write runs: each chunk gets
// the elements as they were when it was copied out, as if the client had
// sent them then. A memory file sealed against shrinking cannot fault the
// gateway's reads.
func (g *Gateway) WriteSlabShared(ctx context.Context, path string, sel []zarr.Range, pid, fd int, size int64, token []byte) (st WriteStats, refused error, err error) {
	n, err := g.array(ctx, path)
	if err != nil {
		return WriteStats{}, nil, err
	}
	l, err := g.layout(n)
	if err != nil {
		return WriteStats{}, nil, err
	}
	a := n.array
	if sel == nil {
		sel = zarr.FullSelection(a.Shape)
	}
	proj, err := zarr.Project(a.Shape, l.objectShape(), sel)
	if err != nil {
		return WriteStats{}, nil, fmt.Errorf("write %q: %w", path, err)
	}
	if err := g.checkSlabSize(path, a, proj.Shape); err != nil {
		return WriteStats{}, nil, err
	}
	d, refused := g.openClientMemory("source", "read from shared memory", SlabInfo{Shape: proj.Shape, DataType: a.DataType, ByteOrder: LittleEndian}, pid, fd, size, token)
	if refused != nil {
		return WriteStats{}, refused, nil
	}
	defer d.Close()
	// WriteSlab copies every block's elements out (blocks without a
	// release are never kept) and returns only once its flushes are done,
	// so the mapping outlives every use of it.
	st, err = g.WriteSlab(ctx, path, sel, sourceBlocks(d.m.Data, proj.Shape, int64(a.DataType.Size)))
	return st, nil, err
}

// sourceBlocks cuts data, the dense slab of the given shape and element
// size, into blocks of whole rows of its first dimension, about
// sourceBand bytes each, aliasing data.
func sourceBlocks(data []byte, shape []int64, elem int64) func() (Block, error) {
	nd := len(shape)
	if nd == 0 {
		done := false
		return func() (Block, error) {
			if done {
				return Block{}, io.EOF
			}
			done = true
			return Block{Origin: []int64{}, Shape: []int64{}, Data: data[:elem]}, nil
		}
	}
	row := elem // bytes of one index of the first dimension
	for _, s := range shape[1:] {
		row *= s
	}
	rows := int64(1)
	if row > 0 {
		rows = max(1, sourceBand/row)
	}
	at := int64(0)
	return func() (Block, error) {
		if at >= shape[0] || row == 0 {
			return Block{}, io.EOF
		}
		k := min(rows, shape[0]-at)
		origin, bshape := make([]int64, nd), clone(shape)
		origin[0], bshape[0] = at, k
		b := Block{Origin: origin, Shape: bshape, Data: data[at*row : (at+k)*row]}
		at += k
		return b, nil
	}
}
