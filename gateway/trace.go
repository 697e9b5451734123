package gateway

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// The engine's spans (a slab's planning, store fetches, decodes and
// encodes, sends) are children of the span of the call the context
// carries (the transport's, otelgrpc on a server), made with that span's
// own tracer provider: the engine uses only OpenTelemetry's API, never
// its SDK or a global, and a call that is not traced (tracing off, or not
// sampled) pays one context lookup per span it would have made.

const tracerName = "github.com/zarrgate/zarrgate/gateway"

// noSpan is the span of a call that is not traced: its methods do nothing.
var noSpan = trace.SpanFromContext(context.Background())

// startSpan starts a child span of ctx's span named name, if that one
// records, with the number of chunks it works on unless chunks < 0. (No
// attribute is built for a call that is not traced: a variadic list of
// them would be allocated per call.)
func startSpan(ctx context.Context, name string, chunks int) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, noSpan
	}
	ctx, span := parent.TracerProvider().Tracer(tracerName).Start(ctx, name)
	if chunks >= 0 {
		span.SetAttributes(attribute.Int("zarrgate.chunks", chunks))
	}
	return ctx, span
}

// endSpan ends span, marking it failed if err is set.
func endSpan(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// tracedEmit wraps a read's emit so that each block's send is a span,
// when the read is traced.
func tracedEmit(ctx context.Context, emit func(Block) error) func(Block) error {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return emit
	}
	return func(b Block) error {
		_, span := startSpan(ctx, "gateway.send", -1)
		span.SetAttributes(attribute.Int("zarrgate.bytes", len(b.Data)))
		err := emit(b)
		endSpan(span, err)
		return err
	}
}
