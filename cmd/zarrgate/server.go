// What every serving command shares: store, listen and log flags, the
// memory budget and codec limits, and serving until a signal.

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health/grpc_health_v1"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/internal/membudget"
	"github.com/zarrgate/zarrgate/internal/metrics"
	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/internal/security"
	"github.com/zarrgate/zarrgate/internal/tracing"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/file"
	"github.com/zarrgate/zarrgate/storesvc/s3"
	"github.com/zarrgate/zarrgate/storesvc/storeurl"
)

// Shutdown defaults (see rpc.Server.Shutdown): how long a stopping server
// reports NOT_SERVING while still serving, so that clients and load
// balancers move away before it takes no new calls, and how long the calls
// in flight then get to finish.
const (
	defaultDrainDelay    = 5 * time.Second
	defaultShutdownGrace = 10 * time.Second
)

// codecLimitFlags adds the per-chunk limits every process that decodes
// chunks takes, and returns them once parsed.
func codecLimitFlags(fs *flag.FlagSet) func() codec.Limits {
	maxChunk := sizeFlag(fs, "max-chunk-bytes", codecsvc.DefaultMaxChunkBytes, "largest decoded chunk (or shard index, or a string chunk's offsets) read or written; arrays with larger chunks are refused with RESOURCE_EXHAUSTED")
	maxVar := sizeFlag(fs, "max-variable-chunk-bytes", codecsvc.DefaultMaxVariableBytes, "most element bytes one chunk of a string or bytes array may hold decoded (nothing else bounds them); more is RESOURCE_EXHAUSTED")
	return func() codec.Limits {
		return codec.Limits{MaxChunkBytes: *maxChunk, MaxVariableBytes: *maxVar}
	}
}

// budgetFlags adds --memory-limit and --memory-wait and returns the
// process's budget once they are parsed: made on the first call, with the
// Go runtime's soft limit set to match.
func budgetFlags(fs *flag.FlagSet) func(*slog.Logger) *membudget.Budget {
	limit := sizeFlag(fs, "memory-limit", 0, "memory budget for the buffers of all calls together (e.g. 2GiB); calls wait for memory or get RESOURCE_EXHAUSTED; default 60% of the cgroup limit or GOMEMLIMIT, else 25% of RAM")
	wait := fs.Duration("memory-wait", membudget.DefaultMaxWait, "how long a call waits for memory before RESOURCE_EXHAUSTED")
	var b *membudget.Budget
	return func(logger *slog.Logger) *membudget.Budget {
		if b != nil {
			return b
		}
		n, src := *limit, "--memory-limit"
		if n == 0 {
			n, src = membudget.Default()
		}
		b = membudget.New(n, *wait)
		rt := b.LimitRuntime()
		logger.Info("memory budget", "bytes", n, "size", membudget.Size(n), "from", src, "runtime_limit", rt)
		return b
	}
}

// durabilityFlag adds --durability: what a write to a directory store
// guarantees when it returns.
func durabilityFlag(fs *flag.FlagSet) *string {
	d := fs.String("durability", "fsync", "directory stores: what a write guarantees when it returns. fsync: it survives a crash of the machine (each value's file is fsynced before its rename, its directory after, concurrent writes in one directory share that fsync); none: no fsync, as zarr-python: readers never see a torn value and a killed server loses nothing, but a crash of the machine may lose recent writes or leave a recent value empty or torn. Other stores ignore it")
	afterParse(fs, func() error {
		if _, err := file.ParseDurability(*d); err != nil {
			return usageError{fmt.Errorf("--durability %s: want fsync or none", *d)}
		}
		return nil
	})
	return d
}

// storeFlags adds --root, --create and --read-only.
func storeFlags(fs *flag.FlagSet) (root *string, readOnly *bool) {
	root = fs.String("root", "./data", "the store: a directory or a store URL such as s3://bucket/prefix?endpoint=http://127.0.0.1:9000 or zip:///path/data.zip; a missing directory is created if its parent exists, deeper ones need --create")
	create := fs.Bool("create", false, "create --root's directory and any missing parents")
	readOnly = fs.Bool("read-only", false, "refuse every write with FailedPrecondition")
	afterParse(fs, func() error { return checkRoot(*root, *create) })
	return root, readOnly
}

