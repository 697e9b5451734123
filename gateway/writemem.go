package gateway

import (
	"context"
	"fmt"
	"sync"

	"github.com/zarrgate/zarrgate/internal/membudget"
)

// The memory of a WriteSlab: its buffer of partial units, and what the
// call has reserved from the budget.

// room makes room in the buffer for n more bytes and reserves them from
// the budget, spilling units held in memory (and, once the write has
// outgrown the buffer, flushing complete objects) as needed. It reports
// false when n does not fit the buffer at all: the caller keeps its data
// in the spill log instead.
func (w *slabWriter) room(n int64) (bool, error) {
	buf := w.g.cfg.WriteBufferBytes
	if n > buf {
		return false, w.startStreaming()
	}
	for w.held.Load()+n > buf {
		if !w.streaming {
			if err := w.startStreaming(); err != nil {
				return false, err
			}
			continue
		}
		// Spill down to half the buffer, so that the next spill is not
		// one block away.
		spilled, err := w.spillUntil(buf/2 - n)
		if err != nil {
			return false, err
		}
		if spilled {
			continue
		}
		// All that is left is the data of flushes in flight: wait for one.
		if w.inflight.Load() == 0 {
			break // nothing held at all: n fits
		}
		select {
		case <-w.freed:
		case <-w.ctx.Done():
			return false, w.ctx.Err()
		}
	}
	if err := w.acquire(n, "write buffer"); err != nil {
		return false, err
	}
	w.held.Add(n)
	return true, nil
}

// unhold gives back n bytes of the buffer.
func (w *slabWriter) unhold(n int64) {
	w.held.Add(-n)
	w.mem.release(n)
}

// acquire reserves n bytes from the budget for the call's main loop.
//
// Deadlock: a call must not wait for memory while holding memory it could
// give back, or two calls each holding half the budget and waiting for
// more would wait on each other until the budget's MaxWait (a
// hold-and-wait deadlock). So when the budget has no room now, the call
// first waits for its own flushes in flight, which never wait for the
// budget (each took all it needs from the main loop before it started,
// see flush), so they finish and give their memory back whatever other
// calls do; with none left, it spills every unit it holds in memory and
// gives back the slack of its reservations, and only then waits, holding
// just what it cannot give back: bookkeeping and the spill log's buffers.
func (w *slabWriter) acquire(n int64, what string) error {
	for !w.mem.try(n) {
		// The call's own flushes first: they finish without waiting.
		ok, err := w.awaitFlush()
		if err != nil {
			return err
		}
		if ok {
			continue
		}
		return w.acquireSpilled(n, what)
	}
	return nil
}

// awaitFlush waits for one of the call's flushes in flight to finish, if
// any is; it reports whether it waited.
func (w *slabWriter) awaitFlush() (bool, error) {
	if w.inflight.Load() == 0 {
		return false, nil
	}
	select {
	case <-w.freed:
		return true, nil
	case <-w.ctx.Done():
		return false, w.ctx.Err()
	}
}

// acquireSpilled reserves n bytes after spilling every unit in memory and
// giving back the call's slack, waiting for the budget if it must.
func (w *slabWriter) acquireSpilled(n int64, what string) error {
	if w.mem.try(n) {
		return nil
	}
	if _, err := w.spillUntil(0); err != nil {
		return err
	}
	w.mem.trim()
	return w.mem.acquire(w.ctx, n, fmt.Sprintf("write %q: a %s", w.path, what))
}

// flushMem is the memory one flush reserved before it started: its steps
// take from it and give back to it, without a trip to the budget. A step
// that needs more than is left (only a flush of variable-length values,
// whose size the reservation estimates, or a merge over a stored object
// larger than any this array's codecs write) takes the rest from the
// budget if it is free now, and else waits for it: the one case where a
// flush waits holding memory, bounded by the budget's MaxWait.
type flushMem struct {
	size  int64 // reserved for the flush in the call's callMem
	left  int64 // of size, not taken
	extra int64 // taken beyond size, from the budget
}

