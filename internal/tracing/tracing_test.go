package tracing

import (
	"context"
	"net"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
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
