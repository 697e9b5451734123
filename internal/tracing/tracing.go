// Package tracing turns OpenTelemetry tracing on for a process: an OTLP
// (gRPC) exporter, a parent-based ratio sampler and the process's service
// name, installed as OpenTelemetry's global tracer provider and W3C
// trace-context propagator, which the gRPC instrumentation (otelgrpc, in
// internal/rpc), the codec batches (codecsvc) and the gateway engine's
// spans (through the span in the context) all use.
//
// Tracing is off unless Setup is called with an endpoint: then no stats
// handler is installed and no span is made, so it costs nothing.
package tracing

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
)

// enabled is set once Setup has installed a tracer provider.
var enabled atomic.Bool

// propagateOnly is set while the sample ratio is 0: this process records
// no trace of its own, and the gRPC handlers keep calls outside any
// caller's trace from otelgrpc (gated).
var propagateOnly atomic.Bool

// Enabled reports whether this process traces (Setup was called).
func Enabled() bool { return enabled.Load() }

// Options configure Setup.
type Options struct {
	// Endpoint is the OTLP/gRPC collector: http://host:port (plaintext),
	// https://host:port (TLS, system roots or
	// OTEL_EXPORTER_OTLP_CERTIFICATE), or host:port (TLS).
	Endpoint string
	// SampleRatio is the fraction of traces started here that are
	// recorded (0..1); calls that arrive with a trace context follow
	// their caller's decision.
	SampleRatio float64
	// Service is the service.name of this process's spans
	// (OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override it).
	Service, Version string
}

// Setup installs the global tracer provider and propagator. The returned
// function flushes the spans not yet exported, stops the exporter and
// turns tracing off again, as before Setup: Enabled false (servers and
// connections made afterwards get no handler), and the global provider
// and propagator ones that record and propagate nothing. Call it when the
// process ends (benchmarks call it between variants).
func Setup(ctx context.Context, o Options) (shutdown func(context.Context) error, err error) {
	if o.Endpoint == "" {
		return nil, errors.New("no OTLP endpoint")
	}
	if o.SampleRatio < 0 || o.SampleRatio > 1 {
		return nil, fmt.Errorf("sample ratio %v: want 0..1", o.SampleRatio)
	}
	var eopt otlptracegrpc.Option
	if u, perr := url.Parse(o.Endpoint); perr == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" {
		eopt = otlptracegrpc.WithEndpointURL(o.Endpoint) // http: plaintext
	} else {
		eopt = otlptracegrpc.WithEndpoint(o.Endpoint)
	}
	// The exporter connects lazily and retries in the background: a
	// collector that is down loses spans, never calls.
	exp, err := otlptracegrpc.New(ctx, eopt)
	if err != nil {
		return nil, fmt.Errorf("OTLP exporter for %s: %w", o.Endpoint, err)
	}
	attrs := []resource.Option{resource.WithAttributes(semconv.ServiceName(o.Service))}
	if o.Version != "" {
		attrs = append(attrs, resource.WithAttributes(semconv.ServiceVersion(o.Version)))
	}
	// Later options win: the environment overrides the role's name.
	res, err := resource.New(ctx, append(attrs, resource.WithFromEnv(), resource.WithHost(), resource.WithProcessPID())...)
	if err != nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(o.SampleRatio))),
	)
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	propagateOnly.Store(o.SampleRatio == 0)
	enabled.Store(true)
	return func(ctx context.Context) error {
		enabled.Store(false)
		propagateOnly.Store(false)
		// (Not the providers from before Setup: OpenTelemetry's default
		// ones delegate to the first ones set, forever.)
		otel.SetTracerProvider(noop.NewTracerProvider())
		otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return tp.Shutdown(ctx)
	}, nil
}

// untraced are calls that get no span: health checks (probes and the
// gateway's watch of its workers, all the time, saying nothing about a
// request) and the codec workers' Process streams, which live as long as
// the connection and carry many calls' batches, each traced on its own
// (codecsvc).
var untraced = filters.None(filters.HealthCheck(), filters.FullMethodName("/zarrgate.codec.v1.CodecService/Process"))

// ServerHandler is the gRPC server stats handler that continues the
// caller's trace (W3C traceparent in the metadata) with a span per call;
// nil when tracing is off.
func ServerHandler() stats.Handler {
	if !Enabled() {
		return nil
	}
	h := otelgrpc.NewServerHandler(otelgrpc.WithFilter(untraced))
	if propagateOnly.Load() {
		return gated{h: h, server: true}
	}
	return h
}

