// Package metrics is zarrgate's Prometheus instrumentation: one registry
// per process with the Go and process collectors, the per-RPC metrics of
// go-grpc-middleware's prometheus provider for servers and for the
// gateway's clients of its workers, and zarrgate's own metrics (names
// start with zarrgate_; docs/operations.md lists them all).
//
// The packages that do the work sit below the transport (internal/archtest)
// and must not import Prometheus, which pulls in protobuf. So they keep
// plain atomic counters or tell a small observer interface
// (storesvc.Observer, codec.Observer), and this package turns those into
// metrics: observers that update collectors as calls happen, and
// collectors that read gauges and counters (membudget.Budget,
// gateway.Stats) when scraped.
package metrics

import (
	"context"
	"net/http"
	"sync"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/storesvc"
)

// Buckets of the latency histograms, in seconds: from 100 µs (a cached
// file read) to 30 s (a slab streamed over a slow link), roughly ×2.5 per
// step, so a dashboard's quantiles stay within a factor of the truth
// everywhere in that range.
var latencyBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// Registry is a process's metrics.
type Registry struct {
	reg    *prometheus.Registry
	server *grpcprom.ServerMetrics
	client *grpcprom.ClientMetrics

	storeCalls    *prometheus.CounterVec
	storeDuration *prometheus.HistogramVec
	storeRead     *prometheus.CounterVec
	storeWritten  *prometheus.CounterVec

	codecChunks   *prometheus.CounterVec
	codecDuration *prometheus.HistogramVec
	codecFailed   *prometheus.CounterVec

	mu       sync.Mutex
	backends map[string]*storeObserver

	codecMu    sync.RWMutex
	codecCache map[codecKey]*codecSeries

	retries retryCollector
}

// New returns a registry with the Go runtime and process collectors, the
// gRPC server and client metrics and zarrgate's store and codec metrics
// registered. Series appear as they are first used (the gRPC server's
// once InitServer has seen the registered services).
func New() *Registry {
	r := &Registry{
		reg: prometheus.NewRegistry(),
		server: grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(
			grpcprom.WithHistogramBuckets(latencyBuckets))),
		client: grpcprom.NewClientMetrics(grpcprom.WithClientHandlingTimeHistogram(
			grpcprom.WithHistogramBuckets(latencyBuckets))),
		storeCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "zarrgate_store_calls_total",
			Help: "Calls passed to the store backend, by backend, operation and status code.",
		}, []string{"backend", "op", "code"}),
		storeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "zarrgate_store_call_duration_seconds",
			Help:    "Time the store backend took per call, by backend and operation (listings: until the caller stopped iterating).",
			Buckets: latencyBuckets,
		}, []string{"backend", "op"}),
		storeRead: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "zarrgate_store_read_bytes_total",
			Help: "Value bytes the store backend returned (whole values or the ranges asked for), by backend.",
		}, []string{"backend"}),
		storeWritten: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "zarrgate_store_written_bytes_total",
			Help: "Value bytes passed to the store backend to write (whole values and partial writes), by backend.",
		}, []string{"backend"}),
		codecChunks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "zarrgate_codec_chunks_total",
			Help: "Chunks in the batches decoded or encoded, by op (decode, encode) and codec (the chain's outermost codec other than a checksum).",
		}, []string{"op", "codec"}),
		codecDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "zarrgate_codec_batch_duration_seconds",
			Help:    "Time per batch of chunks decoded or encoded (on the gateway: including the round trip to a codec worker), by op and codec.",
			Buckets: latencyBuckets,
		}, []string{"op", "codec"}),
		codecFailed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "zarrgate_codec_failed_batches_total",
			Help: "Batches of chunks whose decoding or encoding failed, by op and status code.",
		}, []string{"op", "code"}),
		backends:   map[string]*storeObserver{},
		codecCache: map[codecKey]*codecSeries{},
	}
	r.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		r.server, r.client,
		r.storeCalls, r.storeDuration, r.storeRead, r.storeWritten,
		r.codecChunks, r.codecDuration, r.codecFailed,
		&r.retries,
	)
	return r
}

// BuildInfo registers zarrgate_build_info: 1, with what the binary is as
// its labels (Prometheus's convention for build information), so that
// dashboards and alerts can tell builds apart, the cgocodecs build of the
// container image from the pure-Go one included.
func (r *Registry) BuildInfo(version, revision, goVersion, codecs string) {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "zarrgate_build_info",
		Help: "1, labelled with the binary's version, VCS revision, Go version and what does its codec work (pure Go, or the C libraries of the cgocodecs build).",
	}, []string{"version", "revision", "goversion", "codecs"})
	g.WithLabelValues(version, revision, goVersion, codecs).Set(1)
	r.reg.MustRegister(g)
}

// Registerer is where further collectors of this process go.
func (r *Registry) Registerer() prometheus.Registerer { return r.reg }

