package arrayserver

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
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
// loopback, server and client in this process. Four servers of the same
// array run side by side:
//
//   - off: no metrics, no tracing (the access log and request ids, always
//     there, are in every variant);
//   - metrics: what `serve --admin-listen` installs (per-RPC server
//     interceptors, store observer, codec engine decorator, collectors);
//   - trace0: metrics, and tracing set up (tracing.Setup) with
//     --trace-sample-ratio 0 and a real OTLP exporter to a receiver in this
//     process: otelgrpc's server handler makes and propagates a trace
//     context per call, and nothing is recorded;
//   - trace1: the same with ratio 1, every span recorded and exported to
//     another receiver (for information: not the 3 % target); its spans
//     are flushed (and received) at the end of each of its turns, so that
//     their export is counted to it.
//
// Cases: read, the 64 MiB uncompressed slab of BenchmarkRPCReadSlab read
// whole; write, a 16 MiB band (64 chunks) written whole; small, random
// 64×64 boxes (up to four chunks: the cost per call dominates), as
// BenchmarkSmallRead/rpc, 20 per turn.
//
// Each iteration gives every variant a turn, in an order that rotates, so
// that all four see the same machine (on a shared one, the load changes
// from second to second). Reported per variant: MB/s; cpu-ms/op, the
// process's CPU time (getrusage) per operation during its turns, client
// and server, steadier than time on a busy machine; and overhead-%, its
// CPU time against off's. The client is the same for all and does not
// trace (as a user's client, e.g. package client): the differences are
// the server's. Run with -count N and summarise with benchstat
// (docs/benchmarks.md has the command).
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

	// The client's options, taken while tracing is off: it never traces.
	clientOpts := rpc.DialOptions()
	type variant struct {
		name  string
		c     gatewayv1.ArrayServiceClient
		flush func() // after each turn
	}
	vs := []*variant{
		{name: "off", c: serveObserved(b, fs, false, clientOpts)},
		{name: "metrics", c: serveObserved(b, fs, true, clientOpts)},
	}
	// Tracing is global, but each server keeps the tracer provider set up
	// when it was made (otelgrpc holds it, and the engine's spans use
	// their parent's): both tracing variants can run side by side.
	recv0, endpoint0 := startOTLPReceiver(b)
	recv1, endpoint1 := startOTLPReceiver(b)
	stop0, err := tracing.Setup(ctx, tracing.Options{Endpoint: endpoint0, SampleRatio: 0, Service: "zarrgate-serve"})
	if err != nil {
		b.Fatal(err)
	}
	vs = append(vs, &variant{name: "trace0", c: serveObserved(b, fs, true, clientOpts)})
	stop1, err := tracing.Setup(ctx, tracing.Options{Endpoint: endpoint1, SampleRatio: 1, Service: "zarrgate-serve"})
	if err != nil {
		b.Fatal(err)
	}
	tp1, ok := otel.GetTracerProvider().(interface{ ForceFlush(context.Context) error })
	if !ok {
		b.Fatalf("the tracer provider is a %T", otel.GetTracerProvider())
	}
	vs = append(vs, &variant{name: "trace1", c: serveObserved(b, fs, true, clientOpts), flush: func() {
		if err := tp1.ForceFlush(ctx); err != nil {
			b.Fatal(err)
		}
	}})
	b.Cleanup(func() {
		// The variants are what they say: ratio 0 exports nothing,
		// ratio 1 exports spans.
		err1, err0 := stop1(context.Background()), stop0(context.Background())
		if err0 != nil || err1 != nil {
			b.Errorf("flushing the spans: %v, %v", err0, err1)
		}
		if n0, n1 := recv0.spans.Load(), recv1.spans.Load(); n0 != 0 || n1 == 0 {
			b.Errorf("spans exported: %d with ratio 0, %d with ratio 1", n0, n1)
		}
	})
	for _, v := range vs {
		// drain stops quietly at any error: check once that the whole
		// slab comes.
		if n, err := slabBytes(v.c); err != nil || n != benchN*benchN*4 {
			b.Fatalf("%s: read %d bytes: %v", v.name, n, err)
		}
	}

	cases := []struct {
		name  string
		bytes int64 // per op
		ops   int   // per turn
		op    func(c gatewayv1.ArrayServiceClient, r *rand.Rand)
	}{
		{"read", benchN * benchN * 4, 1, func(c gatewayv1.ArrayServiceClient, _ *rand.Rand) {
			drain(b, c, &gatewayv1.ReadSlabRequest{Path: "a"})
		}},
		{"write", int64(len(band)), 1, func(c gatewayv1.ArrayServiceClient, _ *rand.Rand) {
			writeBand(b, c, "w", band, writeRows)
		}},
		{"small", 64 * 64 * 4, 20, func(c gatewayv1.ArrayServiceClient, r *rand.Rand) {
			y, x := r.Int64N(benchN-64), r.Int64N(benchN-64)
			drain(b, c, &gatewayv1.ReadSlabRequest{Path: "a", Selection: []*gatewayv1.Slice{{Start: uint64(y), Stop: uint64(y + 64)}, {Start: uint64(x), Stop: uint64(x + 64)}}})
		}},
	}
	for _, cs := range cases {
		b.Run("case="+cs.name, func(b *testing.B) {
			cpu := make([]time.Duration, len(vs))
			wall := make([]time.Duration, len(vs))
			ops := 0
			// The same boxes for every variant.
			rs := make([]*rand.Rand, len(vs))
			for i := range rs {
				rs[i] = rand.New(rand.NewPCG(1, 2))
			}
			for i := 0; b.Loop(); i++ {
				for k := range vs {
					j := (i + k) % len(vs)
					v := vs[j]
					c0, t0 := processCPUOnly(b), time.Now()
					for range cs.ops {
						cs.op(v.c, rs[j])
					}
					if v.flush != nil {
						v.flush()
					}
					cpu[j] += processCPUOnly(b) - c0
					wall[j] += time.Since(t0)
				}
				ops += cs.ops
			}
			for j, v := range vs {
				b.ReportMetric(float64(cs.bytes)*float64(ops)/wall[j].Seconds()/1e6, v.name+"-MB/s")
				b.ReportMetric(cpu[j].Seconds()*1e3/float64(ops), v.name+"-cpu-ms/op")
				if j > 0 {
					b.ReportMetric((float64(cpu[j])/float64(cpu[0])-1)*100, v.name+"-overhead-%")
				}
			}
		})
	}
}

// processCPUOnly is the CPU time (user and system) this process has used.
func processCPUOnly(b *testing.B) time.Duration {
	all, _ := processCPU(b)
	return all
}

// serveObserved serves a gateway on store fs over loopback, measured into
// a registry of its own when withMetrics (as serveMeasured), traced when
// tracing is set up, and dials it with clientOpts.
func serveObserved(b *testing.B, fs storesvc.Store, withMetrics bool, clientOpts []grpc.DialOption) gatewayv1.ArrayServiceClient {
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
	b.Cleanup(func() { cc.Close(); srv.Stop() })
	return gatewayv1.NewArrayServiceClient(cc)
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
