// Client memory the gateway on this host uses itself: SharedBuffer,
// ReadShared (the gateway writes the slab into it) and WriteShared (it
// reads the slab from it).

package client

import (
	"context"
	"strings"
	"sync"
	"unsafe"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/grpcerr"
	"github.com/zarrgate/zarrgate/internal/shm"
)

// SharedBuffer is memory for large reads from a gateway on this host that
// the gateway writes the slab into itself, each chunk straight to its
// place: one copy of the data instead of two (into a shared segment, then
// out of it), and none by the client. It is a memory file of this process
// (memfd, sealed so that it can neither shrink nor grow), handed to the
// gateway by its descriptor with a random token the gateway must find in
// it; a gateway elsewhere, of another user, or refusing it for any reason
// sends the data as usual, and ReadShared copies it in (InPlace says
// which). Where memory files are not supported (not Linux) it is ordinary
// memory, always filled by copying.
//
// A SharedBuffer holds one read at a time. Its memory is not the garbage
// collector's: Close unmaps it, and slices returned by Bytes or ReadShared
// must not be used after (they would fault).
type SharedBuffer struct {
	dest *shm.Dest // nil: heap memory
	data []byte

	mu      sync.Mutex // one read at a time
	inPlace bool
	refused string
}

// NewSharedBuffer makes a buffer of size bytes.
func NewSharedBuffer(size int64) (*SharedBuffer, error) {
	if size < 0 || size > shm.MaxDestBytes {
		return nil, errs.New(errs.InvalidArgument, "shared buffer of %d bytes: out of range", size)
	}
	if shm.DestSupported {
		d, err := shm.NewDest(size)
		if err != nil {
			return nil, errs.Wrap(errs.ResourceExhausted, err, "shared buffer of %d bytes", size)
		}
		return &SharedBuffer{dest: d, data: d.Data()}, nil
	}
	return &SharedBuffer{data: make([]byte, size)}, nil
}

// Bytes is the buffer's memory, valid until Close.
func (b *SharedBuffer) Bytes() []byte { return b.data }

// InPlace reports whether the gateway wrote the last read's slab into the
// buffer itself and, if not, why (empty if the read did not get as far as
// asking, or was small enough to go another way).
func (b *SharedBuffer) InPlace() (bool, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inPlace, b.refused
}

// Close unmaps the buffer and closes its memory file; a gateway's mapping
// of it ends with its read.
func (b *SharedBuffer) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.data = nil
	if b.dest == nil {
		return nil
	}
	err := b.dest.Close()
	b.dest = nil
	return err
}

// begin starts a call of what ("read" or "write") on the slab sel of a,
// of es-byte elements, with b.mu held: it clears the last call's answer
// and returns the slab's shape and the first bytes of b that hold it.
func (b *SharedBuffer) begin(what string, a *Array, sel Selection, es int64) ([]int64, []byte, error) {
	b.inPlace, b.refused = false, ""
	if b.data == nil {
		return nil, nil, errs.New(errs.FailedPrecondition, "%s %q: the shared buffer is closed", what, a.Path)
	}
	shape := sel.Shape(a.Shape)
	n := product(shape)
	if n > int64(len(b.data))/es {
		return nil, nil, errs.New(errs.InvalidArgument, "%s %q: the slab %v of %d-byte elements does not fit the %d-byte shared buffer", what, a.Path, shape, es, len(b.data))
	}
	return shape, b.data[:n*es], nil
}

// local says why a call on b goes without shared memory, if it must
// (empty: the gateway may use b).
func (b *SharedBuffer) local(a *Array) string {
	switch {
	case b.dest == nil:
		return "shared buffers are ordinary memory on this platform"
	case !a.c.shared.Load():
		return "shared memory is off for this client (WithSharedMemory)"
	}
	return ""
}

