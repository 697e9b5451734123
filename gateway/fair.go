package gateway

import (
	"context"
	"sync"
)

// The gateway's chunk work (fetching and decoding a batch of chunks for a
// read, encoding and storing one chunk or shard for a write) runs in
// slots of one pool shared by every call: Config.Parallelism slots in all,
// not per call. A call that is alone may hold every slot; when calls
// compete, a slot that comes free goes to the waiting call that holds the
// fewest (max-min fairness: round-robin among equals, first come first
// served within a call). So a small read that arrives while a huge slab
// holds the whole pool waits for one batch of the slab, not for the slab:
// its chunks jump the slab's queue, and the slab continues on the slots
// the small calls do not use.
//
// A slot is held only while the work runs on the gateway's CPU, store or
// codec workers, never while a block waits for its consumer (a slow
// client), so one slow reader cannot hold slots the others need.

// fairSched is the pool of chunk-work slots.
type fairSched struct {
	mu      sync.Mutex
	free    int         // slots no call holds; > 0 only while nobody waits
	waiting []*fairCall // calls with a waiting goroutine, in turn order
}

func newFairSched(slots int) *fairSched { return &fairSched{free: max(slots, 1)} }

// fairCall is one call's share of the pool.
type fairCall struct {
	s       *fairSched
	held    int            // slots this call holds
	waiters []*slotRequest // its goroutines waiting for a slot, in order
}

// slotRequest is a goroutine waiting for a slot; ready is closed when
// granted is set.
type slotRequest struct {
	ready   chan struct{}
	granted bool
}

// join registers a call. A nil scheduler gives a nil call, whose acquire
// and release do nothing.
func (s *fairSched) join() *fairCall {
	if s == nil {
		return nil
	}
	return &fairCall{s: s}
}

// acquire waits for a slot for c, or for ctx's end.
func (c *fairCall) acquire(ctx context.Context) error {
	if c == nil {
		return nil
	}
	s := c.s
	s.mu.Lock()
	if s.free > 0 {
		s.free--
		c.held++
		s.mu.Unlock()
		return nil
	}
	r := &slotRequest{ready: make(chan struct{})}
	if len(c.waiters) == 0 {
		s.waiting = append(s.waiting, c)
	}
	c.waiters = append(c.waiters, r)
	s.mu.Unlock()
	select {
	case <-r.ready:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	if r.granted { // granted as ctx ended: pass it on
		s.mu.Unlock()
		c.release()
		return ctx.Err()
	}
	for i, w := range c.waiters {
		if w == r {
			c.waiters = append(c.waiters[:i], c.waiters[i+1:]...)
			break
		}
	}
	if len(c.waiters) == 0 {
		s.unqueue(c)
	}
	s.mu.Unlock()
	return ctx.Err()
}

// release gives back a slot of c: to the waiting call holding the fewest
// slots (the first in turn order among those), else to the pool.
func (c *fairCall) release() {
	if c == nil {
		return
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	c.held--
	if len(s.waiting) == 0 {
		s.free++
		return
	}
	next := s.waiting[0]
	for _, w := range s.waiting[1:] {
		if w.held < next.held {
			next = w
		}
	}
	r := next.waiters[0]
	next.waiters = next.waiters[1:]
	next.held++
	r.granted = true
	close(r.ready)
	// The served call goes to the back of the turn order (or out of it).
	s.unqueue(next)
	if len(next.waiters) > 0 {
		s.waiting = append(s.waiting, next)
	}
}

// unqueue takes c out of the turn order; s.mu is held.
func (s *fairSched) unqueue(c *fairCall) {
	for i, w := range s.waiting {
		if w == c {
			s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
			return
		}
	}
}

// fairKey is the context key of the call whose chunk work a context's
// holder does.
type fairKey struct{}

// fairCtx marks ctx as a new call's: chunk work under it takes slots as
// that call's share of the gateway's pool.
func (g *Gateway) fairCtx(ctx context.Context) context.Context {
	return context.WithValue(ctx, fairKey{}, g.sched.join())
}

// chunkSlot waits for a slot for the call of ctx (none for a context of
// no call) and returns the function that gives it
// back, which may be called more than once.
func chunkSlot(ctx context.Context) (release func(), err error) {
	c, _ := ctx.Value(fairKey{}).(*fairCall)
	if c == nil {
		return func() {}, nil
	}
	if err := c.acquire(ctx); err != nil {
		return nil, err
	}
	done := false
	return func() {
		if !done {
			done = true
			c.release()
		}
	}, nil
}
