// Package bufpool recycles the large byte buffers of the read path (chunks
// read from a store, blocks gathered for the wire), so that a long read
// does not allocate, zero and garbage-collect its whole size.
//
// Buffers from Get are not zeroed: the caller overwrites them whole. A
// buffer goes back with Put only from the one owner who holds the last
// reference to it; when in doubt, drop it instead (the garbage collector
// takes it, as with any slice).
package bufpool

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Sizes outside [minSize, maxSize] are allocated and collected normally.
const (
	minShift = 16 // 64 KiB
	maxShift = 26 // 64 MiB
)

var pools [maxShift + 1]sync.Pool

// Get returns a buffer of n bytes with arbitrary contents.
func Get(n int) []byte {
	c := class(n)
	if c < 0 {
		return make([]byte, n)
	}
	if p, ok := pools[c].Get().(*[]byte); ok {
		if checking.Load() {
			pooled.Delete(unsafe.SliceData(*p))
		}
		return (*p)[:n]
	}
	return make([]byte, n, 1<<c)
}

// Checking for buffers put back twice (a bug that hands one buffer to two
// users): off, it costs one atomic load a call.
var (
	checking atomic.Bool
	// pooled maps every buffer put back to itself: the reference keeps a
	// buffer the pool drops from being collected and its address reused,
	// which would look like a second Put.
	pooled sync.Map
)

// CheckDoublePuts makes Put panic when a buffer already in the pool comes
// back again, for tests of code that recycles buffers. It stays on for the
// process.
func CheckDoublePuts() { checking.Store(true) }

// Put hands b back for reuse. b must be a whole buffer from Get (or a
// prefix of one), and nothing may use it afterwards. Slices whose capacity
// is not a pool size are ignored.
func Put(b []byte) {
	c := cap(b)
	if c < 1<<minShift || c > 1<<maxShift || c&(c-1) != 0 {
		return
	}
	b = b[:c]
	if checking.Load() {
		if _, twice := pooled.LoadOrStore(unsafe.SliceData(b), b); twice {
			panic("bufpool: a buffer was put back twice")
		}
	}
	pools[bits.Len(uint(c))-1].Put(&b)
}

// class is the pool index for n bytes, or -1.
func class(n int) int {
	if n < 1<<(minShift-1) || n > 1<<maxShift {
		return -1
	}
	c := bits.Len(uint(n - 1))
	return max(c, minShift)
}

// Refs counts the holders of a buffer (or anything else to free once) and
// calls free when the last of them lets go.
type Refs struct {
	n    atomic.Int32
	free func()
	buf  []byte // put back after free, if set
}

// NewRefs returns a count of n holders; free (may be nil) runs when it
// drops to zero.
func NewRefs(n int, free func()) *Refs {
	r := &Refs{free: free}
	r.n.Store(int32(n))
	return r
}

// NewBufRefs returns a count of n holders of buf, a buffer from this
// pool, which is put back when the count drops to zero: NewRefs with a
// free function, without the allocation of a closure over buf.
func NewBufRefs(n int, buf []byte) *Refs {
	r := &Refs{buf: buf}
	r.n.Store(int32(n))
	return r
}

// Hold adds a holder.
func (r *Refs) Hold() { r.n.Add(1) }

// Release drops a holder, freeing after the last.
func (r *Refs) Release() {
	if r.n.Add(-1) == 0 {
		if r.free != nil {
			r.free()
		}
		if r.buf != nil {
			Put(r.buf)
		}
	}
}

// Overlaps reports whether a and b share memory: whether a buffer is still
// in use by a slice derived from it.
func Overlaps(a, b []byte) bool {
	if cap(a) == 0 || cap(b) == 0 {
		return false
	}
	a0, b0 := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return a0 < b0+uintptr(cap(b)) && b0 < a0+uintptr(cap(a))
}
