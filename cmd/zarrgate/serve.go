package main

import (
	"context"
	"flag"
	"io"
	"log/slog"

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
	sf := addServerFlags(fs, DefaultListen)
	gcfg := gatewayFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	logger, err := sf.logger(stderr)
	if err != nil {
		return err
	}
	if err := sf.startAdmin(ctx, logger); err != nil {
		return err
	}
	reg := sf.admin.reg
	store, err := openServedStore(ctx, logger, *root, *readOnly, storeObserverOpts(reg, backendOf(*root))...)
	if err != nil {
		return err
	}
	defer store.Close()
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
		arrayserver.NewServer(g).Register(srv)
	}, "root", *root, "read_only", *readOnly)
}

// gatewayFlags adds the flags of commands that serve the gateway and
// returns its configuration once they are parsed (and the budget made).
func gatewayFlags(fs *flag.FlagSet) func(*slog.Logger) (gateway.Config, codec.Limits) {
	shared := fs.Bool("shared-memory", true, "pass block data of large reads to clients on this host, of this user, through shared memory instead of the socket")
	size := fs.Int64("shared-memory-bytes", 32<<20, "size of one shared-memory segment; at most 4 are in use at once, 2 kept idle")
	budget := budgetFlags(fs)
	limits := codecLimitFlags(fs)
	maxSlab := sizeFlag(fs, "max-slab-bytes", 64<<30, "largest slab (decoded bytes) one ReadSlab or WriteSlab may move; it streams, so this bounds work, not memory")
	maxChunks := fs.Int64("max-slab-chunks", 1<<20, "most chunks (or shards) one ReadSlab or WriteSlab may touch: bounds its store calls")
	writeBuf := sizeFlag(fs, "write-buffer-bytes", 256<<20, "decoded data one WriteSlab holds in memory for chunks not yet complete; beyond it partial chunks spill to --spill-dir")
	spill := fs.String("spill-dir", "", "directory for partial chunks of large WriteSlabs (default: the system's temporary directory)")
	return func(logger *slog.Logger) (gateway.Config, codec.Limits) {
		lim := limits()
		return gateway.Config{
			SharedMemory: *shared, SharedMemoryBytes: *size,
			Budget:        budget(logger),
			MaxChunkBytes: lim.MaxChunkBytes, MaxVariableBytes: lim.MaxVariableBytes,
			MaxSlabBytes: *maxSlab, MaxSlabChunks: *maxChunks,
			WriteBufferBytes: *writeBuf, SpillDir: *spill,
		}, lim
	}
}
