// Package membudget is the process's memory budget: every large buffer a
// call needs (chunks fetched from a store, decode outputs, write buffers,
// codec batches, shared-memory segments) is reserved against it before it
// is allocated, so that the sum of what concurrent calls hold stays under
// one limit whatever the load.
//
// A reservation that does not fit waits, first come first served (a large
// request at the head of the queue is not starved by smaller ones behind
// it; golang.org/x/sync/semaphore's Weighted does the queueing), for at
// most the budget's MaxWait; then, or at once when it could never fit, it
// fails with ResourceExhausted naming the limit.
package membudget

import (
	"context"
	"errors"
	"math"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/zarrgate/zarrgate/errs"
)

// DefaultMaxWait is how long a reservation waits for memory by default.
const DefaultMaxWait = 30 * time.Second

// Budget is a limit on the bytes reserved at once.
type Budget struct {
	limit   int64
	maxWait time.Duration
	sem     *semaphore.Weighted
	used    atomic.Int64
	waiting atomic.Int64
	peak    atomic.Int64

	// The Go runtime's soft memory limit while LimitRuntime is in force
	// (0: not), lowered by the reservations held outside Go's heap.
	rtMu    sync.Mutex
	rtLimit int64
	offHeap int64
}

// New returns a budget of limit bytes whose reservations wait at most
// maxWait (0: DefaultMaxWait) for memory.
func New(limit int64, maxWait time.Duration) *Budget {
	if limit <= 0 {
		limit = math.MaxInt64
	}
	if maxWait <= 0 {
		maxWait = DefaultMaxWait
	}
	return &Budget{limit: limit, maxWait: maxWait, sem: semaphore.NewWeighted(limit)}
}

// Unlimited is a budget that never waits; for tests and library callers
// that bound memory themselves.
func Unlimited() *Budget { return New(math.MaxInt64, 0) }

// Limit is the budget's size in bytes.
func (b *Budget) Limit() int64 { return b.limit }

// InUse is the number of bytes reserved now.
func (b *Budget) InUse() int64 { return b.used.Load() }

// Peak is the most bytes ever reserved at once.
func (b *Budget) Peak() int64 { return b.peak.Load() }

// Waiting is the number of reservations waiting for memory now.
func (b *Budget) Waiting() int64 { return b.waiting.Load() }

// Reservation is memory reserved from a budget. Release gives it back;
// it is safe to call more than once, and on a nil or zero Reservation.
type Reservation struct {
	b    *Budget
	n    int64
	once *sync.Once
	off  bool // held outside Go's heap (see TryAcquireOffHeap)
}

// Bytes is the size of the reservation.
func (r Reservation) Bytes() int64 { return r.n }

// Release gives the memory back.
func (r Reservation) Release() {
	if r.b == nil || r.n == 0 {
		return
	}
	r.once.Do(func() {
		if r.off {
			r.b.addOffHeap(-r.n)
		}
		r.b.used.Add(-r.n)
		r.b.sem.Release(r.n)
	})
}

// Shrink gives back the part of the reservation beyond n bytes (a buffer
// reserved at its bound turned out smaller) and returns the reservation
// for what is left; r must not be used afterwards.
func (r Reservation) Shrink(n int64) Reservation {
	if r.b == nil || n >= r.n || r.off {
		return r
	}
	n = max(n, 0)
	left := Reservation{b: r.b, n: n, once: new(sync.Once)}
	done := false
	r.once.Do(func() {
		done = true
		r.b.used.Add(n - r.n)
		r.b.sem.Release(r.n - n)
	})
	if !done {
		return Reservation{} // released already
	}
	return left
}