// Gatherer reads the registry (for tests and the handler).
func (r *Registry) Gatherer() prometheus.Gatherer { return r.reg }

// Handler serves the registry in the Prometheus text (or OpenMetrics)
// format. A failing collector is reported in the response and the rest
// still served.
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, MaxRequestsInFlight: 4})
}

// ServerOptions install the per-RPC server metrics (grpc_server_*). They
// use grpc.UnaryInterceptor and grpc.StreamInterceptor, which gRPC runs
// before every chained interceptor: the metrics see each call's final
// status as the client does (after the guard has given every error its
// code), and its whole duration. gRPC allows one such option per server.
func (r *Registry) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.UnaryInterceptor(r.server.UnaryServerInterceptor()),
		grpc.StreamInterceptor(r.server.StreamServerInterceptor()),
	}
}

// InitServer creates the per-RPC series of every method registered on
// srv at zero, so that rates and ratios exist before the first call.
func (r *Registry) InitServer(srv *grpc.Server) { r.server.InitializeMetrics(srv) }

// DialOptions install the per-RPC client metrics (grpc_client_*) on a
// connection to workers, outermost (see ServerOptions): a call that
// fails for want of a ready worker is counted too.
func (r *Registry) DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithUnaryInterceptor(r.client.UnaryClientInterceptor()),
		grpc.WithStreamInterceptor(r.client.StreamClientInterceptor()),
	}
}

// Backends are the values of the backend label.
var Backends = []string{"file", "memory", "zip", "s3", "remote"}

// StoreObserver returns the observer of a store of the named backend
// (one of Backends), for storesvc.WithObserver. Observers of one backend
// share their series.
func (r *Registry) StoreObserver(backend string) storesvc.Observer {
	r.mu.Lock()
	defer r.mu.Unlock()
	if o := r.backends[backend]; o != nil {
		return o
	}
	o := &storeObserver{r: r, backend: backend,
		read: r.storeRead.WithLabelValues(backend), written: r.storeWritten.WithLabelValues(backend)}
	for op := range storesvc.NumOps {
		o.ok[op] = r.storeCalls.WithLabelValues(backend, op.String(), errs.CodeOK.String())
		o.dur[op] = r.storeDuration.WithLabelValues(backend, op.String())
	}
	r.backends[backend] = o
	return o
}

// storeObserver updates the store metrics of one backend. The series of
// successful calls are looked up once; those of failures by code as they
// happen (rare, and at most 17 codes).
type storeObserver struct {
	r             *Registry
	backend       string
	read, written prometheus.Counter
	ok            [storesvc.NumOps]prometheus.Counter
	dur           [storesvc.NumOps]prometheus.Observer
}

func (o *storeObserver) StoreCall(op storesvc.Op, start time.Time, read, written int64, err error) {
	if op >= storesvc.NumOps {
		return
	}
	o.dur[op].Observe(time.Since(start).Seconds())
	if err == nil {
		o.ok[op].Inc()
	} else {
		o.r.storeCalls.WithLabelValues(o.backend, op.String(), errs.CodeOf(err).String()).Inc()
	}
	if read > 0 {
		o.read.Add(float64(read))
	}
	if written > 0 {
		o.written.Add(float64(written))
	}
}

// CodecObserver is the observer of codec batches, for
// codecsvc.Server.SetObserver and Engine.
func (r *Registry) CodecObserver() codec.Observer { return codecObserver{r} }

type codecObserver struct{ r *Registry }

func (o codecObserver) Batch(encode bool, spec *codec.BatchSpec, chunks int, start time.Time, err error) {
	op := "decode"
	if encode {
		op = "encode"
	}
	if err != nil {
		o.r.codecFailed.WithLabelValues(op, errs.CodeOf(err).String()).Inc()
		return
	}
	s := o.r.codecSeriesOf(encode, CodecLabel(spec))
	s.duration.Observe(time.Since(start).Seconds())
	s.chunks.Add(float64(chunks))
}

// codecSeries are the series of successful batches of one op and codec
// label, looked up once (a label lookup hashes the label values each
// time): the labels are few, CodecLabel bounds them.
type codecSeries struct {
	duration prometheus.Observer
	chunks   prometheus.Counter
}

type codecKey struct {
	encode bool
	label  string
}

func (r *Registry) codecSeriesOf(encode bool, label string) *codecSeries {
	k := codecKey{encode, label}
	r.codecMu.RLock()
	s := r.codecCache[k]
	r.codecMu.RUnlock()
	if s != nil {
		return s
	}
	op := "decode"
	if encode {
		op = "encode"
	}
	r.codecMu.Lock()
	defer r.codecMu.Unlock()
	if s = r.codecCache[k]; s == nil {
		s = &codecSeries{r.codecDuration.WithLabelValues(op, label), r.codecChunks.WithLabelValues(op, label)}
		r.codecCache[k] = s
	}
	return s
}

