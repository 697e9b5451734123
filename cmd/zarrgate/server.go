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
	"path/filepath"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel"
	"google.golang.org/grpc/health/grpc_health_v1"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/internal/membudget"
	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/internal/tracing"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/file"
	"github.com/zarrgate/zarrgate/storesvc/storeurl"
)

// shutdownGrace is how long in-flight calls get to finish on SIGINT/SIGTERM.
const shutdownGrace = 10 * time.Second

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
func openServedStore(ctx context.Context, logger *slog.Logger, root string, readOnly bool) (*storesvc.Portable, error) {
	backend, err := openStore(ctx, root)
	if err != nil {
		return nil, err
	}
	if fstore, ok := unwrapStore(backend).(*file.Store); ok && !readOnly {
		go cleanTemps(ctx, logger, fstore)
	}
	var opts []storesvc.Option
	if readOnly {
		opts = append(opts, storesvc.ReadOnly())
	}
	return storesvc.Wrap(backend, opts...), nil
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
	authz                       authzFlags
	auth                        authFlags
	tls                         listenTLSFlags
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
		authz:         addAuthzFlags(fs),
		auth:          addAuthFlags(fs),
		tls:           addListenTLSFlags(fs),
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
	return f
}

// logger is the command's logger, at --log-level in --log-format. It
// also turns tracing on when --otlp-endpoint is set: every serving
// command calls it first, before it dials or serves (the gRPC servers and
// connections it makes then trace).
func (f serverFlags) logger(stderr io.Writer) (*slog.Logger, error) {
	*f.authz.stderr = stderr
	logger, err := newLogger(stderr, *f.logLevel, *f.logFormat)
	if err != nil {
		return nil, err
	}
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
	logger, err := f.logger(stderr)
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
	extra, release, err := f.authz.serverOptions(ctx, logger)
	if err != nil {
		return err
	}
	defer release()
	authOpts, err := f.auth.serverOptions(ctx, logger, *f.tls.clientCA != "")
	if err != nil {
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
	srv := rpc.NewServer(logger, slices.Concat(tlsOpts, authOpts, extra)...) // authentication before authorization
	srv.SetDefaultTimeouts(*f.streamTimeout, *f.unaryTimeout)
	register(srv)
	srv.Health.SetServingStatus("", grpc_health_v1.HealthCheckResponse_SERVING)
	logger.Info(msg, append(append([]any{"addr", addr}, tlsAttrs...), attrs...)...)
	err = serveUntilDone(ctx, logger, srv, lis)
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

// serveUntilDone serves until ctx is done (SIGINT/SIGTERM), then stops
// taking calls, lets in-flight ones finish for shutdownGrace, and stops.
// With $ZARRGATE_CPUPROFILE set it writes a CPU profile there on exit.
func serveUntilDone(ctx context.Context, logger *slog.Logger, srv *rpc.Server, lis net.Listener) error {
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
	logger.Info("shutting down", "grace", shutdownGrace)
	srv.Health.Shutdown()
	done := make(chan struct{})
	go func() { srv.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(shutdownGrace):
		logger.Warn("grace period over, closing remaining calls")
		srv.Stop()
	}
	logger.Info("stopped")
	return nil
}

// unwrapStore returns the backend behind portable layers.
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
