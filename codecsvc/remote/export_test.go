package remote

import (
	"sync/atomic"

	"github.com/zarrgate/zarrgate/internal/shm"
)

// DrainAfterPlace has the next batch given shared-memory regions find its
// stream's worker draining just after they were placed (the window
// between do choosing a stream and sending on it), so that the batch goes
// elsewhere. spaceBack reports whether that stream's segment has every
// byte of its ring free again; restore removes the hook.
func DrainAfterPlace() (spaceBack func() bool, restore func()) {
	var seg atomic.Pointer[sharedSeg]
	testHookPlaced = func(ps *procStream, r *regions) {
		if r == nil || !seg.CompareAndSwap(nil, r.s) {
			return
		}
		ps.mu.Lock()
		ps.draining = true
		ps.mu.Unlock()
	}
	spaceBack = func() bool {
		s := seg.Load()
		if s == nil {
			return false
		}
		s.mu.Lock()
		live := len(s.live)
		s.mu.Unlock()
		if live != 0 {
			return false
		}
		off := s.alloc(int64(len(s.seg.Data)) - shm.DataOffset)
		if off < 0 {
			return false
		}
		s.free(off)
		return true
	}
	return spaceBack, func() { testHookPlaced = nil }
}
