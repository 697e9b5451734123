package shm

import (
	"context"
	"fmt"
	"sync"
)

// Ring hands out contiguous ranges of [lo, hi) to blocks and takes them
// back in allocation order, as the client releases them. Alloc waits while
// the space is in use. Any number of goroutines may allocate, release and
// wait at once.
type Ring struct {
	mu         sync.Mutex
	lo, hi     int64
	head, tail int64         // next allocation at head; the oldest in use at tail
	spans      []span        // in use, oldest first
	seq        uint64        // of the next allocation
	err        error         // set by Fail: Alloc returns it
	changed    chan struct{} // closed (and replaced) by every release and Fail
}

// span is one allocation; end is where the next free space starts (a span
// that wrapped to lo also holds the unused space it skipped at the end).
type span struct{ end int64 }

// NewRing returns a ring over [lo, hi).
func NewRing(lo, hi int64) *Ring {
	return &Ring{lo: lo, hi: hi, head: lo, tail: lo, changed: make(chan struct{})}
}

// Alloc returns the offset of n contiguous bytes, waiting for releases if
// need be, and the allocation's sequence number (0, 1, ...): allocations
// must be sent, and are released, in that order. n must be at most a
// quarter of the ring for releases in batches of up to an eighth of it
// never to leave Alloc waiting for ever.
func (r *Ring) Alloc(ctx context.Context, n int64) (off int64, seq uint64, err error) {
	if n <= 0 || n > r.hi-r.lo {
		return 0, 0, fmt.Errorf("shared memory: %d bytes do not fit a ring of %d", n, r.hi-r.lo)
	}
	for {
		r.mu.Lock()
		if r.err != nil {
			r.mu.Unlock()
			return 0, 0, r.err
		}
		off, ok := r.place(n)
		seq = r.seq
		if ok {
			r.seq++
		}
		changed := r.changed
		r.mu.Unlock()
		if ok {
			return off, seq, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		}
	}
}

// TryAlloc is Alloc without waiting: ok is false if n bytes do not fit
// now (or the ring has failed). It never waits for a release, so n may be
// up to the whole ring.
func (r *Ring) TryAlloc(n int64) (off int64, seq uint64, ok bool) {
	if n <= 0 || n > r.hi-r.lo {
		return 0, 0, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return 0, 0, false
	}
	off, ok = r.place(n)
	seq = r.seq
	if ok {
		r.seq++
	}
	return off, seq, ok
}

// place allocates n bytes if they fit now.
func (r *Ring) place(n int64) (int64, bool) {
	switch {
	case len(r.spans) == 0:
		r.head, r.tail = r.lo, r.lo
		fallthrough
	case r.head > r.tail: // in use: [tail, head)
		if n <= r.hi-r.head {
			break
		}
		if n <= r.tail-r.lo { // wrap, skipping [head, hi)
			r.head = r.lo
			break
		}
		return 0, false
	default: // wrapped (head < tail), or full (head == tail): free is [head, tail)
		if n > r.tail-r.head {
			return 0, false
		}
	}
	off := r.head
	r.head += n
	r.spans = append(r.spans, span{end: r.head})
	return off, true
}

// Release frees the k oldest allocations.
func (r *Ring) Release(k uint64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if k > uint64(len(r.spans)) {
		return fmt.Errorf("shared memory: %d blocks released, %d outstanding", k, len(r.spans))
	}
	if k == 0 {
		return nil
	}
	r.tail = r.spans[k-1].end
	r.spans = r.spans[k:]
	if len(r.spans) == 0 {
		r.spans = r.spans[:0:0]
	}
	r.broadcast()
	return nil
}

// Drained waits until every allocation is released, ctx is done, or Fail
// is called.
func (r *Ring) Drained(ctx context.Context) error {
	for {
		r.mu.Lock()
		n, err, changed := len(r.spans), r.err, r.changed
		r.mu.Unlock()
		if n == 0 {
			return nil
		}
		if err != nil {
			return err
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Fail makes Alloc return err from now on.
func (r *Ring) Fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.err = err
	r.broadcast()
}

// broadcast wakes every waiter; r.mu is held.
func (r *Ring) broadcast() {
	close(r.changed)
	r.changed = make(chan struct{})
}
