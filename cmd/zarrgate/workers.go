package main

import (
	"context"
	"fmt"
	"io"
	"net"

	"google.golang.org/grpc/health/grpc_health_v1"

	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/storesvc"
)

// runStoreWorker serves StoreService over one backend: the storage tier
// of a scaled-out deployment.
func runStoreWorker(ctx context.Context, args []string, _, stderr io.Writer) error {
	fs := newFlags("store-worker", stderr)
	root := fs.String("root", "./data", "the store: a directory or a store URL")
	listen := fs.String("listen", "127.0.0.1:50052", "address to listen on")
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
	storesvc.NewServer(store).Register(srv)
	srv.Health.SetServingStatus("", grpc_health_v1.HealthCheckResponse_SERVING)
	logger.Info("zarrgate store-worker serving", "addr", lis.Addr().String(), "root", *root)
	return serveUntilDone(ctx, logger, srv, lis)
}

// runCodecWorker serves CodecService: the codec tier, CPU-bound, sized to
// the compression load.
func runCodecWorker(ctx context.Context, args []string, _, stderr io.Writer) error {
	fs := newFlags("codec-worker", stderr)
	listen := fs.String("listen", "127.0.0.1:50053", "address to listen on")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	logger, err := newLogger(stderr, *logLevel)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *listen, err)
	}
	srv := rpc.NewServer(logger)
	codecsvc.NewServer(codecsvc.NewLocal()).Register(srv)
	srv.Health.SetServingStatus("", grpc_health_v1.HealthCheckResponse_SERVING)
	logger.Info("zarrgate codec-worker serving", "addr", lis.Addr().String())
	return serveUntilDone(ctx, logger, srv, lis)
}
