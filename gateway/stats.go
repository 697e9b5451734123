package gateway

import "sync/atomic"

// Stats are counters of a gateway's work that its metrics read (package
// internal/metrics exports them to Prometheus; this package stays free of
// it, being below the transport). Plain atomics: counting costs a few
// nanoseconds on paths that do I/O.
type Stats struct {
	// NodeHits and NodeMisses count lookups of node metadata in the
	// metadata cache; IndexHits and IndexMisses those of shard indexes.
	NodeHits, NodeMisses, IndexHits, IndexMisses atomic.Uint64
	// WriteConflicts counts read-modify-writes of a chunk or shard whose
	// conditional write found the stored value changed (or lost its
	// worker) and that were read and merged again.
	WriteConflicts atomic.Uint64
	// FlushOverruns counts steps of a WriteSlab's flushes that needed more
	// memory than the flush reserved before it started (strings longer
	// than estimated, a stored object larger than the array's codecs
	// write): the one place a write may wait for memory holding some.
	FlushOverruns atomic.Uint64
}

// retries counts idempotent store and codec calls repeated after a
// transient failure (a worker went away), in all gateways of the process:
// retry is called from places that hold no gateway.
var retries atomic.Uint64

// Retries is how many idempotent store and codec calls the gateways of
// this process have repeated after a transient failure.
func Retries() uint64 { return retries.Load() }

// Stats are the gateway's counters.
func (g *Gateway) Stats() *Stats { return &g.stats }

// SharedSegments is how many shared-memory segments the gateway has lent
// to reads in flight, and how many it keeps idle for later reads.
func (g *Gateway) SharedSegments() (inUse, idle int) {
	g.idleMu.Lock()
	idle = len(g.idle)
	g.idleMu.Unlock()
	return len(g.shared), idle
}
