package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/codecsvc"
	codecremote "github.com/zarrgate/zarrgate/codecsvc/remote"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/gateway"
	"github.com/zarrgate/zarrgate/gateway/arrayserver"
	"github.com/zarrgate/zarrgate/internal/membudget"
	"github.com/zarrgate/zarrgate/internal/retrybudget"
	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/internal/shm"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/remote"
	"github.com/zarrgate/zarrgate/storesvc/storeserver"
)

// runStoreWorker serves StoreService over one backend: the storage tier
// of a scaled-out deployment.
func runStoreWorker(ctx context.Context, args []string, _, stderr io.Writer) error {
	fs := newFlags("store-worker", stderr)
	root, readOnly := storeFlags(fs)
	durability := durabilityFlag(fs)
	sf := addServerFlags(fs, "127.0.0.1:50052")
	inject := injectLatencyFlag(fs, "call")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	logger, err := sf.logger(ctx, stderr)
	if err != nil {
		return err
	}
	sf.extra = injectLatency(logger, *inject, false)
	if err := sf.startAdmin(ctx, logger); err != nil {
		return err
	}
	store, err := openServedStore(ctx, logger, *root, *readOnly, *durability, storeObserverOpts(sf.admin.reg, backendOf(*root))...)
	if err != nil {
		return err
	}
	defer store.Close()
	exportStoreRetries(sf.admin.reg, store)
	return sf.serveWith(ctx, logger, "zarrgate store-worker serving", func(srv *rpc.Server) {
		storeserver.New(store).Register(srv)
	}, "root", *root, "read_only", *readOnly, "durability", *durability)
}

// runCodecWorker serves CodecService: the codec tier, CPU-bound, sized to
// the compression load.
//
// Its memory is bounded by --memory-limit: every batch reserves what it
// needs before it is decoded or encoded (codecsvc.NewBudgetServer), and
// the Go runtime's soft limit is set to match, so that no request, however
// large its chunks claim to be, can take the worker down.
func runCodecWorker(ctx context.Context, args []string, _, stderr io.Writer) error {
	fs := newFlags("codec-worker", stderr)
	sf := addServerFlags(fs, "127.0.0.1:50053")
	budget := budgetFlags(fs)
	limits := codecLimitFlags(fs)
	inject := injectLatencyFlag(fs, "batch")
	storeTarget := fs.String("store", "", "store workers to read encoded chunks from when a gateway sends keys instead of bytes (gateway --codec-fetch worker), in the gateway's --store forms; empty: batches must carry their bytes. Anyone who may call this worker can then read the store through it: accept only the gateway tier (--client-ca)")
	tierWait := fs.Duration("tier-wait", rpc.DefaultTierWait, "with --store: how long a batch waits for a ready store worker before it fails with UNAVAILABLE")
	shared := fs.Bool("shared-memory", true, "accept a gateway's offer of shared memory on a codec stream (a gateway on this host, of this user): its decode batches then read encoded chunks from, and write decoded chunks into, the gateway's memory instead of the socket")
	peerTLS := peerTLSFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *tierWait <= 0 {
		return usageError{fmt.Errorf("--tier-wait %v: want a positive duration", *tierWait)}
	}
	logger, err := sf.logger(ctx, stderr)
	if err != nil {
		return err
	}
	sf.extra = injectLatency(logger, *inject, true)
	peer, err := peerTLS(logger)
	if err != nil {
		return err
	}
	lim := limits()
	if err := sf.startAdmin(ctx, logger); err != nil {
		return err
	}
	var fetcher codecsvc.Fetcher
	if *storeTarget != "" {
		t := &rpc.Tier{Name: "store", Target: *storeTarget, Wait: *tierWait, Logger: logger, TLS: peer}
		scc, err := rpc.DialWorkers(t.Target, t.DialOptions()...)
		if err != nil {
			return fmt.Errorf("--store %s: %w", *storeTarget, err)
		}
		defer scc.Close()
		t.Watch(scc)
		sf.admin.addCheck(t.Ready)
		store, err := connectStore(ctx, logger, scc, *storeTarget)
		if err != nil {
			return err
		}
		fetcher = storeFetcher{store}
	}
	return sf.serveWith(ctx, logger, "zarrgate codec-worker serving", func(srv *rpc.Server) {
		b := budget(logger)
		cs := codecsvc.NewBudgetServer(codecsvc.NewLocalLimits(lim), b)
		cs.SetSharedMemory(*shared)
		if fetcher != nil {
			cs.SetFetcher(fetcher)
		}
		if reg := sf.admin.reg; reg != nil {
			cs.SetObserver(reg.CodecObserver())
			reg.Budget(b)
		}
		cs.Register(srv)
		// Process streams last as long as the gateway keeps them: on
		// shutdown the worker asks it to close them (see codecsvc.Drain).
		srv.OnDrain(func() {
			logger.Info("draining: told the Process streams open to finish and close", "streams", cs.Drain())
		})
	}, "max_chunk_bytes", membudget.Size(lim.MaxChunkBytes), "max_variable_chunk_bytes", membudget.Size(lim.MaxVariableBytes), "store", *storeTarget, "shared_memory", *shared)
}

