package shm

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"time"
)

// A destination is the other direction of sharing: memory of a client on
// the gateway's host (a sealed memory file) that the gateway writes a
// slab's data into, in place, saving the copy out of a segment. The
// client makes it (NewDest), puts a random token in its first page, and
// names it to the gateway by its process id and descriptor; the gateway
// opens it through /proc (OpenDest) and checks, before writing a byte,
// that it is a memory file sealed against shrinking (so that no later
// truncation can fault the gateway's writes), large enough, and holds the
// token (so that the gateway writes only to memory the client could
// write itself, the file the client handed over).

// DestOffset is where a destination's data starts: the token has the
// first page, so that the data is page-aligned.
const DestOffset = 4096

// MaxDestBytes bounds a destination's data (1 TiB): sizes and offsets
// computed from it cannot overflow.
const MaxDestBytes = 1 << 40

// Dest is the client's side of a destination.
type Dest struct {
	Pid, Fd int
	Token   []byte
	mem     []byte // the whole mapping, token page included
	close   func() error
}

// Data is the destination's data: size bytes, page-aligned.
func (d *Dest) Data() []byte { return d.mem[DestOffset:] }

// Close unmaps the destination and closes its file.
func (d *Dest) Close() error {
	if d.mem == nil {
		return nil
	}
	d.mem = nil
	return d.close()
}

// DestMap is the gateway's writable mapping of a client's destination.
type DestMap struct {
	Data  []byte // the data: exactly the size asked for
	mem   []byte
	cache *DestCache
	id    destID
}

// Close ends the use of the mapping: kept by its cache, if it has one,
// for a later read of the same memory file, unmapped otherwise.
func (m *DestMap) Close() error {
	if m.mem == nil {
		return nil
	}
	mem := m.mem
	m.mem, m.Data = nil, nil
	if m.cache != nil {
		m.cache.put(m.id, mem)
		return nil
	}
	return unmap(mem)
}

// destID identifies a memory file: while a mapping of it is kept, its
// inode, hence the number, cannot be reused.
type destID struct{ dev, ino uint64 }

// DestCache keeps the mappings of the last destinations written, for
// clients that read into the same memory again and again: mapping a large
// destination costs about a tenth of writing it (the page tables; 5.7 ms
// for 64 MiB, measured). A kept mapping holds its memory file, so that
// the client's memory is freed only when the mapping is dropped: at most
// MaxIdle of them, each for at most IdleFor after its last use.
type DestCache struct {
	MaxIdle int
	IdleFor time.Duration

	mu   sync.Mutex
	idle []*idleDest
}

type idleDest struct {
	id  destID
	mem []byte
	t   *time.Timer
}

// take returns a kept mapping of id of at least n bytes, taken out of the
// cache, or nil.
func (c *DestCache) take(id destID, n int64) []byte {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, e := range c.idle {
		if e.id == id && int64(len(e.mem)) >= n {
			e.t.Stop()
			c.idle = append(c.idle[:i], c.idle[i+1:]...)
			return e.mem
		}
	}
	return nil
}

// put keeps mem, dropping the oldest kept mapping if there are MaxIdle.
func (c *DestCache) put(id destID, mem []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.MaxIdle <= 0 {
		unmap(mem)
		return
	}
	if len(c.idle) >= c.MaxIdle {
		old := c.idle[0]
		old.t.Stop()
		unmap(old.mem)
		c.idle = c.idle[1:]
	}
	e := &idleDest{id: id, mem: mem}
	e.t = time.AfterFunc(c.IdleFor, func() { c.drop(e) })
	c.idle = append(c.idle, e)
}

// drop unmaps e if it is still kept.
func (c *DestCache) drop(e *idleDest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, k := range c.idle {
		if k == e {
			unmap(e.mem)
			c.idle = append(c.idle[:i], c.idle[i+1:]...)
			return
		}
	}
}

// Idle is how many mappings are kept.
func (c *DestCache) Idle() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.idle)
}

// Close unmaps every kept mapping.
func (c *DestCache) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.idle {
		e.t.Stop()
		unmap(e.mem)
	}
	c.idle = nil
}

// ErrDestRefused wraps every reason OpenDest refuses a destination.
var ErrDestRefused = errors.New("shared destination refused")

func refuse(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrDestRefused, fmt.Sprintf(format, args...))
}

// checkDestToken checks a token as the client sent it: TokenBytes long,
// and not all zeros (the contents of a fresh memory file).
func checkDestToken(token []byte) error {
	if len(token) != TokenBytes {
		return refuse("token of %d bytes, want %d", len(token), TokenBytes)
	}
	if bytes.Equal(token, make([]byte, TokenBytes)) {
		return refuse("token is all zeros")
	}
	return nil
}
