// Fair shares of the gateway's processors between calls: while other calls
// are about, a call's chunk workers decode (or encode) fewer chunk batches
// at once than there are processors, so that another call's request and
// chunk work find a processor free at once instead of waiting behind a
// big call's runnable workers.

package gateway

import (
	"context"
	"runtime"
	"sync"
	"time"
)

// fairCooldown is how long after another call ended a call still counts as
// sharing the gateway: a client reading small slabs one after another is
// between calls most of the time it is not being served, and a big call
// that took all processors back in those gaps would meet its next request
// with every processor busy.
const fairCooldown = 100 * time.Millisecond

// fairYield is how long a batch of a call with workers waits, before it
// starts, for the calls without workers (small reads, one-chunk writes)
// in progress to end: their work runs first, and the big call still
// starts a batch (one chunk, while it shares) every fairYield at least.
var fairYield = 2 * time.Millisecond // a variable for tests

// scheduler shares the processors' chunk work between calls. Every
// ReadSlab and WriteSlab is a call (begin, end). The chunk batches a
// call's workers decode or encode in this process each take one of the
// call's slots (acquire): alone, a call has Parallelism slots (its workers
// are not held back); sharing the gateway, the calls with workers split
// all processors but one between them, at least one slot each, so that
// one processor stays free for the others' requests and small reads
// (which run in their own goroutine, without slots) and no call is ever
// starved. Alone, or from a store elsewhere, store reads take no slots:
// waiting on the store uses no processor. Sharing, a call's workers also
// take a slot per chunk rather than per batch (readChunks), its reads from
// a store read in this process (Gateway.localReads: copying from the page
// cache) are made under the chunk's slot too, a chunk at a time, and a
// batch waits up to fairYield for the calls without workers in progress to
// end, so that a small read's work runs first instead of beside a big
// call's.
type scheduler struct {
	procs, parallelism int

	mu      sync.Mutex
	active  int       // calls running
	workers int       // of those, calls whose chunk work takes slots
	lastEnd time.Time // when a call last ended
	slotted map[*call]struct{}
	waiting int // batches waiting for a slot
}

func newScheduler(parallelism int) *scheduler {
	return &scheduler{procs: runtime.GOMAXPROCS(0), parallelism: parallelism}
}

// addSlotted counts c among the calls with workers (s.mu held).
func (s *scheduler) addSlotted(c *call) {
	if s.slotted == nil {
		s.slotted = map[*call]struct{}{}
	}
	s.slotted[c] = struct{}{}
	s.workers++
}

// call is one call's share.
type call struct {
	s       *scheduler
	start   time.Time
	slots   bool // its chunk work takes slots
	running int  // slots held
	wake    chan struct{}
}

// begin registers a call; with slots, its chunk work will take them.
func (s *scheduler) begin(slots bool) *call {
	c := &call{s: s, start: time.Now(), slots: slots}
	if slots {
		c.wake = make(chan struct{}, 1)
	}
	s.mu.Lock()
	s.active++
	if slots {
		s.addSlotted(c)
	}
	s.mu.Unlock()
	return c
}

// useSlots makes c's chunk work take slots from now on.
func (c *call) useSlots() {
	if c.slots {
		return
	}
	c.wake = make(chan struct{}, 1)
	c.s.mu.Lock()
	c.slots = true
	c.s.addSlotted(c)
	c.s.mu.Unlock()
}

// end unregisters the call.
func (c *call) end() {
	s := c.s
	s.mu.Lock()
	s.active--
	var waiting []*call
	if c.slots {
		s.workers--
		delete(s.slotted, c)
	} else if s.active == s.workers {
		// The last call without workers ended: the others' batches
		// waiting for it go on.
		for w := range s.slotted {
			waiting = append(waiting, w)
		}
	}
	s.lastEnd = time.Now()
	s.mu.Unlock()
	for _, w := range waiting {
		w.signal()
	}
}

// small reports whether c is a call without workers (whose chunk work
// takes no slots: a small read). Only the call's own goroutine asks.
func (c *call) small() bool { return c != nil && !c.slots }

