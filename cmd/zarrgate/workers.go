package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/zarrgate/zarrgate/codecsvc"
	codecremote "github.com/zarrgate/zarrgate/codecsvc/remote"
	"github.com/zarrgate/zarrgate/gateway"
	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/remote"
)

// runStoreWorker serves StoreService over one backend: the storage tier
// of a scaled-out deployment.
func runStoreWorker(ctx context.Context, args []string, _, stderr io.Writer) error {
	fs := newFlags("store-worker", stderr)
	root, readOnly := storeFlags(fs)
	sf := addServerFlags(fs, "127.0.0.1:50052")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	store, err := openServedStore(ctx, *root, *readOnly)
	if err != nil {
		return err
	}
	defer store.Close()
	return sf.serve(ctx, stderr, "zarrgate store-worker serving", func(srv *rpc.Server, _ *slog.Logger) {
		storesvc.NewServer(store).Register(srv)
	}, "root", *root, "read_only", *readOnly)
}

// runCodecWorker serves CodecService: the codec tier, CPU-bound, sized to
// the compression load.
func runCodecWorker(ctx context.Context, args []string, _, stderr io.Writer) error {
	fs := newFlags("codec-worker", stderr)
	sf := addServerFlags(fs, "127.0.0.1:50053")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	return sf.serve(ctx, stderr, "zarrgate codec-worker serving", func(srv *rpc.Server, _ *slog.Logger) {
		codecsvc.NewServer(codecsvc.NewLocal()).Register(srv)
	})
}

// runGateway serves the gateway over pools of store workers and, with
// --codec, codec workers: the scaled-out deployment. Each pool is spread
// with gRPC's round_robin and health-checked; a worker that fails is
// skipped and used again when it comes back.
func runGateway(ctx context.Context, args []string, _, stderr io.Writer) error {
	fs := newFlags("gateway", stderr)
	storeTarget := fs.String("store", "", "store workers: host:port,host:port,... or a gRPC target such as dns:///store-workers:50052 (required)")
	codecTarget := fs.String("codec", "", "codec workers, in the same forms; empty runs codecs in this process")
	sf := addServerFlags(fs, DefaultListen)
	gcfg := gatewayFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *storeTarget == "" {
		return usageError{errors.New("--store is required (the store workers' addresses)")}
	}
	scc, err := rpc.DialWorkers(*storeTarget)
	if err != nil {
		return fmt.Errorf("--store %s: %w", *storeTarget, err)
	}
	defer scc.Close()
	store, err := remote.New(ctx, scc)
	if err != nil {
		return fmt.Errorf("store workers %s: %w", *storeTarget, err)
	}
	var codecs codecsvc.Engine = codecsvc.NewLocal()
	if *codecTarget != "" {
		ccc, err := rpc.DialWorkers(*codecTarget)
		if err != nil {
			return fmt.Errorf("--codec %s: %w", *codecTarget, err)
		}
		defer ccc.Close()
		rc := codecremote.New(ccc)
		defer rc.Close()
		codecs = rc
	}
	return sf.serve(ctx, stderr, "zarrgate gateway serving", func(srv *rpc.Server, logger *slog.Logger) {
		gateway.NewServer(gateway.New(store, codecs, gcfg(logger))).Register(srv)
	}, "store", *storeTarget, "codec", *codecTarget)
}
