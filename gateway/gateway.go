// Package gateway is zarrgate's array engine: the hierarchy of groups and
// arrays of a Zarr store (v3, v2, NCZarr) and streaming reads and writes of
// hyperslabs, turned into store I/O and codec work.
//
// It is written against the store contract (storesvc.Store) and the codec
// engine interface (Codecs) only, never against a backend or generated
// stubs, so the same engine runs embedded (file store, in-process codecs)
// and over remote store and codec workers. Package arrayserver serves it
// over gRPC, translating between the wire and the engine's types.
package gateway

import (
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zarrgate/zarrgate/internal/membudget"
	"github.com/zarrgate/zarrgate/internal/retrybudget"
	"github.com/zarrgate/zarrgate/internal/shm"
	"github.com/zarrgate/zarrgate/storesvc"
)

// Config tunes a gateway. The zero value gives the defaults.
type Config struct {
	// MetadataTTL is how long node metadata and shard indexes are cached.
	// Writes through this gateway invalidate them at once; writes by other
	// gateways are seen after at most this long. Default 2s; negative
	// disables caching.
	MetadataTTL time.Duration
	// MaxChunkBytes is the largest decoded chunk (a shard's inner chunk,
	// for sharded arrays) or shard index the gateway reads or writes;
	// arrays with larger ones are ResourceExhausted. Default 1 GiB.
	MaxChunkBytes int64
	// MaxVariableBytes is the most element bytes one decoded chunk of a
	// string or bytes array may hold (the codecs' limit of the same name).
	// Default 64 MiB.
	MaxVariableBytes int64
	// MaxSlabChunks is the most chunks (or shards) one ReadSlab or
	// WriteSlab may touch, which bounds its store calls. Default 2^20.
	MaxSlabChunks int64
	// Budget is the process's memory budget: the buffers of every call are
	// reserved against it before they are allocated. Default: unlimited
	// (cmd/zarrgate always sets one).
	Budget *membudget.Budget
	// MaxSlabBytes is the largest slab (decoded bytes) one ReadSlab or
	// WriteSlab may move; larger ones fail with ResourceExhausted. Default
	// 64 GiB.
	MaxSlabBytes int64
	// Parallelism is how many chunks are fetched and decoded (or encoded)
	// at once. Default 4 × GOMAXPROCS. A WriteSlab has up to
	// max(Parallelism, 32) chunks being stored at once (flushDepth).
	Parallelism int
	// BackgroundNice is how much lower than the process's the scheduling
	// priority (nice value) of a ReadSlab's chunk workers is while the
	// call shares the gateway with other calls and decodes in this
	// process, so that the kernel runs the other calls' threads first
	// when they wake (fair.go; Linux only). Default 10; negative: never
	// lowered.
	BackgroundNice int
	// MaxWriteAttempts bounds the read-modify-write retries of one chunk
	// under contention. Default 64.
	MaxWriteAttempts int
	// WriteBufferBytes bounds the decoded data a WriteSlab holds for chunks
	// whose blocks have not all arrived. Default 256 MiB.
	WriteBufferBytes int64
	// SpillDir is where a WriteSlab larger than WriteBufferBytes keeps
	// the partial chunks it cannot hold in memory. Default os.TempDir().
	SpillDir string
	// SharedMemory lets ReadSlabShared pass block data to clients on this
	// host (same user) through shared-memory segments, or write it into
	// memory of the client's (destinations). Off, blocks travel inline.
	SharedMemory bool
	// SharedMemoryBytes is the size of one segment. Default 32 MiB.
	SharedMemoryBytes int64
	// MaxSharedReads bounds the segments in use at once (each holds
	// SharedMemoryBytes of memory); further ReadSlabShared calls send their
	// blocks inline. Up to two idle segments are kept for later calls.
	// Default 4.
	MaxSharedReads int
	// StoreRetries and CodecRetries are the retry budgets of the store
	// and codec tiers: every retry of a call to the tier takes a token,
	// and with none left the call fails at once (see retry.go). Default:
	// retrybudget.New("store tier" / "codec tier", 0, 0, 0).
	StoreRetries, CodecRetries *retrybudget.Budget
	// WorkerFetch has the codec engine's workers read the encoded chunks
	// of unsharded arrays from the store tier themselves, when the engine
	// offers it (codec.FetchDecoder): the gateway sends keys, not bytes.
	// Off, the gateway reads them and sends them on.
	WorkerFetch bool
}

// CodecRetryBurst is the codec tier's retry budget burst (the default
// budget's is 10): a codec worker that dies fails every call in flight on
// it at once — up to the gateway's concurrent encodes (32 flushes) and
// decodes — and each is idempotent and cheap to repeat on another
// worker, so each may be retried once, while the ratio still bounds a
// failing tier's retries to ~11 % of the requests sent it.
const CodecRetryBurst = 64