// storeFetcher reads a codec worker's encoded chunks from its store tier
// (worker-fetch). Keys are checked by the store's rules here, before any
// call, and again by the store workers. The store tier's calls are not
// retried here: a batch that fails with UNAVAILABLE is retried whole by
// the gateway, within its codec tier's retry budget (one retry layer per
// hop).
type storeFetcher struct{ s *storesvc.Portable }

func (f storeFetcher) Fetch(ctx context.Context, refs []codec.Ref, max int64) ([][]byte, []bool, error) {
	reqs := make([]storesvc.KeyRange, len(refs))
	for i, r := range refs {
		if err := storesvc.ValidateKey(r.Key); err != nil {
			return nil, nil, err
		}
		reqs[i].Key = r.Key
		switch {
		case r.Length > 0:
			reqs[i].Range = storesvc.Bounded(r.Offset, r.Length)
		case r.Offset > 0:
			reqs[i].Range = storesvc.FromOffset(r.Offset)
		}
	}
	vals, err := f.s.GetPartialValuesMax(ctx, reqs, max)
	if err != nil {
		return nil, nil, err
	}
	out, found := make([][]byte, len(vals)), make([]bool, len(vals))
	for i, v := range vals {
		if g := refs[i].Generation; v.Found && g != "" && v.Generation != "" && v.Generation != g {
			return nil, nil, errs.New(errs.Aborted, "%q changed since its index was read (generation %q, want %q)", refs[i].Key, v.Generation, g)
		}
		out[i], found[i] = v.Data, v.Found
	}
	return out, found, nil
}

