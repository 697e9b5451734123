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
// more would wait on each other until the budget's MaxWait. So when the
// budget has no room now, the call first spills every unit it holds in
// memory (giving their reservations back), and only then waits, holding
// just what it cannot give back: bookkeeping, the spill log's buffers and
// the objects its flushes are writing. Flush workers do wait holding the
// units they write, but each waits for a bounded amount (a unit or a
// batch), FIFO, for at most the budget's MaxWait: the worst case is
// ResourceExhausted, never a hang.
func (w *slabWriter) acquire(n int64, what string) error {
	if w.mem.try(n) {
		return nil
	}
	if _, err := w.spillUntil(0); err != nil {
		return err
	}
	return w.mem.acquire(w.ctx, n, fmt.Sprintf("write %q: a %s", w.path, what))
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
	short := n - (m.reserved - m.used)
	m.mu.Unlock()
	// Wait without the lock: releases by the call's other goroutines go on.
	r, err := m.b.Acquire(ctx, short, what)
	if err != nil {
		return err
	}
	m.mu.Lock()
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
	for len(m.rs) > 0 && m.reserved-m.used > 2*memGranule {
		last := m.rs[len(m.rs)-1]
		excess := m.reserved - m.used - memGranule
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