// ClientHandler is the gRPC client stats handler that makes a span per
// call and sends its trace context along; nil when tracing is off.
func ClientHandler() stats.Handler {
	if !Enabled() {
		return nil
	}
	h := otelgrpc.NewClientHandler(otelgrpc.WithFilter(untraced))
	if propagateOnly.Load() {
		return gated{h: h}
	}
	return h
}

// gated is otelgrpc's handler at sample ratio 0, where this process
// records no trace of its own. A server call that arrives without a trace
// context would get from otelgrpc a span that records nothing and a fresh
// trace id, after a copy of the metadata, the method parsed and several
// allocations (about 6 % of a small read's CPU, docs/benchmarks.md). gated
// gives it the same result cheaply: an unsampled span context with a
// random trace id (the call's request id, and what it propagates), and
// otelgrpc never sees the call. Calls the gateway makes inside such a call
// send that unsampled trace context on (so workers, whatever their own
// ratio, record nothing of it), again without otelgrpc. Calls in a caller's
// trace go through otelgrpc as before: recorded if the caller sampled
// them, and passed on.
type gated struct {
	h      stats.Handler
	server bool
}

// gatedKey marks a context whose call gated kept from otelgrpc.
type gatedKey struct{}

func (g gated) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	if g.server {
		if len(metadata.ValueFromIncomingContext(ctx, traceparentHeader)) != 0 {
			return g.h.TagRPC(ctx, info)
		}
		var sc trace.SpanContextConfig
		binary.LittleEndian.PutUint64(sc.TraceID[:8], rand.Uint64())
		binary.LittleEndian.PutUint64(sc.TraceID[8:], rand.Uint64())
		binary.LittleEndian.PutUint64(sc.SpanID[:], rand.Uint64()|1)
		ctx = trace.ContextWithSpanContext(ctx, trace.NewSpanContext(sc))
		return context.WithValue(ctx, gatedKey{}, true)
	}
	sc := trace.SpanContextFromContext(ctx)
	if sc.IsSampled() || ctx.Value(gatedKey{}) == nil {
		return g.h.TagRPC(ctx, info)
	}
	// Inside a gated call: pass its unsampled trace context on, as
	// otelgrpc would have.
	tp := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-00"
	return metadata.AppendToOutgoingContext(ctx, traceparentHeader, tp)
}

// HandleRPC passes on the events of the calls TagRPC passed on.
func (g gated) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if g.server || !trace.SpanContextFromContext(ctx).IsSampled() {
		if ctx.Value(gatedKey{}) != nil {
			return
		}
	}
	g.h.HandleRPC(ctx, s)
}

func (g gated) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	return g.h.TagConn(ctx, info)
}

func (g gated) HandleConn(ctx context.Context, s stats.ConnStats) { g.h.HandleConn(ctx, s) }

// traceparentHeader is the W3C trace context's metadata key.
const traceparentHeader = "traceparent"

// Inject writes ctx's trace context into a carrier map (for a message
// that carries it, as codec batches do); nil when there is none.
func Inject(ctx context.Context) map[string]string {
	if !Enabled() {
		return nil
	}
	c := propagation.MapCarrier{}
	otel.GetTextMapPropagator().Inject(ctx, c)
	if len(c) == 0 {
		return nil
	}
	return c
}

// Extract returns ctx with the trace context of carrier, as Inject wrote it.
func Extract(ctx context.Context, carrier map[string]string) context.Context {
	if len(carrier) == 0 {
		return ctx
	}
	return otel.GetTextMapPropagator().Extract(ctx, propagation.MapCarrier(carrier))
}

// RequestIDHeader is the metadata key of a call's request id, both ways:
// a caller may send one, and every response carries the id the call ran
// under (in the response header).
const RequestIDHeader = "x-request-id"

// maxRequestIDLen bounds a request id taken from a caller: it is logged
// with every line of the call and sent on to workers.
const maxRequestIDLen = 128

type requestIDKey struct{}

// WithRequestID returns ctx carrying the request id id, which every log
// line made with ctx carries (LogHandler) and calls made with ctx send on.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestID returns the request id ctx carries, or "".
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// ValidRequestID reports whether id, sent by a caller, may be used as a
// request id: 1 to 128 visible ASCII characters (no spaces, no control
// characters, nothing a log parser could take for structure).
func ValidRequestID(id string) bool {
	if len(id) == 0 || len(id) > maxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c > '~' || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}