// runGateway serves the gateway over pools of store workers and, with
// --codec, codec workers: the scaled-out deployment. Each pool's target is
// resolved again every --worker-refresh, its workers are health-checked
// and work is spread over the ready ones (rpc.DialPool; the codec streams
// follow them, codecremote.NewPool); a worker that fails is skipped and
// used again when it comes back. A call that needs a tier with
// no ready worker fails with Unavailable after --tier-wait, logged as a
// warning, instead of waiting for the tier to come back.
func runGateway(ctx context.Context, args []string, _, stderr io.Writer) error {
	fs := newFlags("gateway", stderr)
	storeTarget := fs.String("store", "", "store workers: host:port,host:port,..., file:///path (a file listing addresses, read again every --worker-refresh), or a gRPC target such as dns:///store-workers:50052 (required)")
	codecTarget := fs.String("codec", "", "codec workers, in the same forms; empty runs codecs in this process")
	codecFetch := fs.String("codec-fetch", "gateway", "with --codec: who reads the encoded chunks from the store tier: the gateway, which sends them on to the codec workers (gateway), or the codec workers themselves, given only keys (and, for a shard's inner chunks, the ranges of the shard's index, which the gateway reads) (worker: the workers need --store; with --codec-choice auto, the cost model chooses per batch between worker-fetch and reading and decoding in the gateway)")
	codecChoice := fs.String("codec-choice", "offload", "with --codec: offload every codec batch to the workers (offload), or decode each batch where the cost model says it costs this process less CPU (auto: docs/architecture.md)")
	tierWait := fs.Duration("tier-wait", rpc.DefaultTierWait, "how long a call waits for a ready store or codec worker when a tier has none, before it fails with UNAVAILABLE")
	codecShared := sizeFlag(fs, "codec-shared-memory-bytes", codecremote.DefaultSharedMemoryBytes, "with --codec: size of the shared-memory segment offered to each codec stream whose worker is on this host (a unix:// socket or a loopback address), reserved against --memory-limit; decode batches on streams whose worker attached it move chunks through it instead of the socket; 0 turns this off")
	refresh := fs.Duration("worker-refresh", rpc.DefaultRefresh, "how often the --store and --codec targets are resolved again (DNS names looked up, file:/// lists read again), so that workers added are used and removed ones left; 0: only when a connection fails")
	sf := addServerFlags(fs, DefaultListen)
	sf.http = addHTTPFlags(fs, sf.tls)
	bulkf := addBulkFlags(fs, sf, "off")
	gcfg := gatewayFlags(fs)
	peerTLS := peerTLSFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *storeTarget == "" {
		return usageError{errors.New("--store is required (the store workers' addresses)")}
	}
	if *tierWait <= 0 {
		return usageError{fmt.Errorf("--tier-wait %v: want a positive duration", *tierWait)}
	}
	if *refresh < 0 {
		return usageError{fmt.Errorf("--worker-refresh %v: want a duration ≥ 0", *refresh)}
	}
	if *codecChoice != "offload" && *codecChoice != "auto" {
		return usageError{fmt.Errorf("--codec-choice %q: want offload or auto", *codecChoice)}
	}
	if *codecFetch != "gateway" && *codecFetch != "worker" {
		return usageError{fmt.Errorf("--codec-fetch %q: want gateway or worker", *codecFetch)}
	}
	if *codecShared != 0 && (*codecShared < 1<<20 || *codecShared > shm.MaxAttachBytes) {
		return usageError{fmt.Errorf("--codec-shared-memory-bytes %d: want 0 (off) or from 1MiB to 1TiB", *codecShared)}
	}
	if *codecFetch == "worker" && *codecTarget == "" {
		return usageError{errors.New("--codec-fetch worker needs --codec workers")}
	}
	logger, err := sf.logger(ctx, stderr)
	if err != nil {
		return err
	}
	peer, err := peerTLS(logger)
	if err != nil {
		return err
	}
	if err := sf.startAdmin(ctx, logger); err != nil {
		return err
	}
	reg := sf.admin.reg
	// dialTier connects to a tier's workers, measured, and makes the
	// gateway ready only while the tier has a ready worker.
	dialTier := func(t *rpc.Tier) (*grpc.ClientConn, *rpc.Pool, error) {
		opts := t.DialOptions()
		if reg != nil {
			opts = append(opts, reg.DialOptions()...)
		}
		cc, pool, err := rpc.DialPool(t.Target, *refresh, opts...)
		if err != nil {
			return nil, nil, err
		}
		t.Watch(cc)
		sf.admin.addCheck(t.Ready)
		return cc, pool, nil
	}
	storeTier := &rpc.Tier{Name: "store", Target: *storeTarget, Wait: *tierWait, Logger: logger, TLS: peer}
	scc, _, err := dialTier(storeTier)
	if err != nil {
		return fmt.Errorf("--store %s: %w", *storeTarget, err)
	}
	defer scc.Close()
	store, err := connectStore(ctx, logger, scc, *storeTarget, storeObserverOpts(reg, "remote")...)
	if err != nil {
		return err
	}
	cfg, lim := gcfg(logger)
	// Each tier's retry budget names the tier and its target in the
	// errors of calls it refuses to retry.
	cfg.StoreRetries = retrybudget.New("store tier "+*storeTarget, 0, 0, 0)
	cfg.WorkerFetch = *codecFetch == "worker"
	var codecs codec.Engine = codecsvc.NewLocalLimits(lim)
	if *codecTarget != "" {
		cfg.CodecRetries = retrybudget.New("codec tier "+*codecTarget, 0, gateway.CodecRetryBurst, 0)
		codecTier := &rpc.Tier{Name: "codec", Target: *codecTarget, Wait: *tierWait, Logger: logger, TLS: peer}
		ccc, pool, err := dialTier(codecTier)
		if err != nil {
			return fmt.Errorf("--codec %s: %w", *codecTarget, err)
		}
		defer ccc.Close()
		// The codec streams follow the ready workers.
		rc := codecremote.NewPool(ccc, pool)
		defer rc.Close()
		rc.SetSharedMemory(*codecShared, cfg.Budget)
		codecs = rc
		if *codecChoice == "auto" {
			codecs = codecremote.NewAuto(codecsvc.NewLocalLimits(lim), rc, codecremote.DefaultCosts())
		}
		if reg != nil {
			reg.CodecWorkers(rc)
			reg.CodecSharedMemory(rc.SharedStreams)
		}
	}
	if reg != nil {
		codecs = reg.Engine(codecs)
	}
	bl, err := bulkf.start(logger, reg)
	if err != nil {
		return err
	}
	if bl != nil {
		defer bl.Close()
	}
	return sf.serveWith(ctx, logger, "zarrgate gateway serving", func(srv *rpc.Server) {
		g := gateway.New(store, codecs, cfg)
		if reg != nil {
			reg.Budget(cfg.Budget)
			reg.Gateway(g)
		}
		as := arrayserver.NewServer(g)
		if bl != nil {
			as.SetBulk(bl)
		}
		as.Register(srv)
		sf.http.store, sf.http.gw = g.RawStore(), g
	}, "store", *storeTarget, "codec", *codecTarget, "codec_fetch", *codecFetch, "codec_choice", *codecChoice, "codec_shared_memory_bytes", *codecShared, "tier_wait", *tierWait, "worker_refresh", *refresh, "peer_tls", peer != nil)
}

