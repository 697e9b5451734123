package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime/pprof"
	"time"

	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/gateway"
	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/storeurl"
	"google.golang.org/grpc/health/grpc_health_v1"
)

// DefaultListen is where serve listens without --listen: loopback only.
const DefaultListen = "127.0.0.1:50051"

// shutdownGrace is how long in-flight calls get to finish on SIGINT/SIGTERM.
const shutdownGrace = 10 * time.Second

func runServe(ctx context.Context, args []string, _, stderr io.Writer) error {
	fs := newFlags("serve", stderr)
	root := fs.String("root", "./data", "the store: a directory (created if missing) or a store URL such as s3://bucket/prefix?endpoint=http://127.0.0.1:9000 or zip:///path/data.zip")
	listen := fs.String("listen", DefaultListen, "address to listen on (host:port; port 0 picks a free one)")
	readOnly := fs.Bool("read-only", false, "refuse every write with FailedPrecondition")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	logger, err := newLogger(stderr, *logLevel)
	if err != nil {
		return err
	}

	backend, err := openStore(ctx, *root)
	if err != nil {
		return err
	}
	var opts []storesvc.Option
	if *readOnly {
		opts = append(opts, storesvc.ReadOnly())
	}
	store := storesvc.Wrap(backend, opts...)
	defer store.Close()

	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *listen, err)
	}
	srv := rpc.NewServer(logger)
	gateway.NewServer(gateway.New(store, codecsvc.NewLocal(), gateway.Config{})).Register(srv)
	srv.Health.SetServingStatus("", grpc_health_v1.HealthCheckResponse_SERVING)
	logger.Info("zarrgate serving", "addr", lis.Addr().String(), "root", *root, "read_only", *readOnly)
	return serveUntilDone(ctx, logger, srv, lis)
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

// openStore opens the store a command names: a directory or any store URL
// (file://, memory://, s3://, zip://, NCZarr #mode= fragments).
func openStore(ctx context.Context, loc string) (storesvc.Store, error) {
	return storeurl.Open(ctx, loc)
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usageError{fmt.Errorf("--log-level %q: want debug, info, warn or error", level)}
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}
