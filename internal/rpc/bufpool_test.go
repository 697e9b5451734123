package rpc

import (
	"testing"
)

// framePool hands out buffers of the length asked for, whose capacity
// holds it, recycling those of pooled sizes and ignoring others (which
// gRPC may hand back: any prefix of a buffer it got).
func TestFramePool(t *testing.T) {
	p := &dirtyPool{}
	for _, n := range []int{0, 1, 255, 256, 257, 9, 16 << 10, 16<<10 + 1, 1 << 20, 1<<20 + 1, 3 << 20} {
		for range 3 {
			b := p.Get(n)
			if len(*b) != n || cap(*b) < n {
				t.Fatalf("Get(%d): len %d cap %d", n, len(*b), cap(*b))
			}
			p.Put(b)
		}
	}
	// A buffer of a size between two classes is not taken back: a later
	// Get of the larger class would otherwise get too small a buffer.
	odd := make([]byte, 3000)
	p.Put(&odd)
	if b := p.Get(4096); cap(*b) < 4096 {
		t.Fatalf("Get(4096) has capacity %d", cap(*b))
	}
}
