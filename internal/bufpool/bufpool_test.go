package bufpool

import "testing"

func TestClasses(t *testing.T) {
	for _, c := range []struct{ n, cap int }{
		{0, 0}, {100, 100}, {32<<10 - 1, 32<<10 - 1}, // too small to pool
		{32 << 10, 64 << 10}, {64 << 10, 64 << 10}, {64<<10 + 1, 128 << 10},
		{256 << 10, 256 << 10}, {64 << 20, 64 << 20}, {64<<20 + 1, 64<<20 + 1}, // too large
	} {
		b := Get(c.n)
		if len(b) != c.n || cap(b) != c.cap {
			t.Errorf("Get(%d): len %d cap %d, want cap %d", c.n, len(b), cap(b), c.cap)
		}
		Put(b)
	}
}

func TestPutIgnoresOthers(t *testing.T) {
	Put(make([]byte, 100<<10)) // not a pool size: ignored
	Put(nil)
	b := Get(64 << 10)
	if cap(b) != 64<<10 {
		t.Fatal(cap(b))
	}
}

func TestRefs(t *testing.T) {
	freed := 0
	r := NewRefs(2, func() { freed++ })
	r.Hold()
	r.Release()
	r.Release()
	if freed != 0 {
		t.Fatal("freed while a holder remained")
	}
	r.Release()
	if freed != 1 {
		t.Fatalf("freed %d times after the last release, want 1", freed)
	}
	NewRefs(1, nil).Release() // no free func: nothing to call
}

func TestOverlaps(t *testing.T) {
	b := make([]byte, 100)
	for _, c := range []struct {
		a, b []byte
		want bool
	}{
		{b[:10], b[5:20], true},
		{b[:10:10], b[10:], false}, // adjacent, capacity cut
		{b[:10], b[10:], true},     // b[:10] reaches into b[10:] through its capacity
		{b, make([]byte, 10), false},
		{nil, b, false},
	} {
		if got := Overlaps(c.a, c.b); got != c.want {
			t.Errorf("Overlaps(%p+%d, %p+%d) = %v, want %v", c.a, cap(c.a), c.b, cap(c.b), got, c.want)
		}
	}
}

func TestCheckDoublePuts(t *testing.T) {
	CheckDoublePuts()
	b := Get(1 << 16)
	Put(b)
	defer func() {
		if recover() == nil {
			t.Fatal("a second Put of the same buffer did not panic")
		}
	}()
	Put(b)
}

// TestBufRefs: the buffer goes back to the pool after the last holder,
// once: a further Put of it is a double put.
func TestBufRefs(t *testing.T) {
	CheckDoublePuts()
	b := Get(64 << 10)
	r := NewBufRefs(2, b)
	r.Release()
	r.Release()
	defer func() {
		if recover() == nil {
			t.Fatal("the buffer was not put back after the last holder")
		}
	}()
	Put(b)
}
