package arrayserver

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync/atomic"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/gateway"
	"github.com/zarrgate/zarrgate/internal/membudget"
	"github.com/zarrgate/zarrgate/internal/metrics"
	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/internal/tracing"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/file"
)

// BenchmarkObservability is the cost of the metrics and of tracing (issue
// 16: at most 3 % with sampling off), through the real gRPC path on
// loopback, server and client in this process. Variants (obs=):
//
//   - off: no metrics, no tracing (the access log and request ids, always
//     there, are in every variant);
//   - metrics: what `serve --admin-listen` installs (per-RPC server
//     interceptors, store observer, codec engine decorator, collectors);
//   - metrics+trace0: that and tracing.Setup with --trace-sample-ratio 0
//     and a real OTLP exporter to a receiver in this process: otelgrpc's
//     server handler makes and propagates a trace context per call, and
//     nothing is recorded;
//   - metrics+trace1: the same with ratio 1, every span recorded and
//     exported (for information: not the 3 % target).
//
// Cases (case=): read, the 64 MiB uncompressed slab of
// BenchmarkRPCReadSlab read whole; write, a 16 MiB band (64 chunks)
// written whole; small, random 64×64 boxes (up to four chunks: the cost
// per call dominates), as BenchmarkSmallRead/rpc.
//
// Besides time (MB/s), each reports cpu-ms/op: the process's CPU time per
// operation (client and server, and every background goroutine: the
// span exporter, the receiver), steadier than time on a shared machine.
// The client is the same in every variant and does not trace (as a
// user's client, e.g. package client): the differences are the server's.
//
// One run gives each variant once; run the binary several times (a shell
// loop, -obs.round 1, 2, 3... rotating the variants' order) so that the
// variants alternate, then benchstat -col /obs (docs/benchmarks.md has
// the command).
func BenchmarkObservability(b *testing.B) {
	dir := b.TempDir()
	fs, err := file.New(dir)
	if err != nil {
		b.Fatal(err)
	}
	// The arrays, written once for all variants: "a" to read, "w" to
	// overwrite.
	g := gateway.New(fs, codecsvc.NewLocal(), gateway.Config{})
	data := make([]byte, benchN*benchN*4)
	for i := range data {
		data[i] = byte(i*7/5) | 1 // no chunk is all fill value
	}
	for _, name := range []string{"a", "w"} {
		if _, err := g.CreateArray(ctx, name, gateway.ArraySpec{Shape: []int64{benchN, benchN}, DataType: "float32", ChunkShape: []int64{256, 256}, Codecs: json.RawMessage(plainBytes)}); err != nil {
			b.Fatal(err)
		}
	}
	blk := gateway.Block{Origin: []int64{0, 0}, Shape: []int64{benchN, benchN}, Data: data}
	if _, err := g.WriteSlab(ctx, "a", nil, nextFrom([]gateway.Block{blk})); err != nil {
		b.Fatal(err)
	}
	const writeRows = 1024 // 1024 × 4096 float32: 16 MiB, 64 chunks
	band := data[:writeRows*benchN*4]

	recv, endpoint := startOTLPReceiver(b)
	// The client's options, taken while tracing is off: it never traces.
	clientOpts := rpc.DialOptions()

	type variant struct {
		name    string
		metrics bool
		trace   bool
		ratio   float64
	}
	variants := []variant{{"off", false, false, 0}, {"metrics", true, false, 0}, {"metrics+trace0", true, true, 0}, {"metrics+trace1", true, true, 1}}
	// Each round its own order, so that no variant is always first.
	k := *obsRound % len(variants)
	variants = append(variants[k:], variants[:k]...)
	for _, v := range variants {
		var stop func(context.Context) error
		if v.trace {
			stop, err = tracing.Setup(ctx, tracing.Options{Endpoint: endpoint, SampleRatio: v.ratio, Service: "zarrgate-serve"})
			if err != nil {
				b.Fatal(err)
			}
		}
		spans0 := recv.spans.Load()
		c, closeServer := serveObserved(b, fs, v.metrics, clientOpts)
		// drain stops quietly at any error: check once that the whole
		// slab comes.
		if n, err := slabBytes(c); err != nil || n != benchN*benchN*4 {
			b.Fatalf("%s: read %d bytes: %v", v.name, n, err)
		}

		b.Run("case=read/obs="+v.name, func(b *testing.B) {
			b.SetBytes(benchN * benchN * 4)
			defer cpuPerOp(b)()
			for b.Loop() {
				drain(b, c, &gatewayv1.ReadSlabRequest{Path: "a"})
			}
		})
		b.Run("case=write/obs="+v.name, func(b *testing.B) {
			b.SetBytes(int64(len(band)))
			defer cpuPerOp(b)()
			for b.Loop() {
				writeBand(b, c, "w", band, writeRows)
			}
		})
		b.Run("case=small/obs="+v.name, func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 2)) // the same boxes in every variant
			b.SetBytes(64 * 64 * 4)
			defer cpuPerOp(b)()
			for b.Loop() {
				y, x := r.Int64N(benchN-64), r.Int64N(benchN-64)
				drain(b, c, &gatewayv1.ReadSlabRequest{Path: "a", Selection: []*gatewayv1.Slice{{Start: uint64(y), Stop: uint64(y + 64)}, {Start: uint64(x), Stop: uint64(x + 64)}}})
			}
		})

		closeServer()
		if stop != nil {
			if err := stop(context.Background()); err != nil {
				b.Fatalf("%s: flushing the spans: %v", v.name, err)
			}
		}
		// The tracing variants are what they say: ratio 0 exports
		// nothing, ratio 1 exports spans (to this process's receiver).
		spans := recv.spans.Load() - spans0
		if v.trace && v.ratio == 0 && spans != 0 || v.ratio == 1 && spans == 0 {
			b.Fatalf("%s: %d spans exported", v.name, spans)
		}
	}
}

