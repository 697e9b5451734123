// The shared-memory receive path of slab reads: the client's side of a
// ReadSlabShared segment, and the mappings kept for reuse.

package client

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"google.golang.org/grpc"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"github.com/zarrgate/zarrgate/internal/shm"
)

// sharedMinElements is the smallest slab read through shared memory: for
// smaller ones, setting up a segment costs more than it saves.
const sharedMinElements = 1 << 18

// sharedIn is the client's side of a ReadSlabShared segment. Blocks are
// released in the order they arrived, as soon as they and every block
// before them are copied out and they add up to an eighth of the ring;
// they may be copied out in any order, by several goroutines.
type sharedIn struct {
	m      *mapping
	stream grpc.BidiStreamingClient[gatewayv1.ReadSlabSharedRequest, gatewayv1.ReadSlabSharedResponse]
	batch  int64 // release once this many bytes are done with

	mu       sync.Mutex
	held     uint64           // blocks handed out so far
	oldest   uint64           // the oldest block not done with
	finished map[uint64]int64 // done with, after a block that is not: bytes
	blocks   uint64           // done with in order, not released yet
	bytes    int64
	out      sync.WaitGroup // blocks not done with
	ended    bool           // the gateway's end came and everything is released
}

// data is a shared block's data in the mapping.
func (s *sharedIn) data(r *gatewayv1.SharedRange) ([][]byte, error) {
	if s == nil {
		return nil, errors.New("a block in shared memory, but no segment is attached")
	}
	off, n := r.GetOffset(), r.GetLength()
	if off < shm.DataOffset || off > uint64(len(s.m.Data)) || n > uint64(len(s.m.Data))-off {
		return nil, fmt.Errorf("shared block range [%d, +%d) outside the %d-byte segment", off, n, len(s.m.Data))
	}
	return [][]byte{s.m.Data[off : off+n]}, nil
}

// hold hands out the next block, of n bytes, and returns its done.
func (s *sharedIn) hold(n uint64) func() {
	s.mu.Lock()
	i := s.held
	s.held++
	s.mu.Unlock()
	s.out.Add(1)
	var once sync.Once
	return func() { once.Do(func() { s.finish(i, int64(n)) }) }
}

// finish records block i as done with, and releases what can be.
func (s *sharedIn) finish(i uint64, n int64) {
	defer s.out.Done()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.finished == nil {
		s.finished = map[uint64]int64{}
	}
	s.finished[i] = n
	for {
		n, ok := s.finished[s.oldest]
		if !ok {
			break
		}
		delete(s.finished, s.oldest)
		s.oldest++
		s.blocks++
		s.bytes += n
	}
	if s.bytes >= s.batch {
		s.release()
	}
}

// release sends the release of the blocks done with; s.mu is held (the
// stream takes one sender at a time). A failed send is left for the
// stream's status to report.
func (s *sharedIn) release() {
	if s.blocks == 0 {
		return
	}
	s.stream.Send(&gatewayv1.ReadSlabSharedRequest{Message: &gatewayv1.ReadSlabSharedRequest_Release{Release: &gatewayv1.SharedRelease{Blocks: s.blocks}}})
	s.blocks, s.bytes = 0, 0
}

// wait waits until every block handed out is done with.
func (s *sharedIn) wait() { s.out.Wait() }

// end answers the gateway's end of blocks: once every block is copied
// out, all of them are released, and the mapping can serve a later read if
// the gateway lends this segment again.
func (s *sharedIn) end() {
	s.wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.release()
	s.ended = true
}

// mappings keeps up to two mappings of gateway segments whose reads have
// ended: a gateway lends its idle segments to later reads, and a client
// that still has one mapped skips opening and mapping it again.
type mappings struct {
	mu   sync.Mutex
	idle []*mapping
}

// mapping is a mapped segment and what identifies it: path, size, token.
type mapping struct {
	*shm.Mapping
	key string
}

// attach returns an idle mapping of the segment, or maps it.
func (c *mappings) attach(path string, size int64, token []byte) (*mapping, error) {
	key := fmt.Sprintf("%s\x00%d\x00%x", path, size, token)
	c.mu.Lock()
	for i, m := range c.idle {
		if m.key == key {
			c.idle = slices.Delete(c.idle, i, i+1)
			c.mu.Unlock()
			return m, nil
		}
	}
	c.mu.Unlock()
	m, err := shm.Attach(path, size, token)
	if err != nil {
		return nil, err
	}
	return &mapping{Mapping: m, key: key}, nil
}

// detach ends a read's use of m: kept idle if the read ended cleanly (the
// oldest idle mapping makes room), unmapped otherwise.
func (c *mappings) detach(m *mapping, keep bool) {
	if m == nil {
		return
	}
	if !keep {
		m.Close()
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.idle) == 2 {
		c.idle[0].Close()
		c.idle = c.idle[1:]
	}
	c.idle = append(c.idle, m)
}

// close unmaps every idle mapping.
func (c *mappings) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.idle {
		m.Close()
	}
	c.idle = nil
}
