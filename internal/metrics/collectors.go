package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/zarrgate/zarrgate/gateway"
	"github.com/zarrgate/zarrgate/internal/bulk"
	"github.com/zarrgate/zarrgate/internal/membudget"
	"github.com/zarrgate/zarrgate/internal/retrybudget"
)

// Budget registers the memory budget's gauges, read when scraped.
func (r *Registry) Budget(b *membudget.Budget) {
	r.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "zarrgate_memory_budget_in_use_bytes",
			Help: "Bytes reserved against the memory budget (--memory-limit) by calls in flight and kept buffers.",
		}, func() float64 { return float64(b.InUse()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "zarrgate_memory_budget_limit_bytes",
			Help: "The memory budget (--memory-limit).",
		}, func() float64 { return float64(b.Limit()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "zarrgate_memory_budget_peak_bytes",
			Help: "The most bytes ever reserved against the memory budget at once.",
		}, func() float64 { return float64(b.Peak()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "zarrgate_memory_budget_waiting_calls",
			Help: "Calls waiting for memory of the budget (--memory-wait bounds the wait).",
		}, func() float64 { return float64(b.Waiting()) }),
	)
}

// Gateway registers the gateway's counters and gauges: metadata cache
// hits and misses, write conflicts, retries, shared-memory segments.
func (r *Registry) Gateway(g *gateway.Gateway) {
	st := g.Stats()
	r.reg.MustRegister(&gatewayCollector{g: g, st: st})
	r.Retries("store", func() retrybudget.Stats { s, _ := g.RetryStats(); return s })
	r.Retries("codec", func() retrybudget.Stats { _, c := g.RetryStats(); return c })
}

// Retries exports the counters of a retry budget (retries allowed and
// refused) as zarrgate_retries_total and zarrgate_retries_refused_total
// with the label tier: the gateway's store and codec tiers (Gateway), an
// S3 store's own (s3). One tier per budget and process.
func (r *Registry) Retries(tier string, stats func() retrybudget.Stats) {
	r.retries.mu.Lock()
	defer r.retries.mu.Unlock()
	r.retries.sources = append(r.retries.sources, retrySource{tier, stats})
}

type retrySource struct {
	tier  string
	stats func() retrybudget.Stats
}

// retryCollector is registered once (New), whatever the budgets: a store
// worker of S3 and a gateway in one process (serve) share its series.
type retryCollector struct {
	mu      sync.Mutex
	sources []retrySource
}

func (c *retryCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- retriesDesc
	ch <- retriesRefusedDesc
}

func (c *retryCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.sources {
		st := s.stats()
		ch <- prometheus.MustNewConstMetric(retriesDesc, prometheus.CounterValue, float64(st.Retries), s.tier)
		ch <- prometheus.MustNewConstMetric(retriesRefusedDesc, prometheus.CounterValue, float64(st.Exhausted), s.tier)
	}
}

var (
	cacheHitsDesc = prometheus.NewDesc("zarrgate_metadata_cache_hits_total",
		"Lookups answered by the gateway's metadata cache, by kind (node: a node's metadata; shard_index: a shard's index).", []string{"kind"}, nil)
	cacheMissesDesc = prometheus.NewDesc("zarrgate_metadata_cache_misses_total",
		"Lookups the gateway's metadata cache could not answer (read from the store), by kind.", []string{"kind"}, nil)
	conflictsDesc = prometheus.NewDesc("zarrgate_write_conflicts_total",
		"Read-modify-writes of a chunk or shard whose conditional write found the value changed (a concurrent writer), and that were read and merged again.", nil, nil)
	overrunsDesc = prometheus.NewDesc("zarrgate_write_flush_overruns_total",
		"Steps of a write's flush that needed more memory than the flush reserved before it started (strings longer than estimated, a stored object larger than the array's codecs write); such a step may wait for memory while its flush holds some.", nil, nil)
	retriesDesc = prometheus.NewDesc("zarrgate_retries_total",
		"Calls repeated after a transient failure, within the retry budget of the hop, by tier (store, codec: the gateway's calls to its workers; s3: a store's requests to S3, retried by the AWS SDK).", []string{"tier"}, nil)
	retriesRefusedDesc = prometheus.NewDesc("zarrgate_retries_refused_total",
		"Calls failed instead of repeated because the hop's retry budget was empty, by tier (store, codec, s3).", []string{"tier"}, nil)
	segmentsDesc = prometheus.NewDesc("zarrgate_shared_memory_segments",
		"Shared-memory segments of the gateway, by state (in_use: lent to reads in flight; idle: kept for later reads).", []string{"state"}, nil)
	inflightDesc = prometheus.NewDesc("zarrgate_codec_worker_batches_in_flight",
		"Batches sent to a codec worker and not yet answered, by worker address.", []string{"worker"}, nil)
)

type gatewayCollector struct {
	g  *gateway.Gateway
	st *gateway.Stats
}

func (c *gatewayCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{cacheHitsDesc, cacheMissesDesc, conflictsDesc, overrunsDesc, segmentsDesc} {
		ch <- d
	}
}

