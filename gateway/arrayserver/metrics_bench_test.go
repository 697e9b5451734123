package arrayserver

import (
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"testing"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/gateway"
	"github.com/zarrgate/zarrgate/internal/membudget"
	"github.com/zarrgate/zarrgate/internal/metrics"
	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/file"
)

// BenchmarkRPCReadSlabMetrics is BenchmarkRPCReadSlab (and its zstd
// variant) with the metrics off and on, as `serve --admin-listen` sets
// them up: per-RPC server metrics, the store observer, the codec engine
// decorator and the gateway's collectors. (-count N runs each
// sub-benchmark N times in a row, off then on: they do not alternate.
// BenchmarkObservability, which does, supersedes this one.)
func BenchmarkRPCReadSlabMetrics(b *testing.B) {
	for _, cs := range []struct{ name, codecs string }{{"uncompressed", plainBytes}, {"zstd", zstdBytes}} {
		for _, on := range []bool{false, true} {
			name := cs.name + "/metrics=off"
			if on {
				name = cs.name + "/metrics=on"
			}
			b.Run(name, func(b *testing.B) {
				c := serveMeasured(b, cs.codecs, on)
				b.SetBytes(benchN * benchN * 4)
				for b.Loop() {
					drain(b, c, &gatewayv1.ReadSlabRequest{Path: "a"})
				}
			})
		}
	}
}

// serveMeasured serves benchGateway's array, measured into a registry
// when on.
func serveMeasured(b *testing.B, codecs string, on bool) gatewayv1.ArrayServiceClient {
	dir := b.TempDir()
	fs, err := file.New(dir)
	if err != nil {
		b.Fatal(err)
	}
	budget := membudget.New(1<<30, 0)
	var (
		reg    *metrics.Registry
		store  storesvc.Store = fs
		engine codec.Engine   = codecsvc.NewLocal()
	)
	if on {
		reg = metrics.New()
		store = storesvc.Wrap(fs, storesvc.WithObserver(reg.StoreObserver("file")))
		engine = reg.Engine(engine)
	}
	g := gateway.New(store, engine, gateway.Config{Budget: budget})
	if _, err := g.CreateArray(ctx, "a", gateway.ArraySpec{Shape: []int64{benchN, benchN}, DataType: "float32", ChunkShape: []int64{256, 256}, Codecs: json.RawMessage(codecs)}); err != nil {
		b.Fatal(err)
	}
	data := make([]byte, benchN*benchN*4)
	for i := range data {
		data[i] = byte(i*7/5) | 1
	}
	blk := gateway.Block{Origin: []int64{0, 0}, Shape: []int64{benchN, benchN}, Data: data}
	if _, err := g.WriteSlab(ctx, "a", nil, nextFrom([]gateway.Block{blk})); err != nil {
		b.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	var srv *rpc.Server
	if on {
		srv = rpc.NewServer(logger, reg.ServerOptions()...)
	} else {
		srv = rpc.NewServer(logger)
	}
	NewServer(g).Register(srv)
	if on {
		reg.InitServer(srv.Server)
		reg.Budget(budget)
		reg.Gateway(g)
	}
	go srv.Serve(lis)
	cc, err := rpc.Dial(lis.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cc.Close(); srv.Stop() })
	return gatewayv1.NewArrayServiceClient(cc)
}
