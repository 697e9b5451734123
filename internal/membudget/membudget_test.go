package membudget

import (
	"context"
	"errors"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/errs"
)

func TestAcquireRelease(t *testing.T) {
	b := New(100, time.Second)
	r1, err := b.Acquire(context.Background(), 60, "a")
	if err != nil {
		t.Fatal(err)
	}
	if b.InUse() != 60 {
		t.Fatalf("in use %d, want 60", b.InUse())
	}
	if _, ok := b.TryAcquire(50); ok {
		t.Fatal("TryAcquire past the limit succeeded")
	}
	r1.Release()
	r1.Release() // idempotent
	if b.InUse() != 0 {
		t.Fatalf("in use %d after release, want 0", b.InUse())
	}
	if b.Peak() != 60 {
		t.Fatalf("peak %d, want 60", b.Peak())
	}
}

func TestShrink(t *testing.T) {
	b := New(100, time.Second)
	r, _ := b.Acquire(context.Background(), 80, "a")
	r = r.Shrink(30)
	if b.InUse() != 30 || r.Bytes() != 30 {
		t.Fatalf("in use %d, reservation %d after shrinking to 30", b.InUse(), r.Bytes())
	}
	if _, ok := b.TryAcquire(70); !ok {
		t.Fatal("the shrunk bytes were not given back")
	}
	r.Release()
	if b.InUse() != 70 {
		t.Fatalf("in use %d, want 70", b.InUse())
	}
}

func TestTooLargeFailsAtOnce(t *testing.T) {
	b := New(1<<20, time.Hour)
	start := time.Now()
	_, err := b.Acquire(context.Background(), 2<<20, "a chunk")
	if !errors.Is(err, errs.ResourceExhausted) || !strings.Contains(err.Error(), "1 MiB") {
		t.Fatalf("err = %v, want ResourceExhausted naming the 1 MiB limit", err)
	}
	if time.Since(start) > time.Second {
		t.Fatal("a request that can never fit waited")
	}
}

func TestWaitIsBounded(t *testing.T) {
	b := New(100, 100*time.Millisecond)
	r, _ := b.Acquire(context.Background(), 100, "x")
	defer r.Release()
	start := time.Now()
	_, err := b.Acquire(context.Background(), 1, "y")
	if !errors.Is(err, errs.ResourceExhausted) {
		t.Fatalf("err = %v, want ResourceExhausted", err)
	}
	if d := time.Since(start); d < 90*time.Millisecond || d > 2*time.Second {
		t.Fatalf("waited %v, want about 100ms", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.Acquire(ctx, 1, "z"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ctx: err = %v", err)
	}
	if b.Waiting() != 0 {
		t.Fatalf("%d still waiting", b.Waiting())
	}
}

// A large request at the head of the queue is served before smaller ones
// that arrive after it (no starvation).
func TestFIFO(t *testing.T) {
	b := New(100, 5*time.Second)
	hold, _ := b.Acquire(context.Background(), 50, "hold")
	var order []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	got := func(name string, n int64) {
		defer wg.Done()
		r, err := b.Acquire(context.Background(), n, name)
		if err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		order = append(order, name)
		mu.Unlock()
		time.Sleep(10 * time.Millisecond)
		r.Release()
	}
	wg.Add(1)
	go got("big", 100)
	for b.Waiting() != 1 {
		time.Sleep(time.Millisecond)
	}
	wg.Add(1)
	go got("small", 10) // would fit now, but big is first
	for b.Waiting() != 2 {
		time.Sleep(time.Millisecond)
	}
	hold.Release()
	wg.Wait()
	if len(order) != 2 || order[0] != "big" {
		t.Fatalf("order %v, want big first", order)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"100": 100, "1K": 1024, "512MiB": 512 << 20, "2G": 2 << 30, "1.5GiB": 3 << 29, "3gb": 3 << 30} {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "x", "-1", "5Q", "1e30"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) succeeded", bad)
		}
	}
	if s := Size(3 << 29); s != "1.5 GiB" {
		t.Errorf("Size = %q", s)
	}
}

func TestDefault(t *testing.T) {
	n, src := Default()
	if n <= 0 || src == "" {
		t.Fatalf("Default() = %d, %q", n, src)
	}
}

// Reservations outside the heap lower the runtime's soft limit while held.
func TestOffHeapLowersRuntimeLimit(t *testing.T) {
	if os.Getenv("GOMEMLIMIT") != "" {
		t.Fatal("the test needs GOMEMLIMIT unset")
	}
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	b := New(1<<30, time.Second)
	set := b.LimitRuntime()
	if want := int64(1<<30 + 32<<20); set != want || debug.SetMemoryLimit(-1) != want {
		t.Fatalf("runtime limit %d (set %d), want %d", debug.SetMemoryLimit(-1), set, want)
	}
	r, ok := b.TryAcquireOffHeap(100 << 20)
	if !ok || debug.SetMemoryLimit(-1) != set-100<<20 {
		t.Fatalf("with 100 MiB off the heap: runtime limit %d, want %d", debug.SetMemoryLimit(-1), set-100<<20)
	}
	r.Release()
	if debug.SetMemoryLimit(-1) != set || b.InUse() != 0 {
		t.Fatalf("after release: runtime limit %d, in use %d", debug.SetMemoryLimit(-1), b.InUse())
	}
}

// BenchmarkAcquireRelease is the budget's cost on the read path: one
// reservation per batch of chunks, uncontended and with 8 goroutines.
func BenchmarkAcquireRelease(b *testing.B) {
	bud := New(1<<30, time.Second)
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			r, _ := bud.Acquire(ctx, 16<<20, "batch")
			r.Release()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				r, _ := bud.Acquire(ctx, 16<<20, "batch")
				r.Release()
			}
		})
	})
}
