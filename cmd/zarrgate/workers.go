package main

import (
	"context"
	"io"

	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/storesvc"
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
func runCodecWorker(ctx context.Context, args []string, _, stderr io.Writer) error {
	fs := newFlags("codec-worker", stderr)
	sf := addServerFlags(fs, "127.0.0.1:50053")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	return sf.serve(ctx, stderr, "zarrgate codec-worker serving", func(srv *rpc.Server) {
		codecsvc.NewServer(codecsvc.NewLocal()).Register(srv)
	})
}
