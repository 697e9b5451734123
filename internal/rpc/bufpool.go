package rpc

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc/mem"
)

// framePool is the buffer pool of zarrgate's gRPC servers and
// connections (experimental.BufferPool, experimental.WithBufferPool): it
// is gRPC's default pool (mem.DefaultBufferPool) without the zeroing of
// every buffer it hands out. gRPC reads each received HTTP/2 frame into
// a buffer from it, overwriting all of it (io.ReadFull of the frame's
// length), and marshals into buffers it then fills; the zeroing was the
// one memclr of every received byte, ~3 % of the CPU of offloaded
// decoding (BenchmarkOffloadOverhead). gRPC's transport itself uses such
// unzeroed pools where it reads (internal/mem.NewDirtySimplePool).
var framePool mem.BufferPool = &dirtyPool{}

// Buffers of 2^minPoolShift to 2^maxPoolShift bytes are pooled, by power
// of two; others are allocated (gRPC asks for at most a frame, 16 KiB,
// when reading, and for a message's size when marshalling one in one
// piece).
const (
	minPoolShift = 8  // 256 B
	maxPoolShift = 20 // 1 MiB
)

type dirtyPool struct {
	tiers [maxPoolShift + 1]sync.Pool
}

func (p *dirtyPool) Get(n int) *[]byte {
	c := bits.Len(uint(max(n, 1) - 1))
	if c > maxPoolShift {
		b := make([]byte, n)
		return &b
	}
	c = max(c, minPoolShift)
	if b, ok := p.tiers[c].Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<c)
	return &b
}

func (p *dirtyPool) Put(b *[]byte) {
	c := cap(*b)
	if c < 1<<minPoolShift || c > 1<<maxPoolShift || c&(c-1) != 0 {
		return
	}
	p.tiers[bits.Len(uint(c))-1].Put(b)
}