// checkRoot refuses a directory store whose directory and parent are both
// missing, unless create is set: a mistyped --root would otherwise serve a
// new, empty store under a tree of fresh directories. A missing last
// component alone is created, as mkdir would (the default ./data needs
// that). Other errors are left to opening the store, which names them.
func checkRoot(root string, create bool) error {
	loc, err := storeurl.Parse(root)
	if err != nil || loc.Backend != storeurl.File || create {
		return nil
	}
	if _, err := os.Stat(loc.Path); !errors.Is(err, iofs.ErrNotExist) {
		return nil
	}
	parent := filepath.Dir(filepath.Clean(loc.Path))
	if _, err := os.Stat(parent); !errors.Is(err, iofs.ErrNotExist) {
		return nil
	}
	return usageError{fmt.Errorf("--root %s: neither the directory nor its parent %s exists; pass --create to create them (or fix the path)", root, parent)}
}

// openServedStore opens the store a serving command serves. A writable
// directory store has the temporary files of writes killed earlier removed
// in the background (they are unreachable through the store already).
// Its writes are as durable as durability says ("fsync" or "none"; a
// directory store's only).
func openServedStore(ctx context.Context, logger *slog.Logger, root string, readOnly bool, durability string, extra ...storesvc.Option) (*storesvc.Portable, error) {
	d, err := file.ParseDurability(durability)
	if err != nil {
		return nil, usageError{err}
	}
	backend, err := openStore(ctx, root)
	if err != nil {
		return nil, err
	}
	if fstore, ok := unwrapStore(backend).(*file.Store); ok {
		fstore.SetDurability(d)
		if !readOnly {
			go cleanTemps(ctx, logger, fstore)
		}
	} else if d != file.DurabilityFsync && !readOnly {
		logger.Warn("--durability applies to directory stores only; this store ignores it", "root", root, "durability", d.String())
	}
	var opts []storesvc.Option
	if readOnly {
		opts = append(opts, storesvc.ReadOnly())
	}
	return storesvc.Wrap(backend, append(opts, extra...)...), nil
}

// serverFlags are the flags every serving command takes.
type serverFlags struct {
	listen, logLevel, logFormat *string
	// otlpEndpoint and sampleRatio turn tracing on; service is the
	// service.name of the process's spans (zarrgate-<command>).
	otlpEndpoint                *string
	sampleRatio                 *float64
	service                     string
	stopTracing                 *func(context.Context) error
	streamTimeout, unaryTimeout *time.Duration
	drainDelay, shutdownGrace   *time.Duration
	authz                       authzFlags
	auth                        authFlags
	tls                         listenTLSFlags
	fs                          *flag.FlagSet // all the command's flags, for the effective configuration
	admin                       *adminState
	// http is the store over HTTP (serve and gateway only; nil for the
	// workers).
	http *httpFlags
	// extra are server options of the command's own (the workers'
	// --inject-latency).
	extra []grpc.ServerOption
}