var obsRound = flag.Int("obs.round", 0, "BenchmarkObservability: rotate the order of the variants by this much")

// serveObserved serves a gateway on store fs over loopback, measured into
// a registry of its own when withMetrics (as serveMeasured), traced when
// tracing is set up, and dials it with clientOpts.
func serveObserved(b *testing.B, fs storesvc.Store, withMetrics bool, clientOpts []grpc.DialOption) (gatewayv1.ArrayServiceClient, func()) {
	budget := membudget.New(1<<30, 0)
	var (
		reg    *metrics.Registry
		store               = fs
		engine codec.Engine = codecsvc.NewLocal()
		opts   []grpc.ServerOption
	)
	if withMetrics {
		reg = metrics.New()
		store = storesvc.Wrap(fs, storesvc.WithObserver(reg.StoreObserver("file")))
		engine = reg.Engine(engine)
		opts = reg.ServerOptions()
	}
	g := gateway.New(store, engine, gateway.Config{Budget: budget})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)), opts...)
	NewServer(g).Register(srv)
	if withMetrics {
		reg.InitServer(srv.Server)
		reg.Budget(budget)
		reg.Gateway(g)
	}
	go srv.Serve(lis)
	cc, err := grpc.NewClient(lis.Addr().String(), clientOpts...)
	if err != nil {
		b.Fatal(err)
	}
	return gatewayv1.NewArrayServiceClient(cc), func() { cc.Close(); srv.Stop() }
}

// writeBand writes data, rows whole rows of a benchN-wide float32 array,
// at its top, in blocks of 64 rows (1 MiB).
func writeBand(b *testing.B, c gatewayv1.ArrayServiceClient, path string, data []byte, rows uint64) {
	ws, err := c.WriteSlab(ctx)
	if err != nil {
		b.Fatal(err)
	}
	err = ws.Send(&gatewayv1.WriteSlabRequest{Message: &gatewayv1.WriteSlabRequest_Header{Header: &gatewayv1.WriteSlabHeader{Path: path,
		Selection: []*gatewayv1.Slice{{Start: 0, Stop: rows}, {Start: 0, Stop: benchN}}}}})
	const step = 64
	for row := uint64(0); row < rows && err == nil; row += step {
		err = ws.Send(&gatewayv1.WriteSlabRequest{Message: &gatewayv1.WriteSlabRequest_Block{Block: &gatewayv1.Block{
			Origin: []uint64{row, 0}, Shape: []uint64{step, benchN}, Data: data[row*benchN*4 : (row+step)*benchN*4]}}})
	}
	resp, err := ws.CloseAndRecv()
	if err != nil || resp.GetChunksWritten() != rows/256*benchN/256 {
		b.Fatalf("WriteSlab = %v, %v", resp, err)
	}
}

// cpuPerOp starts measuring the process's CPU time; the function it
// returns reports it per operation (cpu-ms/op).
func cpuPerOp(b *testing.B) func() {
	cpu0, _ := processCPU(b)
	return func() {
		cpu, _ := processCPU(b)
		b.ReportMetric(float64((cpu-cpu0).Microseconds())/1e3/float64(b.N), "cpu-ms/op")
	}
}

// otlpReceiver is an OpenTelemetry collector's trace service on
// 127.0.0.1 that counts the spans it is sent.
type otlpReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	spans atomic.Int64
}

func (r *otlpReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			r.spans.Add(int64(len(ss.GetSpans())))
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// startOTLPReceiver serves a receiver and returns it and its endpoint, as
// --otlp-endpoint takes it.
func startOTLPReceiver(b *testing.B) (*otlpReceiver, string) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	r := &otlpReceiver{}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, r)
	go srv.Serve(lis)
	b.Cleanup(srv.Stop)
	return r, "http://" + lis.Addr().String()
}
