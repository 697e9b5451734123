package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/gateway"
	"github.com/zarrgate/zarrgate/gateway/arrayserver"
	"github.com/zarrgate/zarrgate/internal/rpc"
)

// DefaultListen is where serve listens without --listen: loopback only.
const DefaultListen = "127.0.0.1:50051"

func runServe(ctx context.Context, args []string, _, stderr io.Writer) error {
	fs := newFlags("serve", stderr)
	root, readOnly := storeFlags(fs)
	durability := durabilityFlag(fs)
	sf := addServerFlags(fs, DefaultListen)
	sf.http = addHTTPFlags(fs, sf.tls)
	bulkf := addBulkFlags(fs, sf, "auto")
	gcfg := gatewayFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	logger, err := sf.logger(ctx, stderr)
	if err != nil {
		return err
	}
	if err := sf.startAdmin(ctx, logger); err != nil {
		return err
	}
	reg := sf.admin.reg
	store, err := openServedStore(ctx, logger, *root, *readOnly, *durability, storeObserverOpts(reg, backendOf(*root))...)
	if err != nil {
		return err
	}
	defer store.Close()
	exportStoreRetries(reg, store)
	bl, err := bulkf.start(logger, reg)
	if err != nil {
		return err
	}
	if bl != nil {
		defer bl.Close()
	}
	return sf.serveWith(ctx, logger, "zarrgate serving", func(srv *rpc.Server) {
		cfg, lim := gcfg(logger)
		var codecs codec.Engine = codecsvc.NewLocalLimits(lim)
		if reg != nil {
			codecs = reg.Engine(codecs)
		}
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
	}, "root", *root, "read_only", *readOnly, "durability", *durability)
}

// gatewayFlags adds the flags of commands that serve the gateway, one per
// gateway.Config field (Budget through budgetFlags), and returns its
// configuration once they are parsed (and the budget made). Each default
// is the one gateway.Config's zero value stands for.
func gatewayFlags(fs *flag.FlagSet) func(*slog.Logger) (gateway.Config, codec.Limits) {
	shared := fs.Bool("shared-memory", true, "pass block data of large reads to clients on this host, of this user, through shared memory instead of the socket")
	size := sizeFlag(fs, "shared-memory-bytes", 32<<20, "size of one shared-memory segment (at least 1MiB)")
	sharedReads := fs.Int("max-shared-reads", 4, "most shared-memory segments in use at once (each --shared-memory-bytes); further large reads send their blocks over the socket; up to 2 idle segments are kept")
	budget := budgetFlags(fs)
	limits := codecLimitFlags(fs)
	maxSlab := sizeFlag(fs, "max-slab-bytes", 64<<30, "largest slab (decoded bytes) one ReadSlab or WriteSlab may move; it streams, so this bounds work, not memory")
	maxChunks := fs.Int64("max-slab-chunks", 1<<20, "most chunks (or shards) one ReadSlab or WriteSlab may touch: bounds its store calls")
	writeBuf := sizeFlag(fs, "write-buffer-bytes", 256<<20, "decoded data one WriteSlab holds in memory for chunks not yet complete; beyond it partial chunks spill to --spill-dir")
	spill := fs.String("spill-dir", "", "directory for partial chunks of large WriteSlabs (default: the system's temporary directory)")
	ttl := fs.Duration("metadata-ttl", 2*time.Second, "how long node metadata and shard indexes are cached: writes through other gateways are seen after at most this long; 0: no caching")
	parallel := fs.Int("parallelism", 0, "chunks one call fetches and decodes (or encodes) at once; a WriteSlab stores up to 32 (or this many, if more) at once; 0: 4 × the CPUs Go uses (GOMAXPROCS)")
	nice := fs.Int("background-nice", 10, "while a ReadSlab shares the gateway with other calls, run its chunk decodes on threads this much lower in priority (nice value, Linux), so that the other calls' work runs first; 0: never lowered")
	attempts := fs.Int("max-write-attempts", 64, "most read-modify-write attempts of one chunk or shard under contention by other writers before the write fails with ABORTED")
	afterParse(fs, func() error {
		switch {
		case *size <= 0 || *sharedReads <= 0:
			return usageError{errors.New("--shared-memory-bytes and --max-shared-reads must be positive (--shared-memory=false turns shared memory off)")}
		case *maxSlab <= 0 || *maxChunks <= 0 || *writeBuf <= 0:
			return usageError{errors.New("--max-slab-bytes, --max-slab-chunks and --write-buffer-bytes must be positive")}
		case *ttl < 0:
			return usageError{fmt.Errorf("--metadata-ttl %v: want 0 (no caching) or a positive duration", *ttl)}
		case *parallel < 0:
			return usageError{fmt.Errorf("--parallelism %d: want 0 (the default) or more", *parallel)}
		case *nice < 0 || *nice > 19:
			return usageError{fmt.Errorf("--background-nice %d: want 0 (off) to 19", *nice)}
		case *attempts <= 0:
			return usageError{fmt.Errorf("--max-write-attempts %d: want 1 or more", *attempts)}
		}
		return nil
	})
	return func(logger *slog.Logger) (gateway.Config, codec.Limits) {
		lim := limits()
		cacheTTL := *ttl
		if cacheTTL == 0 {
			cacheTTL = -1 // gateway.Config: negative is no caching, zero the default
		}
		background := *nice
		if background == 0 {
			background = -1 // gateway.Config: negative is off, zero the default
		}
		return gateway.Config{
			MetadataTTL:  cacheTTL,
			SharedMemory: *shared, SharedMemoryBytes: *size, MaxSharedReads: *sharedReads,
			Budget:        budget(logger),
			MaxChunkBytes: lim.MaxChunkBytes, MaxVariableBytes: lim.MaxVariableBytes,
			MaxSlabBytes: *maxSlab, MaxSlabChunks: *maxChunks,
			Parallelism: *parallel, BackgroundNice: background, MaxWriteAttempts: *attempts,
			WriteBufferBytes: *writeBuf, SpillDir: *spill,
		}, lim
	}
}