func addServerFlags(fs *flag.FlagSet, defListen string) serverFlags {
	f := serverFlags{
		listen:        fs.String("listen", defListen, "address to listen on: host:port (port 0 picks a free one), or unix:///path/to.sock for clients on this host (access by file permissions, no port)"),
		logLevel:      fs.String("log-level", "info", "log level: debug, info, warn, error"),
		logFormat:     fs.String("log-format", "text", "log format: text (key=value) or json (one object per line)"),
		otlpEndpoint:  fs.String("otlp-endpoint", "", "send traces by OTLP/gRPC to this collector: http://host:port (plaintext), https://host:port or host:port (TLS); empty: no tracing. OTEL_EXPORTER_OTLP_* variables (headers, certificate, timeout) apply"),
		sampleRatio:   fs.Float64("trace-sample-ratio", 1, "fraction of the traces that start here (calls arriving without a sampled trace context) that are recorded, 0 to 1; calls that arrive with one follow their caller's choice"),
		service:       strings.ReplaceAll(fs.Name(), " ", "-"),
		stopTracing:   new(func(context.Context) error),
		streamTimeout: fs.Duration("default-timeout", rpc.DefaultStreamTimeout, "deadline of streaming calls (reads, writes, lists) whose client set none; 0: none"),
		unaryTimeout:  fs.Duration("default-unary-timeout", rpc.DefaultUnaryTimeout, "deadline of unary calls (metadata, erase) whose client set none; 0: none"),
		drainDelay:    fs.Duration("drain-delay", defaultDrainDelay, "on SIGTERM/SIGINT, how long the health service reports NOT_SERVING while calls are still served, so that gateways and load balancers move new work away first; 0: stop taking calls at once"),
		shutdownGrace: fs.Duration("shutdown-grace", defaultShutdownGrace, "after --drain-delay, how long calls in flight get to finish before they are cut; a second signal cuts them at once"),
		authz:         addAuthzFlags(fs),
		auth:          addAuthFlags(fs),
		tls:           addListenTLSFlags(fs),
		fs:            fs,
		admin:         &adminState{listen: fs.String("admin-listen", "", "serve the admin endpoint (/metrics, /debug/pprof/, /healthz, /readyz, /version) over HTTP at host:port; a bare :port is loopback; off by default; another host needs TLS (--tls-cert) or --insecure")},
	}
	afterParse(fs, func() error { return f.auth.check(*f.tls.clientCA) })
	afterParse(fs, func() error {
		if r := *f.sampleRatio; !(r >= 0 && r <= 1) {
			return usageError{fmt.Errorf("--trace-sample-ratio %v: want a number from 0 to 1", r)}
		}
		if l := *f.logFormat; l != "text" && l != "json" {
			return usageError{fmt.Errorf("--log-format %q: want text or json", l)}
		}
		return nil
	})
	// Refuse a plaintext non-loopback --listen before opening stores or
	// waiting for workers (serveWith checks the listener itself again).
	afterParse(fs, func() error { return f.tls.checkPlaintext(*f.listen) })
	afterParse(fs, func() error {
		if *f.admin.listen == "" {
			return nil
		}
		addr, err := adminAddr(*f.admin.listen)
		if err != nil {
			return err
		}
		return f.tls.checkAdminPlaintext(addr)
	})
	return f
}

// logger is the command's logger, at --log-level in --log-format. At
// debug level it logs the effective configuration first: every flag, its
// value and whether it came from the command line, the environment, the
// --config file or its default. It is also slog's default logger, through
// which the packages without one of their own log (the gateway's retries,
// for one). It also turns tracing on when --otlp-endpoint is set: every
// serving command calls it first, before it dials or serves (the gRPC
// servers and connections it makes then trace).
func (f serverFlags) logger(ctx context.Context, stderr io.Writer) (*slog.Logger, error) {
	*f.authz.stderr = stderr
	logger, err := newLogger(stderr, *f.logLevel, *f.logFormat)
	if err != nil {
		return nil, err
	}
	slog.SetDefault(logger)
	logEffectiveConfig(ctx, logger, f.fs)
	if *f.otlpEndpoint != "" && *f.stopTracing == nil {
		stop, err := tracing.Setup(context.Background(), tracing.Options{
			Endpoint: *f.otlpEndpoint, SampleRatio: *f.sampleRatio, Service: f.service, Version: moduleVersion(),
		})
		if err != nil {
			return nil, usageError{fmt.Errorf("--otlp-endpoint: %w", err)}
		}
		*f.stopTracing = stop
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			logger.Warn("tracing", "error", err)
		}))
		logger.Info("tracing", "otlp_endpoint", *f.otlpEndpoint, "sample_ratio", *f.sampleRatio, "service", f.service)
	}
	return logger, nil
}