// ReadShared reads the slab sel (nil: all) of a into buf, in C order, and
// returns it as elements: a view of buf's first bytes, valid until buf is
// closed or read into again. buf must hold at least the slab. Through
// shared memory (WithSharedMemory, the default on loopback) the gateway
// writes the slab into buf itself; otherwise, or if it refuses, the data
// comes as for ReadInto and is copied in. Concurrent reads into one
// buffer wait for each other.
func ReadShared[T Element](ctx context.Context, a *Array, sel Selection, buf *SharedBuffer) ([]T, error) {
	if err := checkType[T](a); err != nil {
		return nil, err
	}
	buf.mu.Lock()
	defer buf.mu.Unlock()
	var zero T
	es := int64(unsafe.Sizeof(zero))
	shape, out, err := buf.begin("read", a, sel, es)
	if err != nil {
		return nil, err
	}
	n := int64(len(out)) / es
	alloc := func(hdr *SlabHeader) ([]byte, error) {
		if int64(hdr.ElementSize) != es || product(hdr.Shape) != n {
			return nil, errs.New(errs.DataLoss, "read %q: the server sends a slab of shape %v and %d-byte elements, not %v of %T", a.Path, hdr.Shape, hdr.ElementSize, shape, zero)
		}
		return out, nil
	}
	var v []T
	if n > 0 {
		v = unsafe.Slice((*T)(unsafe.Pointer(&out[0])), n)
	}
	if buf.refused = buf.local(a); buf.refused != "" {
		_, _, err := readDense(ctx, a, sel, alloc)
		return v, err
	}
	hdr, _, err := readDenseVia(ctx, a, a.c.arrays, sel, alloc, buf.dest)
	if hdr != nil {
		buf.inPlace, buf.refused = hdr.inPlace, hdr.refused
	}
	return v, err
}

// WriteShared writes the slab sel (nil: all) of a from buf, whose first
// bytes hold the slab's elements as T, dense, in C order (the layout
// ReadShared leaves). Through shared memory (WithSharedMemory, the
// default on loopback) the gateway reads them from buf itself, and only
// the request travels; otherwise, or if the gateway refuses (InPlace says
// why), they are sent as Write sends them. buf must not change during the
// call: the gateway copies each chunk's elements out when it gets to that
// chunk. Concurrent calls on one buffer wait for each other.
func WriteShared[T Element](ctx context.Context, a *Array, sel Selection, buf *SharedBuffer) (WriteStats, error) {
	if err := checkType[T](a); err != nil {
		return WriteStats{}, err
	}
	buf.mu.Lock()
	defer buf.mu.Unlock()
	var zero T
	es := int64(unsafe.Sizeof(zero))
	shape, data, err := buf.begin("write", a, sel, es)
	if err != nil {
		return WriteStats{}, err
	}
	send := func() (WriteStats, error) {
		return a.writeBlocks(ctx, sel, bands(shape, data, int(es), 1<<20), true)
	}
	if buf.refused = buf.local(a); buf.refused != "" {
		return send()
	}
	d := buf.dest
	resp, err := a.c.arrays.WriteSlabShared(ctx, &gatewayv1.WriteSlabSharedRequest{Path: a.Path, Selection: sel.proto(),
		Source: &gatewayv1.SharedDestination{Pid: uint32(d.Pid), Fd: uint32(d.Fd), Size: uint64(len(d.Data())), Token: d.Token}}, noRetry)
	if st := status.Convert(err); err != nil && st.Code() == codes.Unimplemented && strings.Contains(st.Message(), "WriteSlabShared") {
		buf.refused = "the gateway does not read slabs from shared memory (an older version)"
		return send()
	}
	if err != nil {
		return WriteStats{}, grpcerr.FromStatus(err)
	}
	if !resp.GetSource().GetAccepted() {
		buf.refused = resp.GetSource().GetReason()
		return send()
	}
	buf.inPlace = true
	return WriteStats{Chunks: int64(resp.GetChunksWritten()), Bytes: int64(resp.GetBytesWritten())}, nil
}