// take reserves n bytes for one of o's flush steps.
func (w *slabWriter) take(o *pendingObject, n int64, what string) error {
	m := &o.mem
	if n <= m.left {
		m.left -= n
		return nil
	}
	short := n - m.left
	w.g.stats.FlushOverruns.Add(1)
	if !w.mem.try(short) {
		if err := w.mem.acquire(w.ctx, short, what); err != nil {
			return err
		}
	}
	m.left = 0
	m.extra += short
	return nil
}

// give gives back n bytes a step of o's flush took.
func (w *slabWriter) give(o *pendingObject, n int64) {
	m := &o.mem
	if r := min(n, m.extra); r > 0 {
		w.mem.release(r)
		m.extra -= r
		n -= r
	}
	m.left = min(m.left+n, m.size)
}

// startStreaming switches to streaming: the write no longer fits the
// buffer, so complete objects are written as soon as they are.
func (w *slabWriter) startStreaming() error {
	if w.streaming {
		return nil
	}
	w.streaming = true
	for _, o := range w.sortedObjects() {
		if o.got == o.need {
			if err := w.flush(o); err != nil {
				return err
			}
		}
	}
	return nil
}

// callMem is what one call has reserved from the budget: reservations
// are taken in granules and given back when well beyond use, so that the
// many small buffers of a write do not each cost a trip to the budget.
// Safe for concurrent use (the call's goroutine and its flush workers).
type callMem struct {
	b              *membudget.Budget
	mu             sync.Mutex
	rs             []membudget.Reservation
	reserved, used int64
	// waiting counts the call's goroutines waiting for the budget: while
	// one does, what the others give back goes back to the budget at once
	// (kept, it would be memory the call holds while it waits).
	waiting int
}

const memGranule = 256 << 10

// try reserves n bytes if the call has them or the budget has them free
// now, without waiting.
func (m *callMem) try(n int64) bool {
	if n <= 0 {
		return true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.reserved-m.used >= n {
		m.used += n
		return true
	}
	short := n - (m.reserved - m.used)
	r, ok := m.b.TryAcquire(max(short, memGranule))
	if !ok {
		if r, ok = m.b.TryAcquire(short); !ok {
			return false
		}
	}
	m.rs = append(m.rs, r)
	m.reserved += r.Bytes()
	m.used += n
	return true
}

// acquire reserves n bytes, waiting as the budget allows.
func (m *callMem) acquire(ctx context.Context, n int64, what string) error {
	if m.try(n) {
		return nil
	}
	m.mu.Lock()
	m.waiting++
	m.trimLocked(0)
	short := n - (m.reserved - m.used)
	m.mu.Unlock()
	// Wait without the lock: releases by the call's other goroutines go on.
	r, err := m.b.Acquire(ctx, short, what)
	m.mu.Lock()
	m.waiting--
	if err != nil {
		m.mu.Unlock()
		return err
	}
	m.rs = append(m.rs, r)
	m.reserved += r.Bytes()
	m.used += n
	m.mu.Unlock()
	return nil
}

// release gives back n bytes reserved earlier.
func (m *callMem) release(n int64) {
	if n <= 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.used -= n
	switch {
	case m.waiting > 0:
		m.trimLocked(0)
	case m.reserved-m.used > 2*memGranule:
		m.trimLocked(memGranule)
	}
}

// trim gives back what the call has reserved beyond what it uses.
func (m *callMem) trim() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.trimLocked(0)
}

// trimLocked gives back what is reserved beyond what is used and keep
// bytes of slack.
func (m *callMem) trimLocked(keep int64) {
	for len(m.rs) > 0 && m.reserved-m.used > keep {
		last := m.rs[len(m.rs)-1]
		excess := m.reserved - m.used - keep
		if last.Bytes() <= excess {
			last.Release()
			m.reserved -= last.Bytes()
			m.rs = m.rs[:len(m.rs)-1]
			continue
		}
		m.rs[len(m.rs)-1] = last.Shrink(last.Bytes() - excess)
		m.reserved -= excess
	}
}

// close gives everything back.
func (m *callMem) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.rs {
		r.Release()
	}
	m.rs, m.reserved, m.used = nil, 0, 0
}