// serve builds the gRPC server (interceptors, health, reflection), lets
// register add the command's services, logs msg with the address, and
// serves until ctx is done.
func (f serverFlags) serve(ctx context.Context, stderr io.Writer, msg string, register func(*rpc.Server), attrs ...any) error {
	logger, err := f.logger(ctx, stderr)
	if err != nil {
		return err
	}
	return f.serveWith(ctx, logger, msg, register, attrs...)
}

// serveWith is serve with the command's logger made already.
func (f serverFlags) serveWith(ctx context.Context, logger *slog.Logger, msg string, register func(*rpc.Server), attrs ...any) error {
	if *f.streamTimeout < 0 || *f.unaryTimeout < 0 {
		return usageError{errors.New("--default-timeout and --default-unary-timeout must not be negative")}
	}
	if *f.drainDelay < 0 || *f.shutdownGrace <= 0 {
		return usageError{errors.New("--drain-delay must not be negative and --shutdown-grace must be positive")}
	}
	// The policy, then authentication (which lets callers without
	// credentials in while the policy grants anonymous something).
	sec, err := security.Load(ctx, logger, f.auth.config(*f.tls.clientCA != ""), f.authz.config())
	if err != nil {
		return err
	}
	defer sec.Close()
	authOpts, extra := sec.AuthnOptions, sec.AuthzOptions
	if err := f.startAdmin(ctx, logger); err != nil {
		return err
	}
	lis, addr, err := listen(*f.listen)
	if err != nil {
		return err
	}
	tlsOpts, tlsAttrs, err := f.tls.serverOptions(logger, lis)
	if err != nil {
		lis.Close()
		return err
	}
	var metricOpts []grpc.ServerOption
	if reg := f.admin.reg; reg != nil {
		metricOpts = reg.ServerOptions()
	}
	srv := rpc.NewServer(logger, append(append(security.Chain(tlsOpts, authOpts, extra), metricOpts...), f.extra...)...)
	srv.SetDefaultTimeouts(*f.streamTimeout, *f.unaryTimeout)
	register(srv)
	if reg := f.admin.reg; reg != nil {
		reg.InitServer(srv.Server)
	}
	// The HTTP store endpoint stops with the gRPC server: after its
	// drain, with the same grace.
	waitHTTP, err := f.startHTTP(ctx, logger, sec, *f.drainDelay, *f.shutdownGrace)
	if err != nil {
		lis.Close()
		return err
	}
	srv.Health.SetServingStatus("", grpc_health_v1.HealthCheckResponse_SERVING)
	f.admin.phase.Store(phaseServing)
	go func() {
		<-ctx.Done()
		f.admin.phase.Store(phaseDraining)
	}()
	logger.Info(msg, append(append([]any{"addr", addr}, tlsAttrs...), attrs...)...)
	err = serveUntilDone(ctx, logger, srv, lis, *f.drainDelay, *f.shutdownGrace)
	waitHTTP()
	if stop := *f.stopTracing; stop != nil {
		// The spans of the last calls are still in the batch.
		if serr := stop(context.Background()); serr != nil {
			logger.Warn("flushing traces", "error", serr)
		}
	}
	return err
}

// listen opens a TCP address, or a Unix socket for unix:///path (or
// unix:path), and returns the address as clients dial it. A socket file
// left behind by a server that died is replaced; one a live server holds
// is not.
func listen(spec string) (net.Listener, string, error) {
	path, ok := strings.CutPrefix(spec, "unix://")
	if !ok {
		path, ok = strings.CutPrefix(spec, "unix:")
	}
	if !ok {
		lis, err := net.Listen("tcp", spec)
		if err != nil {
			return nil, "", fmt.Errorf("listen on %s: %w", spec, err)
		}
		return lis, lis.Addr().String(), nil
	}
	if path == "" {
		return nil, "", usageError{fmt.Errorf("--listen %q: want unix:///path/to.sock", spec)}
	}
	lis, err := net.Listen("unix", path)
	if err != nil && errors.Is(err, syscall.EADDRINUSE) {
		if c, derr := net.Dial("unix", path); derr == nil {
			c.Close()
			return nil, "", fmt.Errorf("listen on %s: a server is already listening there", spec)
		}
		if fi, serr := os.Lstat(path); serr == nil && fi.Mode()&os.ModeSocket != 0 {
			os.Remove(path) // stale: nobody answers
			lis, err = net.Listen("unix", path)
		}
	}
	if err != nil {
		return nil, "", fmt.Errorf("listen on %s: %w", spec, err)
	}
	abs, aerr := filepath.Abs(path)
	if aerr != nil {
		abs = path
	}
	return lis, "unix://" + abs, nil
}

