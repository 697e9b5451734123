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
