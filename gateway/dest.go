package gateway

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/shm"
	"github.com/zarrgate/zarrgate/zarr"
)

// A gateway keeps the mappings of the last maxIdleDests destinations for
// destIdleFor after their reads (shm.DestCache): a client reading into
// the same buffer again saves mapping it (a tenth of the read); its
// memory is freed at most destIdleFor after it closes the buffer.
const (
	maxIdleDests = 2
	destIdleFor  = 5 * time.Second
)

// Destination is a client's memory that one read writes its slab into, in
// place: the dense slab, C order, little-endian (a shm destination the
// client made and named). As the read's BlockSink it copies each block's
// rows straight to where they go, in the workers, and keeps the block
// (nothing is passed on to emit); raw chunks read whole go there with no
// copy at all (Rows: one read into every row's place). Which client, and
// how it names its memory, is the transport's business (ArrayService's
// ReadSlabShared).
type Destination struct {
	m       *shm.DestMap
	shape   []int64
	elem    int64
	strides []int64 // bytes, per dimension
	written atomic.Int64
}

// OpenDestination checks and maps the destination descriptor fd of process
// pid names, with size bytes of data and token, for the slab info
// describes. It refuses (an error saying why, for the client; nothing is
// written) when shared memory is off, the data type has no fixed size,
// the slab does not fit in size bytes, or the memory is not the client's
// sealed memory file holding the token (shm.OpenDest).
func (g *Gateway) OpenDestination(info SlabInfo, pid, fd int, size int64, token []byte) (*Destination, error) {
	return g.openClientMemory("destination", "written in place", info, pid, fd, size, token)
}

// openClientMemory is OpenDestination, also for a write's source (what
// names the use in refusals: "destination" or "source"; how, what the
// slab cannot be without a fixed size).
func (g *Gateway) openClientMemory(what, how string, info SlabInfo, pid, fd int, size int64, token []byte) (*Destination, error) {
	if !g.cfg.SharedMemory || !shm.DestSupported {
		return nil, errs.New(errs.FailedPrecondition, "shared memory is off on this gateway")
	}
	elem := int64(info.DataType.Size)
	if elem <= 0 {
		return nil, errs.New(errs.FailedPrecondition, "%s has no fixed size: its slab cannot be %s", info.DataType.Name, how)
	}
	need := elem
	for _, s := range info.Shape {
		n, ok := zarr.MulChecked(need, s)
		if !ok || s < 0 || n > shm.MaxDestBytes {
			return nil, errs.New(errs.FailedPrecondition, "slab %v of %d-byte elements is too large for a %s", info.Shape, elem, what)
		}
		need = n
	}
	if size < need {
		return nil, errs.New(errs.FailedPrecondition, "%s of %d bytes, the slab needs %d", what, size, need)
	}
	m, err := g.dests.OpenDest(pid, fd, need, token)
	if err != nil {
		return nil, errs.Wrap(errs.FailedPrecondition, err, "%s", what)
	}
	d := &Destination{m: m, shape: clone(info.Shape), elem: elem, strides: make([]int64, len(info.Shape))}
	acc := elem
	for i := len(d.shape) - 1; i >= 0; i-- {
		d.strides[i] = acc
		acc *= d.shape[i]
	}
	return d, nil
}

// Written is the number of elements written so far.
func (d *Destination) Written() int64 { return d.written.Load() }

// Close unmaps the destination; the client's memory stays.
func (d *Destination) Close() error { return d.m.Close() }

// rows calls fn with the place of each run of the box (origin, shape)
// that is contiguous in the slab, in C order: the box's rows, joined over
// the trailing dimensions it spans whole. The box must lie in the slab.
func (d *Destination) rows(origin, shape []int64, fn func([]byte)) {
	nd := len(shape)
	if product(shape) == 0 {
		return
	}
	run, runBytes := nd, d.elem
	for run > 0 {
		runBytes *= shape[run-1]
		run--
		if shape[run] != d.shape[run] {
			break
		}
	}
	idx := make([]int64, nd)
	for {
		off := int64(0)
		for i := range nd {
			off += (origin[i] + idx[i]) * d.strides[i]
		}
		fn(d.m.Data[off : off+runBytes])
		i := run - 1
		for ; i >= 0; i-- {
			idx[i]++
			if idx[i] < shape[i] {
				break
			}
			idx[i] = 0
		}
		if i < 0 {
			return
		}
	}
}

// inside checks that a box lies in the slab: the read's own blocks always
// do, but a wrong one must not write out of place.
func (d *Destination) inside(origin, shape []int64) error {
	if len(origin) != len(d.shape) || len(shape) != len(d.shape) {
		return errs.New(errs.Internal, "destination: block of rank %d in a slab of rank %d", len(shape), len(d.shape))
	}
	for i := range shape {
		if origin[i] < 0 || shape[i] < 0 || origin[i] > d.shape[i] || shape[i] > d.shape[i]-origin[i] {
			return errs.New(errs.Internal, "destination: block at %v shape %v outside the slab %v", origin, shape, d.shape)
		}
	}
	return nil
}

// Place implements BlockSink: it copies b's rows into place and frees b;
// nothing is pushed on.
func (d *Destination) Place(_ context.Context, b Block, _ func(Block) error) error {
	defer b.free()
	if err := d.inside(b.Origin, b.Shape); err != nil {
		return err
	}
	n := product(b.Shape)
	if b.Placed || b.Offsets != nil || int64(len(b.Data)) != n*d.elem {
		return errs.New(errs.Internal, "destination: block at %v has %d bytes, want %d", b.Origin, len(b.Data), n*d.elem)
	}
	src := b.Data
	d.rows(b.Origin, b.Shape, func(dst []byte) {
		src = src[copy(dst, src):]
	})
	d.written.Add(n)
	return nil
}

// Alloc implements BlockSink: whole chunks go through Rows instead.
func (d *Destination) Alloc(context.Context, int64) ([]byte, func(*Block), error) {
	return nil, nil, nil
}

// Rows implements RowSink: the places of the box's rows in the slab, for
// a whole raw chunk to be read straight into; done counts them written.
func (d *Destination) Rows(origin, shape []int64, vecs [][]byte) ([][]byte, func(), error) {
	if err := d.inside(origin, shape); err != nil {
		return nil, nil, err
	}
	d.rows(origin, shape, func(dst []byte) { vecs = append(vecs, dst) })
	n := product(shape)
	return vecs, func() { d.written.Add(n) }, nil
}

// RowSink is a BlockSink whose memory takes the rows of a whole raw chunk
// where they go (a Destination): Rows returns the places of the box's
// rows, in C order, appended to vecs, for the chunk's stored bytes to be
// read into, and done, to call once they are; or no places (nil) if it
// takes no rows now.
type RowSink interface {
	BlockSink
	Rows(origin, shape []int64, vecs [][]byte) (places [][]byte, done func(), err error)
}

// rowLists are RowSink.Rows' lists, reused.
var rowLists = sync.Pool{New: func() any { return new([][]byte) }}