// serveUntilDone serves until ctx is done (SIGINT/SIGTERM), then drains:
// reports NOT_SERVING while still serving for drainDelay, stops taking
// calls, lets in-flight ones finish for grace, and stops (rpc.Server.
// Shutdown); another SIGINT/SIGTERM meanwhile stops at once. With
// $ZARRGATE_CPUPROFILE set it writes a CPU profile there on exit.
func serveUntilDone(ctx context.Context, logger *slog.Logger, srv *rpc.Server, lis net.Listener, drainDelay, grace time.Duration) error {
	if path := os.Getenv("ZARRGATE_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	// The first signal ended ctx; the next one, caught from now on, cuts
	// the drain short.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	hard := make(chan struct{})
	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		select {
		case <-sigs:
			close(hard)
		case <-stopped:
		}
	}()
	logger.Info("shutting down", "drain_delay", drainDelay, "shutdown_grace", grace)
	srv.Shutdown(drainDelay, grace, hard)
	<-errc // Serve has returned: nothing is served any more
	return nil
}

// unwrapStore returns the backend behind portable layers.
// exportStoreRetries exports the retry counters of a served store that
// retries its own requests (S3: the AWS SDK within the store's budget) as
// tier s3, when metrics are on.
func exportStoreRetries(reg *metrics.Registry, store storesvc.Store) {
	if s, ok := unwrapStore(store).(*s3.Store); ok && reg != nil {
		reg.Retries("s3", s.RetryStats)
	}
	if s, ok := unwrapStore(store).(*file.Store); ok && reg != nil {
		reg.FileSyncs(s.Syncs)
	}
}

func unwrapStore(s storesvc.Store) storesvc.Store {
	for {
		p, ok := s.(*storesvc.Portable)
		if !ok {
			return s
		}
		s = p.Unwrap()
	}
}

// cleanTemps removes the temporary files of writes killed before they
// finished (in the background: it walks the whole directory): those no
// live process holds a lock on.
func cleanTemps(ctx context.Context, logger *slog.Logger, s *file.Store) {
	start := time.Now()
	st, err := s.CleanTemps(ctx, file.StaleTempAge)
	switch {
	case ctx.Err() != nil:
	case err != nil:
		logger.Warn("removing temporary files of killed writes", "root", s.Dir(), "error", err)
	case st.Removed > 0:
		logger.Info("removed temporary files of killed writes", "root", s.Dir(), "removed", st.Removed,
			"in_progress", st.Live, "took", time.Since(start).Round(time.Millisecond))
	}
}

// openStore opens the store a command names: a directory or any store URL
// (file://, memory://, s3://, zip://, NCZarr #mode= fragments).
func openStore(ctx context.Context, loc string) (storesvc.Store, error) {
	return storeurl.Open(ctx, loc)
}

// newLogger is a logger at level in format (text or json) whose records
// made with a call's context carry its request id (rpc.LogHandler).
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usageError{fmt.Errorf("--log-level %q: want debug, info, warn or error", level)}
	}
	opts := &slog.HandlerOptions{Level: l}
	var h slog.Handler
	switch format {
	case "json":
		h = slog.NewJSONHandler(w, opts)
	case "text", "":
		h = slog.NewTextHandler(w, opts)
	default:
		return nil, usageError{fmt.Errorf("--log-format %q: want text or json", format)}
	}
	return slog.New(rpc.LogHandler(h)), nil
}

// moduleVersion is the binary's module version, for the spans' resource.
func moduleVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		return bi.Main.Version
	}
	return ""
}