func (c Config) withDefaults() Config {
	if c.StoreRetries == nil {
		c.StoreRetries = retrybudget.New("store tier", 0, 0, 0)
	}
	if c.CodecRetries == nil {
		c.CodecRetries = retrybudget.New("codec tier", 0, CodecRetryBurst, 0)
	}
	if c.MetadataTTL == 0 {
		c.MetadataTTL = 2 * time.Second
	}
	if c.MaxSlabBytes == 0 {
		c.MaxSlabBytes = 64 << 30
	}
	if c.MaxChunkBytes == 0 {
		c.MaxChunkBytes = 1 << 30
	}
	if c.MaxVariableBytes == 0 {
		c.MaxVariableBytes = 64 << 20
	}
	if c.MaxSlabChunks == 0 {
		c.MaxSlabChunks = 1 << 20
	}
	if c.Budget == nil {
		c.Budget = membudget.Unlimited()
	}
	if c.Parallelism == 0 {
		c.Parallelism = 4 * runtime.GOMAXPROCS(0)
	}
	if c.BackgroundNice == 0 {
		c.BackgroundNice = 10
	}
	if c.MaxWriteAttempts == 0 {
		c.MaxWriteAttempts = 64
	}
	if c.WriteBufferBytes == 0 {
		c.WriteBufferBytes = 256 << 20
	}
	if c.SharedMemoryBytes == 0 {
		c.SharedMemoryBytes = 32 << 20
	}
	c.SharedMemoryBytes = max(c.SharedMemoryBytes, 1<<20)
	if c.MaxSharedReads == 0 {
		c.MaxSharedReads = 4
	}
	return c
}

// Gateway serves the arrays of one store.
type Gateway struct {
	store  *storesvc.Portable
	codecs Codecs
	cfg    Config
	cache  *metaCache    // nodes and shard indexes
	shared chan struct{} // a slot per segment in use
	idleMu sync.Mutex
	idle   []idleSegment  // segments kept for later calls, the latest last
	dests  *shm.DestCache // mappings of clients' destinations, for their next reads
	stats  Stats
	sched  *scheduler // processor shares between calls (fair.go)
	// inProcess says the codec engine decodes and encodes in this
	// process, on its processors (which the scheduler shares out).
	inProcess bool
	// localReads says the store's reads run on this process's processors
	// too (storesvc.LocalReads: the file and memory stores), so that,
	// sharing, a call's fetches take its slots as its decodes do.
	localReads bool
	// lowered counts the chunk workers on threads of lower priority
	// (lowerPriority), each a thread of its own: at most maxLowered.
	lowered atomic.Int64
}

// maxLowered bounds the chunk workers of all calls on threads of lower
// priority at once (4 × Parallelism: four calls' worth), so that many
// calls at once cannot make the process run out of threads (Go stops a
// process past 10,000); further workers keep the process's priority.
func (g *Gateway) maxLowered() int64 { return 4 * int64(g.cfg.Parallelism) }

// idleSegment is a shared-memory segment kept for a later call, with the
// budget reservation for its memory.
type idleSegment struct {
	seg *shm.Segment
	res membudget.Reservation
}

// New returns a gateway over store, running codec work on codecs.
func New(store storesvc.Store, codecs Codecs, cfg Config) *Gateway {
	cfg = cfg.withDefaults()
	// Partial chunks of WriteSlabs that a killed process left behind.
	if err := CleanSpill(cfg.SpillDir); err != nil {
		slog.Warn("removing stale spill files", "dir", cfg.SpillDir, "err", err)
	}
	return &Gateway{
		store:  storesvc.Wrap(store),
		codecs: codecs,
		cfg:    cfg,
		cache:  newMetaCache(cfg.MetadataTTL, cacheMaxEntries, cacheMaxBytes),
		shared: make(chan struct{}, cfg.MaxSharedReads),
		dests:  &shm.DestCache{MaxIdle: maxIdleDests, IdleFor: destIdleFor},
		sched:  newScheduler(cfg.Parallelism),
		// An engine that says nothing is taken to run here.
		inProcess:  !isRemote(codecs),
		localReads: storesvc.LocalReads(store),
	}
}

// isRemote reports whether a codec engine says it runs its work in other
// processes (codec workers), where it uses none of this one's processors.
func isRemote(c Codecs) bool {
	r, ok := c.(interface{ Remote() bool })
	return ok && r.Remote()
}

// Store is the store behind the gateway.
func (g *Gateway) Store() *storesvc.Portable { return g.store }

// Budget is the memory budget the gateway's calls reserve against, for
// layers that hold memory of their own per call (an HTTP slab handler's
// reorder buffer, for one).
func (g *Gateway) Budget() *membudget.Budget { return g.cfg.Budget }