// checksums are codecs that only append a checksum: a chain's label is
// the codec before them, which says how the chunk is stored.
var checksums = map[string]bool{"crc32c": true, "numcodecs.crc32": true, "numcodecs.crc32c": true,
	"numcodecs.adler32": true, "numcodecs.fletcher32": true, "numcodecs.jenkins_lookup3": true}

var (
	registeredOnce sync.Once
	registered     map[string]bool
)

// CodecLabel is the codec label of a batch: the chain's outermost codec
// that is not a checksum ("zstd" for bytes+zstd+crc32c, "bytes" for an
// uncompressed chain). Only codecs this build supports name a label, and
// anything else is "other", so that a client's metadata cannot add series:
// the label's values are bounded by codecsvc.Codecs().
func CodecLabel(spec *codec.BatchSpec) string {
	registeredOnce.Do(func() {
		registered = map[string]bool{}
		for _, n := range codecsvc.Codecs() {
			registered[n] = true
		}
	})
	cs := spec.Codecs
	for i := len(cs) - 1; i >= 0; i-- {
		n := cs[i].Name
		if checksums[n] && i > 0 {
			continue
		}
		if registered[n] {
			return n
		}
		break
	}
	if len(cs) == 0 {
		return "none"
	}
	return "other"
}

// Engine wraps a codec engine so that its batches are observed: the
// gateway's, whether it runs codecs in process or on workers.
func (r *Registry) Engine(e codec.Engine) codec.Engine {
	w := &engine{Engine: e, obs: r.CodecObserver()}
	if sd, ok := e.(codec.SelectDecoder); ok {
		// The engine's selections stay offered (codec workers answer
		// partial reads with the selected part only), and so does
		// worker-fetch.
		se := &selectEngine{w, sd}
		if fd, ok := e.(codec.FetchDecoder); ok {
			fe := &fetchEngine{se, fd}
			if ch, ok := e.(codec.FetchChooser); ok {
				// and so does its choice of worker-fetch per batch.
				return &chooseEngine{fe, ch}
			}
			return fe
		}
		return se
	}
	return w
}

// chooseEngine is fetchEngine for engines that choose worker-fetch per
// batch (--codec-choice auto).
type chooseEngine struct {
	*fetchEngine
	ch codec.FetchChooser
}

func (e *chooseEngine) PreferFetch(spec *codec.BatchSpec, n int, stored, selected int64) bool {
	return e.ch.PreferFetch(spec, n, stored, selected)
}

// fetchEngine is selectEngine for engines whose workers fetch.
type fetchEngine struct {
	*selectEngine
	fd codec.FetchDecoder
}

func (e *fetchEngine) DecodeFetched(ctx context.Context, spec *codec.BatchSpec, refs []codec.Ref, sel []codec.Selection) ([]codec.Chunk, []bool, error) {
	start := time.Now()
	out, found, err := e.fd.DecodeFetched(ctx, spec, refs, sel)
	e.obs.Batch(false, spec, len(refs), start, err)
	return out, found, err
}

// selectEngine is engine for engines that take selections.
type selectEngine struct {
	*engine
	sd codec.SelectDecoder
}

func (e *selectEngine) DecodeSelected(ctx context.Context, spec *codec.BatchSpec, encoded [][]byte, sel []codec.Selection) ([]codec.Chunk, error) {
	start := time.Now()
	out, err := e.sd.DecodeSelected(ctx, spec, encoded, sel)
	e.obs.Batch(false, spec, len(encoded), start, err)
	return out, err
}

type engine struct {
	codec.Engine
	obs codec.Observer
}

func (e *engine) Decode(ctx context.Context, spec *codec.BatchSpec, encoded [][]byte) ([]codec.Chunk, error) {
	start := time.Now()
	out, err := e.Engine.Decode(ctx, spec, encoded)
	e.obs.Batch(false, spec, len(encoded), start, err)
	return out, err
}

// Remote passes on whether the wrapped engine runs on codec workers (the
// gateway shares out only its own processors' codec work).
// EncodesOwned forwards the engine's (codecsvc.Local.EncodesOwned).
func (e *engine) EncodesOwned() bool {
	o, ok := e.Engine.(interface{ EncodesOwned() bool })
	return ok && o.EncodesOwned()
}

// Stage forwards the engine's (codec.Stager), or lends nothing.
func (e *engine) Stage(sizes []int64) ([][]byte, []func()) {
	if st, ok := e.Engine.(codec.Stager); ok {
		return st.Stage(sizes)
	}
	return nil, nil
}

func (e *engine) Remote() bool {
	r, ok := e.Engine.(interface{ Remote() bool })
	return ok && r.Remote()
}

func (e *engine) Encode(ctx context.Context, spec *codec.BatchSpec, chunks []codec.Chunk) ([][]byte, error) {
	start := time.Now()
	out, err := e.Engine.Encode(ctx, spec, chunks)
	e.obs.Batch(true, spec, len(chunks), start, err)
	return out, err
}
