package remote

import (
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/zarrgate/zarrgate/internal/membudget"
	"github.com/zarrgate/zarrgate/internal/shm"
)

// A staged chunk released by its caller while a batch takes it
// (stagedAt): the batch either holds it (and frees it later) or does not
// get it; it never revives an allocation whose last use just ended, which
// would free it, and drop its hold on the segment, a second time.
func TestStagedReleaseRacesPlace(t *testing.T) {
	s := testSegment(t)
	// The caller's release lands between stagedAt's look at the count
	// and its update, in every round: unstage counts down at once, then
	// waits for the segment's lock, which stagedAt holds.
	released := make(chan struct{}, 1)
	testHookStagedAt = func(sb *stagedBuf) {
		go func() { s.unstage(sb); released <- struct{}{} }()
		for sb.refs.Load() != 0 {
			runtime.Gosched()
		}
	}
	t.Cleanup(func() { testHookStagedAt = nil })
	for i := range 100 {
		sb := stage(t, s, 4096, 1)
		e := s.seg.Data[sb.off : sb.off+4096]
		if got := s.stagedAt(e); got != nil {
			t.Fatalf("round %d: a batch took a staged chunk its caller released", i)
		}
		<-released // once stagedAt let go of the lock
		s.mu.Lock()
		users, live, staged := s.users, len(s.live), len(s.staged)
		s.mu.Unlock()
		if users != 1 || live != 0 || staged != 0 {
			t.Fatalf("round %d: %d users (want the stream's 1), %d allocations live, %d staged", i, users, live, staged)
		}
	}
}

// A batch answered just as its stream fails: the receive frees the
// regions' input (freeIn) while the waiting call, woken by the failure,
// abandons them (finish). Each staged chunk is let go of once, and the
// segment's holds come back to the stream's alone. (The race detector
// of make test sees the two touch the regions at once without regions.mu.)
func TestRegionsAnsweredAsStreamFails(t *testing.T) {
	s := testSegment(t)
	for i := range 40 { // 40 × (4 KiB left to the worker + 3 KiB at most) fit the ring
		var bufs []*stagedBuf
		for range 3 {
			bufs = append(bufs, stage(t, s, 1024, 2)) // the caller's use and the batch's
		}
		s.hold()
		r := &regions{s: s, in: s.alloc(2048), outs: []int64{s.alloc(4096)}, lens: []int64{4096}, staged: slices.Clone(bufs)}
		if r.in < 0 || r.outs[0] < 0 {
			t.Fatalf("round %d: no room", i)
		}
		var wg sync.WaitGroup
		wg.Go(r.freeIn)
		wg.Go(r.finish)
		wg.Wait()
		for _, sb := range bufs {
			if n := sb.refs.Load(); n != 1 {
				t.Fatalf("round %d: a staged chunk has %d uses, want its caller's 1", i, n)
			}
			s.unstage(sb)
		}
		// The output region stays with the worker (abandoned); the
		// staged chunks are freed unless finish abandoned them first.
		s.mu.Lock()
		users := s.users
		s.mu.Unlock()
		if users != 1 {
			t.Fatalf("round %d: %d users, want the stream's 1", i, users)
		}
	}
}

// testSegment makes a 1 MiB segment, ended when the test ends, and then
// checks that its memory went back to the budget.
func testSegment(t *testing.T) *sharedSeg {
	t.Helper()
	if !shm.Supported {
		t.Skip("no shared memory on this platform")
	}
	b := membudget.New(1<<30, 0)
	s := newSharedSeg(1<<20, b)
	if s == nil {
		t.Fatal("no segment")
	}
	t.Cleanup(func() {
		s.end()
		if n := b.InUse(); n != 0 {
			t.Errorf("%d bytes still reserved after the segment's end", n)
		}
	})
	return s
}

// stage lends n bytes of s as Client.Stage does, with refs uses.
func stage(t *testing.T, s *sharedSeg, n int64, refs int32) *stagedBuf {
	t.Helper()
	if !s.hold() {
		t.Fatal("segment ended")
	}
	off := s.alloc(n)
	if off < 0 {
		t.Fatalf("no room: %d allocations live", len(s.live))
	}
	sb := &stagedBuf{off: off}
	sb.refs.Store(refs)
	s.mu.Lock()
	s.staged[off] = sb
	s.mu.Unlock()
	return sb
}