// connectStore asks the store tier for its capabilities, which the gateway
// needs before it can serve anything. While no store worker is ready it
// keeps trying, with a warning every 30 s: the gateway
// starts listening once its store tier is there, so that a readiness probe
// fails until then, and a gateway started before its workers waits for
// them instead of exiting.
func connectStore(ctx context.Context, logger *slog.Logger, cc *grpc.ClientConn, target string, opts ...storesvc.Option) (*storesvc.Portable, error) {
	var warned time.Time
	for {
		c, err := remote.NewClient(ctx, cc)
		if err == nil {
			return storesvc.Wrap(c, opts...), nil
		}
		if ctx.Err() != nil || !errors.Is(err, errs.Unavailable) {
			return nil, fmt.Errorf("store workers %s: %w", target, err)
		}
		if time.Since(warned) >= 30*time.Second {
			logger.Warn("waiting for the store tier before serving", "target", target, "error", err)
			warned = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// injectLatencyFlag is the workers' --inject-latency: for benchmarks only.
func injectLatencyFlag(fs *flag.FlagSet, unit string) *time.Duration {
	return fs.Duration("inject-latency", 0, "for benchmarks only, never in production: each "+unit+
		" first holds the worker for this long, one at a time, as if the worker could serve one "+unit+" per this duration (docs/benchmarks.md); 0: off")
}

// injectLatency returns the interceptors of --inject-latency d (none for
// 0): every call, and with perMessage every message received on a stream
// (a codec batch on a Process stream), first waits its turn for the
// worker-wide lock and holds it for d. Health and reflection calls are
// not delayed.
func injectLatency(logger *slog.Logger, d time.Duration, perMessage bool) []grpc.ServerOption {
	if d <= 0 {
		return nil
	}
	logger.Warn("--inject-latency is set: every call is delayed, for benchmarks only", "latency", d)
	var mu sync.Mutex
	hold := func() {
		mu.Lock()
		time.Sleep(d)
		mu.Unlock()
	}
	skip := func(method string) bool { return strings.HasPrefix(method, "/grpc.") }
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if !skip(info.FullMethod) {
				hold()
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if skip(info.FullMethod) {
				return h(srv, ss)
			}
			if perMessage {
				return h(srv, delayedStream{ss, hold})
			}
			hold()
			return h(srv, ss)
		}),
	}
}

// delayedStream holds the worker for each message received.
type delayedStream struct {
	grpc.ServerStream
	hold func()
}

func (s delayedStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil {
		s.hold()
	}
	return err
}
