package shm

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

// TestRingNeverOverlaps allocates and releases at random and checks that
// no two outstanding ranges overlap and all stay inside the ring.
func TestRingNeverOverlaps(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const lo, hi = 64, 64 + 1000
	ring := NewRing(lo, hi)
	type rng struct{ off, n int64 }
	var out []rng
	for range 20000 {
		if r.IntN(3) > 0 {
			n := 1 + r.Int64N((hi-lo)/2)
			ring.mu.Lock()
			off, ok := ring.place(n)
			ring.mu.Unlock()
			if !ok {
				continue
			}
			if off < lo || off+n > hi {
				t.Fatalf("allocation [%d,%d) outside [%d,%d)", off, off+n, lo, hi)
			}
			for _, o := range out {
				if off < o.off+o.n && o.off < off+n {
					t.Fatalf("allocation [%d,%d) overlaps outstanding [%d,%d)", off, off+n, o.off, o.off+o.n)
				}
			}
			out = append(out, rng{off, n})
		} else if len(out) > 0 {
			k := 1 + r.IntN(len(out))
			if err := ring.Release(uint64(k)); err != nil {
				t.Fatal(err)
			}
			out = out[k:]
		}
	}
	if err := ring.Release(uint64(len(out) + 1)); err == nil {
		t.Fatal("releasing more than is outstanding succeeded")
	}
}

// TestRingNoDeadlock plays the client's side of the protocol: it releases
// what it has consumed once that reaches an eighth of the ring. With
// allocations of at most a quarter of the ring, an allocation made when
// everything sent has been consumed must succeed at once.
func TestRingNoDeadlock(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const size = 4096
	ring := NewRing(0, size)
	var unreleased int64
	var blocks uint64
	for i := range 100000 {
		n := 1 + r.Int64N(size/4)
		ring.mu.Lock()
		_, ok := ring.place(n)
		ring.mu.Unlock()
		if !ok {
			t.Fatalf("step %d: %d bytes did not fit with %d bytes unreleased", i, n, unreleased)
		}
		unreleased += n
		blocks++
		if unreleased >= size/8 {
			if err := ring.Release(blocks); err != nil {
				t.Fatal(err)
			}
			unreleased, blocks = 0, 0
		}
	}
}

func TestRingAllocWaitsForRelease(t *testing.T) {
	ring := NewRing(0, 100)
	ctx := context.Background()
	if _, _, err := ring.Alloc(ctx, 80); err != nil {
		t.Fatal(err)
	}
	got := make(chan int64)
	go func() {
		off, _, err := ring.Alloc(ctx, 50)
		if err != nil {
			t.Error(err)
		}
		got <- off
	}()
	select {
	case off := <-got:
		t.Fatalf("allocated at %d while the ring was full", off)
	case <-time.After(50 * time.Millisecond):
	}
	if err := ring.Release(1); err != nil {
		t.Fatal(err)
	}
	if off := <-got; off != 0 {
		t.Fatalf("allocated at %d after the release, want 0", off)
	}
	// Fail and cancellation end a waiting Alloc.
	boom := errors.New("client gone")
	go func() { time.Sleep(10 * time.Millisecond); ring.Fail(boom) }()
	if _, _, err := ring.Alloc(ctx, 60); !errors.Is(err, boom) {
		t.Fatalf("Alloc after Fail: %v", err)
	}
	if _, _, err := NewRing(0, 10).Alloc(ctx, 11); err == nil {
		t.Fatal("an allocation larger than the ring succeeded")
	}
	cctx, cancel := context.WithCancel(ctx)
	full := NewRing(0, 10)
	full.Alloc(ctx, 10)
	cancel()
	if _, _, err := full.Alloc(cctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Alloc on a cancelled context: %v", err)
	}
}

func TestRingDrained(t *testing.T) {
	ring := NewRing(0, 100)
	ctx := context.Background()
	if err := ring.Drained(ctx); err != nil {
		t.Fatal(err)
	}
	ring.Alloc(ctx, 10)
	ring.Alloc(ctx, 10)
	done := make(chan error)
	go func() { done <- ring.Drained(ctx) }()
	ring.Release(1)
	select {
	case err := <-done:
		t.Fatalf("drained with one allocation outstanding: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	ring.Release(1)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ring.Alloc(ctx, 10)
	boom := errors.New("client gone")
	ring.Fail(boom)
	if err := ring.Drained(ctx); !errors.Is(err, boom) {
		t.Fatalf("Drained after Fail: %v", err)
	}
}

// TestRingManyWaiters: one release that frees room for several waiting
// allocations wakes them all, and sequence numbers follow allocation
// order.
func TestRingManyWaiters(t *testing.T) {
	ring := NewRing(0, 100)
	ctx := context.Background()
	if _, seq, err := ring.Alloc(ctx, 100); err != nil || seq != 0 {
		t.Fatalf("first allocation: seq %d, %v", seq, err)
	}
	done := make(chan uint64)
	for range 4 {
		go func() {
			_, seq, err := ring.Alloc(ctx, 25)
			if err != nil {
				t.Error(err)
			}
			done <- seq
		}()
	}
	time.Sleep(20 * time.Millisecond)
	if err := ring.Release(1); err != nil {
		t.Fatal(err)
	}
	seen := map[uint64]bool{}
	for range 4 {
		select {
		case seq := <-done:
			seen[seq] = true
		case <-time.After(5 * time.Second):
			t.Fatal("a waiting allocation was not woken")
		}
	}
	if len(seen) != 4 || !seen[1] || !seen[4] {
		t.Fatalf("sequence numbers %v, want 1..4", seen)
	}
}

// TestRingTryAllocNeverWaits: TryAlloc takes what fits now and answers
// false, at once, for what does not (a full ring, more than the ring, a
// failed ring); what releases free, it takes again.
func TestRingTryAllocNeverWaits(t *testing.T) {
	r := NewRing(0, 100)
	var offs []int64
	for range 3 {
		off, _, ok := r.TryAlloc(30)
		if !ok {
			t.Fatal("30 bytes of a 100-byte ring with room refused")
		}
		offs = append(offs, off)
	}
	if offs[0] != 0 || offs[1] != 30 || offs[2] != 60 {
		t.Errorf("offsets %v", offs)
	}
	if _, _, ok := r.TryAlloc(30); ok {
		t.Error("30 bytes given with 10 free")
	}
	if _, _, ok := r.TryAlloc(101); ok {
		t.Error("more than the ring given")
	}
	if err := r.Release(1); err != nil {
		t.Fatal(err)
	}
	if off, seq, ok := r.TryAlloc(30); !ok || off != 0 || seq != 3 {
		t.Errorf("after a release: offset %d, seq %d, %v", off, seq, ok)
	}
	r.Fail(context.Canceled)
	if err := r.Release(2); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := r.TryAlloc(10); ok {
		t.Error("a failed ring gave space")
	}
}
