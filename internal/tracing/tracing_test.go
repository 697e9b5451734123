package tracing

import (
	"context"
	"net"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
)

// TestSetupAndShutdown: Setup turns tracing on (handlers, a recording
// provider, a propagator that writes traceparent) and its shutdown turns
// it all off again, so that a process (a benchmark's variants) can trace
// for a while and then not.
func TestSetupAndShutdown(t *testing.T) {
	if Enabled() || ServerHandler() != nil || ClientHandler() != nil {
		t.Fatal("tracing is on before Setup")
	}
	// A port nobody listens on: the exporter connects lazily, and spans
	// that cannot be exported are lost, never an error of Setup.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	for _, ratio := range []float64{-0.1, 1.5} {
		if _, err := Setup(context.Background(), Options{Endpoint: "http://" + addr, SampleRatio: ratio}); err == nil || Enabled() {
			t.Errorf("Setup with ratio %v: no error", ratio)
		}
	}
	stop, err := Setup(context.Background(), Options{Endpoint: "http://" + addr, SampleRatio: 1, Service: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if !Enabled() || ServerHandler() == nil || ClientHandler() == nil {
		t.Fatal("tracing is off after Setup")
	}
	ctx, span := otel.Tracer("test").Start(context.Background(), "op")
	if !span.IsRecording() {
		t.Error("a span of ratio 1 does not record")
	}
	if c := Inject(ctx); c["traceparent"] == "" {
		t.Errorf("Inject = %v, want a traceparent", c)
	}
	span.End()

	// Nothing listens: no flush to wait for.
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	stop(cancelled)
	if Enabled() || ServerHandler() != nil || ClientHandler() != nil {
		t.Error("tracing is still on after shutdown")
	}
	if Inject(ctx) != nil {
		t.Error("Inject writes a trace context after shutdown")
	}
	c := propagation.MapCarrier{}
	otel.GetTextMapPropagator().Inject(ctx, c)
	if len(c) != 0 {
		t.Errorf("the global propagator still writes %v after shutdown", c)
	}
	if _, span := otel.Tracer("test").Start(context.Background(), "op"); span.IsRecording() || span.SpanContext().IsValid() {
		t.Error("the global tracer provider still makes spans after shutdown")
	}
}

// TestRatioZeroGate: at sample ratio 0 a call that arrives without a
// trace context is kept from otelgrpc (the cost of a small call) but gets
// what otelgrpc would have given it: an unsampled trace context, which it
// passes on to the workers (calls and codec batches) so that they record
// nothing of it either. A caller's trace is still continued, sampled as the
// caller sampled it, and passed on.
func TestRatioZeroGate(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	stop, err := Setup(context.Background(), Options{Endpoint: "http://" + addr, SampleRatio: 0, Service: "test"})
	if err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	defer stop(cancelled)
	srv, cli := ServerHandler(), ClientHandler()
	if _, ok := srv.(gated); !ok {
		t.Fatalf("server handler at ratio 0 is %T, want gated", srv)
	}
	info := &stats.RPCTagInfo{FullMethodName: "/zarrgate.array.v1.ArrayService/ReadSlab"}

	// No trace context: a fresh unsampled one, passed on.
	plain := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-request-id", "r1"))
	ctx := srv.TagRPC(plain, info)
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || sc.IsSampled() || trace.SpanFromContext(ctx).IsRecording() {
		t.Fatalf("server: a call without a trace context has span context %+v, want a valid unsampled one", sc)
	}
	if ctx.Value(gatedKey{}) == nil {
		t.Error("server: the call went to otelgrpc")
	}
	if sc2 := trace.SpanContextFromContext(srv.TagRPC(plain, info)); sc2.TraceID() == sc.TraceID() {
		t.Error("two calls got the same trace id")
	}
	want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-00"
	md, _ := metadata.FromOutgoingContext(cli.TagRPC(ctx, info))
	if tp := md.Get("traceparent"); len(tp) != 1 || tp[0] != want {
		t.Errorf("client inside the call sends traceparent %v, want %s", tp, want)
	}
	if c := Inject(ctx); c["traceparent"] != want {
		t.Errorf("a codec batch of the call carries %v, want traceparent %s", c, want)
	}

	// A caller's sampled trace: continued (recording) and passed on.
	for _, sampled := range []bool{true, false} {
		flags := "00"
		if sampled {
			flags = "01"
		}
		parent := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-" + flags
		in := metadata.NewIncomingContext(context.Background(), metadata.Pairs("traceparent", parent))
		ctx := srv.TagRPC(in, info)
		if ctx.Value(gatedKey{}) != nil {
			t.Errorf("sampled=%v: a call in a caller's trace was kept from otelgrpc", sampled)
		}
		sc := trace.SpanContextFromContext(ctx)
		if sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Errorf("sampled=%v: server span trace id %v, want the caller's", sampled, sc.TraceID())
		}
		if got := trace.SpanFromContext(ctx).IsRecording(); got != sampled {
			t.Errorf("sampled=%v: server span records: %v", sampled, got)
		}
		out := cli.TagRPC(ctx, info)
		md, _ := metadata.FromOutgoingContext(out)
		if tp := md.Get("traceparent"); len(tp) != 1 || tp[0][3:35] != "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Errorf("sampled=%v: client sends traceparent %v, want the caller's trace", sampled, tp)
		}
	}
}
