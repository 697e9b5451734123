package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/zarrgate/zarrgate/codecsvc"
	codecremote "github.com/zarrgate/zarrgate/codecsvc/remote"
	"github.com/zarrgate/zarrgate/gateway"
	"github.com/zarrgate/zarrgate/internal/membudget"
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
	return sf.serve(ctx, stderr, "zarrgate store-worker serving", func(srv *rpc.Server) {
		storesvc.NewServer(store).Register(srv)
	}, "root", *root, "read_only", *readOnly)
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
	defLimit, defSource := membudget.Default()
	memLimit := fs.String("memory-limit", envDefault("ZARRGATE_MEMORY_LIMIT", ""),
		"memory budget for batches in flight, such as 4GiB (default: "+membudget.Size(defLimit)+", "+defSource+"); $ZARRGATE_MEMORY_LIMIT sets the default")
	maxChunk := fs.String("max-chunk-bytes", envDefault("ZARRGATE_MAX_CHUNK_BYTES", membudget.Size(codecsvc.DefaultMaxChunkBytes)),
		"largest decoded chunk of a fixed-size data type (and offsets of a string or bytes chunk); larger ones are refused with RESOURCE_EXHAUSTED; $ZARRGATE_MAX_CHUNK_BYTES sets the default")
	maxVar := fs.String("max-variable-chunk-bytes", envDefault("ZARRGATE_MAX_VARIABLE_CHUNK_BYTES", membudget.Size(codecsvc.DefaultMaxVariableBytes)),
		"most element bytes in one chunk of a string or bytes array, whose size nothing else bounds; $ZARRGATE_MAX_VARIABLE_CHUNK_BYTES sets the default")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	limit, source := defLimit, defSource
	if *memLimit != "" {
		n, err := membudget.ParseSize(*memLimit)
		if err != nil || n <= 0 {
			return usageError{fmt.Errorf("--memory-limit %q: want a size such as 4GiB", *memLimit)}
		}
		limit, source = n, "--memory-limit"
	}
	var lim codecsvc.Limits
	for _, f := range []struct {
		name, val string
		to        *int64
	}{{"--max-chunk-bytes", *maxChunk, &lim.MaxChunkBytes}, {"--max-variable-chunk-bytes", *maxVar, &lim.MaxVariableBytes}} {
		n, err := membudget.ParseSize(f.val)
		if err != nil || n <= 0 {
			return usageError{fmt.Errorf("%s %q: want a size such as 256MiB", f.name, f.val)}
		}
		*f.to = n
	}
	budget := membudget.New(limit, 0)
	gcLimit := membudget.SetRuntimeLimit(limit)
	return sf.serve(ctx, stderr, "zarrgate codec-worker serving", func(srv *rpc.Server) {
		codecsvc.NewBudgetServer(codecsvc.NewLocalLimits(lim), budget).Register(srv)
	}, "memory_limit", membudget.Size(limit), "memory_limit_source", source,
		"max_chunk_bytes", membudget.Size(lim.MaxChunkBytes), "max_variable_chunk_bytes", membudget.Size(lim.MaxVariableBytes), "go_memory_limit", gcLimit)
}

// envDefault is $name, or def when it is unset or empty: a flag's default
// from the environment, as $ZARRGATE_ADDR gives --addr's.
func envDefault(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
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
	return sf.serve(ctx, stderr, "zarrgate gateway serving", func(srv *rpc.Server) {
		gateway.NewServer(gateway.New(store, codecs, gcfg())).Register(srv)
	}, "store", *storeTarget, "codec", *codecTarget)
}