func (c *gatewayCollector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(cacheHitsDesc, c.st.NodeHits.Load(), "node")
	counter(cacheHitsDesc, c.st.IndexHits.Load(), "shard_index")
	counter(cacheMissesDesc, c.st.NodeMisses.Load(), "node")
	counter(cacheMissesDesc, c.st.IndexMisses.Load(), "shard_index")
	counter(conflictsDesc, c.st.WriteConflicts.Load())
	counter(overrunsDesc, c.st.FlushOverruns.Load())
	inUse, idle := c.g.SharedSegments()
	ch <- prometheus.MustNewConstMetric(segmentsDesc, prometheus.GaugeValue, float64(inUse), "in_use")
	ch <- prometheus.MustNewConstMetric(segmentsDesc, prometheus.GaugeValue, float64(idle), "idle")
}

// InFlighter is a remote codec engine that reports its batches in flight
// per worker (codecsvc/remote.Client).
type InFlighter interface {
	InFlight(func(worker string, batches int))
}

// CodecWorkers registers the gauge of batches in flight per codec worker.
// Its label values are the addresses of the configured workers (those
// the gateway has a stream open to): bounded by the deployment.
func (r *Registry) CodecWorkers(c InFlighter) {
	r.reg.MustRegister(inflightCollector{c})
}

type inflightCollector struct{ c InFlighter }

func (c inflightCollector) Describe(ch chan<- *prometheus.Desc) { ch <- inflightDesc }

func (c inflightCollector) Collect(ch chan<- prometheus.Metric) {
	c.c.InFlight(func(w string, n int) {
		ch <- prometheus.MustNewConstMetric(inflightDesc, prometheus.GaugeValue, float64(n), w)
	})
}

// FileSyncs exports a directory store's fsyncs as
// zarrgate_file_store_fsyncs_total with the label kind: "file" (a value's
// file, before its rename) and "dir" (a directory, once per group of
// concurrent renames). Both stay 0 under --durability none.
func (r *Registry) FileSyncs(syncs func() (files, dirs uint64)) {
	desc := prometheus.NewDesc("zarrgate_file_store_fsyncs_total", "fsyncs made by the directory store, by kind: file (a value before its rename) or dir (one per group of concurrent renames in a directory)", []string{"kind"}, nil)
	r.reg.MustRegister(fileSyncCollector{desc, syncs})
}

type fileSyncCollector struct {
	desc  *prometheus.Desc
	syncs func() (files, dirs uint64)
}

func (c fileSyncCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c fileSyncCollector) Collect(ch chan<- prometheus.Metric) {
	f, d := c.syncs()
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(f), "file")
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(d), "dir")
}

// CodecSharedMemory exports a gateway's use of shared memory with codec
// workers on its host (codecsvc/remote.Client.SharedStreams) as
// zarrgate_codec_shared_memory_streams_total (codec streams whose worker
// attached a segment) and zarrgate_codec_shared_memory_chunks_total
// (decoded chunks answered through one).
func (r *Registry) CodecSharedMemory(shared func() (streams, chunks uint64)) {
	r.reg.MustRegister(codecShmCollector{shared})
}

var (
	codecShmStreamsDesc = prometheus.NewDesc("zarrgate_codec_shared_memory_streams_total", "codec streams whose worker (on the gateway's host) attached a shared-memory segment", nil, nil)
	codecShmChunksDesc  = prometheus.NewDesc("zarrgate_codec_shared_memory_chunks_total", "decoded chunks a codec worker answered through shared memory instead of the stream", nil, nil)
)

type codecShmCollector struct {
	shared func() (streams, chunks uint64)
}

func (c codecShmCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- codecShmStreamsDesc
	ch <- codecShmChunksDesc
}

func (c codecShmCollector) Collect(ch chan<- prometheus.Metric) {
	s, n := c.shared()
	ch <- prometheus.MustNewConstMetric(codecShmStreamsDesc, prometheus.CounterValue, float64(s))
	ch <- prometheus.MustNewConstMetric(codecShmChunksDesc, prometheus.CounterValue, float64(n))
}

// Bulk exports a bulk listener's connections as
// zarrgate_bulk_connections_total with the label result (bulk.Results):
// accepted (handed to its read), bad_hello, unknown_ticket (never issued,
// used already, or expired), over_limit, timeout, tls_failed.
func (r *Registry) Bulk(l *bulk.Listener) {
	desc := prometheus.NewDesc("zarrgate_bulk_connections_total", "connections to the bulk listener (ReadSlab's blocks beside gRPC), by result: accepted, bad_hello, unknown_ticket, over_limit, timeout, tls_failed", []string{"result"}, nil)
	r.reg.MustRegister(bulkCollector{desc, l})
}

type bulkCollector struct {
	desc *prometheus.Desc
	l    *bulk.Listener
}

func (c bulkCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c bulkCollector) Collect(ch chan<- prometheus.Metric) {
	counts := c.l.Counts()
	for _, r := range bulk.Results {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(counts[r]), r)
	}
}