// shared reports whether other calls share the gateway with c now: its
// workers then decode a chunk per batch (readChunks), so that its slots
// turn over often.
func (c *call) shared() bool {
	if c == nil || !c.slots {
		return false
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	_, shared := c.limit(time.Now())
	return shared
}

// limit is how many slots c may hold now (s.mu held), and whether that is
// because other calls share the gateway.
func (c *call) limit(now time.Time) (int, bool) {
	s := c.s
	if s.active <= 1 && (s.lastEnd.Before(c.start) || now.Sub(s.lastEnd) >= fairCooldown) {
		return s.parallelism, false
	}
	return max(1, (s.procs-1)/max(1, s.workers)), true
}

// acquire takes one of c's slots, waiting while it holds its share, and
// returns the function that gives it back; nil c, or a call without
// slots, never waits.
func (c *call) acquire(ctx context.Context) (func(), error) {
	if c == nil || !c.slots {
		return func() {}, nil
	}
	s := c.s
	var since time.Time // waiting for calls without workers since
	for {
		now := time.Now()
		s.mu.Lock()
		n, shared := c.limit(now)
		small := s.active > s.workers // calls without workers in progress
		if small && since.IsZero() {
			since = now
		}
		if c.running < n && (!small || now.Sub(since) >= fairYield) {
			c.running++
			more := c.running < n
			s.mu.Unlock()
			if more { // another waiter may take the next slot
				c.signal()
			}
			return c.release, nil
		}
		yielding := c.running < n // held back for the small calls only
		s.waiting++
		s.mu.Unlock()
		// Wait for one of c's slots to be given back, or, sharing, for
		// the share to grow (the others leave): checked again after the
		// cooldown.
		var t *time.Timer
		var after <-chan time.Time
		switch {
		case yielding:
			t = time.NewTimer(fairYield - now.Sub(since))
			after = t.C
		case shared:
			t = time.NewTimer(fairCooldown)
			after = t.C
		}
		select {
		case <-c.wake:
		case <-after:
		case <-ctx.Done():
		}
		if t != nil {
			t.Stop()
		}
		s.mu.Lock()
		s.waiting--
		s.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// next is called by a worker that holds one of c's slots between two
// units of its work (the chunks of a batch, sharing): it keeps the slot,
// after letting the goroutines waiting for a processor run first
// (runtime.Gosched), unless calls without workers are in progress or c
// holds more than its share now, when it gives the slot back and takes
// one again as acquire does (waiting, for up to fairYield, for the calls
// without workers to end). It returns the function that gives back the
// slot held then; on an error, none is held.
func (c *call) next(ctx context.Context) (func(), error) {
	s := c.s
	s.mu.Lock()
	n, _ := c.limit(time.Now())
	keep := s.active == s.workers && c.running <= n
	s.mu.Unlock()
	if keep {
		runtime.Gosched()
		return c.release, nil
	}
	c.release()
	return c.acquire(ctx)
}

// release gives a slot back.
func (c *call) release() {
	c.s.mu.Lock()
	c.running--
	c.s.mu.Unlock()
	c.signal()
}

// signal wakes one of c's waiters, if any.
func (c *call) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// fetchSlot takes a slot of the share of the call ctx carries for a store
// read (and the work on what it read), when the store's reads and the codecs run on this
// process's processors and the call shares the gateway; otherwise none.
// Alone, waiting on a store elsewhere, or with the codecs on codec workers
// (whose calls' work here takes no slots), a call's fetches take none.
// It returns the function that gives the slot back, and whether a slot was
// taken (the work under it then needs no slot of its own).
func (g *Gateway) fetchSlot(ctx context.Context) (release func(), held bool, err error) {
	if c := g.fetchCall(ctx); c != nil {
		release, err := c.acquire(ctx)
		return release, err == nil, err
	}
	return func() {}, false, nil
}

// fetchCall is the call ctx carries when its store reads take slots of
// its share (see fetchSlot), else nil.
func (g *Gateway) fetchCall(ctx context.Context) *call {
	if c := callOf(ctx); g.localReads && g.inProcess && c.shared() {
		return c
	}
	return nil
}

type callKey struct{}

// withCall returns ctx carrying c, whose slots the chunk work done under
// ctx takes.
func withCall(ctx context.Context, c *call) context.Context {
	return context.WithValue(ctx, callKey{}, c)
}

// callOf is the call ctx carries, or nil.
func callOf(ctx context.Context) *call {
	c, _ := ctx.Value(callKey{}).(*call)
	return c
}