// Acquire reserves n bytes for what (a few words naming the buffer, for
// the error message), waiting up to the budget's MaxWait, or ctx's end if
// sooner. A request larger than the whole budget fails at once. Both
// failures are ResourceExhausted naming the limit; a cancelled ctx gives
// ctx's error.
func (b *Budget) Acquire(ctx context.Context, n int64, what string) (Reservation, error) {
	if n <= 0 {
		return Reservation{}, nil
	}
	if n > b.limit {
		return Reservation{}, errs.New(errs.ResourceExhausted, "%s needs %s, more than the server's whole memory budget of %s (--memory-limit)", what, Size(n), Size(b.limit))
	}
	if !b.sem.TryAcquire(n) {
		b.waiting.Add(1)
		wctx, cancel := context.WithTimeout(ctx, b.maxWait)
		err := b.sem.Acquire(wctx, n)
		cancel()
		b.waiting.Add(-1)
		if err != nil {
			if ctx.Err() != nil {
				return Reservation{}, ctx.Err()
			}
			return Reservation{}, busyError{errs.New(errs.ResourceExhausted, "%s needs %s; the server's memory budget of %s (--memory-limit) stayed in use by other calls for %v; try again later or read in smaller parts", what, Size(n), Size(b.limit), b.maxWait)}
		}
	}
	u := b.used.Add(n)
	for p := b.peak.Load(); u > p && !b.peak.CompareAndSwap(p, u); p = b.peak.Load() {
	}
	return Reservation{b: b, n: n, once: new(sync.Once)}, nil
}

// TryAcquire reserves n bytes if they are free now, without waiting.
func (b *Budget) TryAcquire(n int64) (Reservation, bool) {
	if n <= 0 {
		return Reservation{}, true
	}
	if n > b.limit || !b.sem.TryAcquire(n) {
		return Reservation{}, false
	}
	u := b.used.Add(n)
	for p := b.peak.Load(); u > p && !b.peak.CompareAndSwap(p, u); p = b.peak.Load() {
	}
	return Reservation{b: b, n: n, once: new(sync.Once)}, true
}

// TryAcquireOffHeap is TryAcquire for memory outside Go's heap (a
// shared-memory segment): while it is held, the runtime's soft limit (see
// LimitRuntime) is lowered by its size, so that the heap and it together
// stay where the heap alone would.
func (b *Budget) TryAcquireOffHeap(n int64) (Reservation, bool) {
	r, ok := b.TryAcquire(n)
	if ok && n > 0 {
		r.off = true
		b.addOffHeap(n)
	}
	return r, ok
}

func (b *Budget) addOffHeap(n int64) {
	b.rtMu.Lock()
	defer b.rtMu.Unlock()
	b.offHeap += n
	if b.rtLimit > 0 {
		debug.SetMemoryLimit(max(b.rtLimit-b.offHeap, b.rtLimit/2))
	}
}

// RuntimeHeadroom is what the Go runtime's soft limit allows beyond the
// budget: memory no reservation covers (the runtime itself, gRPC's
// buffers, caches, goroutine stacks).
func RuntimeHeadroom(budget int64) int64 { return max(budget/32, 16<<20) }

// LimitRuntime sets the Go runtime's soft memory limit to the budget plus
// RuntimeHeadroom, less what is held outside the heap, so that the
// garbage collector works harder before the process outgrows its budget,
// unless GOMEMLIMIT is set. It returns the limit set, or 0.
func (b *Budget) LimitRuntime() int64 {
	if os.Getenv("GOMEMLIMIT") != "" || b.limit >= math.MaxInt64/2 {
		return 0
	}
	b.rtMu.Lock()
	defer b.rtMu.Unlock()
	b.rtLimit = b.limit + RuntimeHeadroom(b.limit)
	debug.SetMemoryLimit(max(b.rtLimit-b.offHeap, b.rtLimit/2))
	return b.rtLimit
}

// IsExhausted reports whether err is a budget refusal.
func IsExhausted(err error) bool { return errors.Is(err, errs.ResourceExhausted) }

// busyError is the refusal of a reservation that waited MaxWait for memory
// other calls held: the same request may succeed later, unlike one larger
// than the whole budget (still ResourceExhausted, for gRPC; HTTP answers
// 503 with Retry-After instead of 413).
type busyError struct{ error }

func (e busyError) Unwrap() error { return e.error }

// IsBusy reports whether err is a refusal for memory in use by other calls
// (try again later), not one for a request too large for the budget.
func IsBusy(err error) bool {
	var b busyError
	return errors.As(err, &b)
}
