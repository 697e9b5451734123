package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/zarrgate/zarrgate/client"
	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"
)

// otlpReceiver is an OpenTelemetry collector's trace service on
// 127.0.0.1: it keeps every span the processes export.
type otlpReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []gotSpan
}

type gotSpan struct {
	service, name             string
	traceID, spanID, parentID string
}

func (r *otlpReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				r.spans = append(r.spans, gotSpan{service: service, name: sp.GetName(),
					traceID: fmt.Sprintf("%x", sp.GetTraceId()), spanID: fmt.Sprintf("%x", sp.GetSpanId()), parentID: fmt.Sprintf("%x", sp.GetParentSpanId())})
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// trace returns the spans received of one trace, by span id.
func (r *otlpReceiver) trace(id string) map[string]gotSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]gotSpan{}
	for _, s := range r.spans {
		if s.traceID == id {
			out[s.spanID] = s
		}
	}
	return out
}

func startReceiver(t *testing.T) (*otlpReceiver, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &otlpReceiver{}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, r)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return r, "http://" + lis.Addr().String()
}

// hasAncestor reports whether span s has an ancestor (or is one) that
// satisfies want, following parent ids within the trace.
func hasAncestor(spans map[string]gotSpan, s gotSpan, want func(gotSpan) bool) bool {
	for range len(spans) + 1 {
		if want(s) {
			return true
		}
		p, ok := spans[s.parentID]
		if !ok {
			return false
		}
		s = p
	}
	return false
}

// jsonLines parses a process's log as JSON lines, failing on any line that
// is not an object.
func jsonLines(t *testing.T, name, logs string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(logs) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Errorf("%s: a log line is not JSON (%v): %s", name, err, line)
			continue
		}
		out = append(out, m)
	}
	return out
}

// accessLines are the access log lines ("finished call") of method with
// the request id id.
func accessLines(lines []map[string]any, method, id string) []map[string]any {
	var out []map[string]any
	for _, m := range lines {
		if m["msg"] == "finished call" && (method == "" || m["grpc.method"] == method) && m["request_id"] == id {
			out = append(out, m)
		}
	}
	return out
}

// A gateway over a store worker and a codec worker, all three exporting
// traces to an in-process OTLP receiver and logging JSON: one ReadSlab is
// one trace, with spans from the three processes, the gateway's planning,
// fetch, decode and send spans under its ReadSlab span, the store
// worker's spans under a gateway fetch and the codec worker's under a
// gateway decode. The call's request id (its trace id) comes back in the
// x-request-id header and is in the access log lines of the gateway and
// of the store worker for that call.
func TestTraceOfReadSlab(t *testing.T) {
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50") // export within 50 ms, not 5 s
	recv, endpoint := startReceiver(t)
	obs := []string{"--otlp-endpoint", endpoint, "--log-format", "json", "--log-level", "debug"}
	store := startCommand(t, "store-worker", append([]string{"--root", t.TempDir()}, obs...)...)
	codec := startCommand(t, "codec-worker", obs...)
	gw := startCommand(t, "gateway", append([]string{"--store", store.addr, "--codec", codec.addr}, obs...)...)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, gw.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, err := c.CreateArray(ctx, "t", client.ArraySpec{Shape: []int64{64, 64}, DataType: "int32", ChunkShape: []int64{32, 32}})
	if err != nil {
		t.Fatal(err)
	}
	data := make([]int32, 64*64)
	for i := range data {
		data[i] = int32(i)
	}
	if _, err := client.Write(ctx, a, nil, data); err != nil {
		t.Fatal(err)
	}

	cc, err := grpc.NewClient(gw.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	arrays := gatewayv1.NewArrayServiceClient(cc)
	readSlab := func(ctx context.Context) (id string, sent int) {
		t.Helper()
		st, err := arrays.ReadSlab(ctx, &gatewayv1.ReadSlabRequest{Path: "t"})
		if err != nil {
			t.Fatal(err)
		}
		for {
			m, err := st.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			sent += len(m.GetBlock().GetData())
		}
		md, err := st.Header()
		if err != nil {
			t.Fatal(err)
		}
		if v := md.Get("x-request-id"); len(v) == 1 {
			id = v[0]
		}
		return id, sent
	}
	id, sent := readSlab(ctx)
	if len(id) != 32 || sent != 64*64*4 {
		t.Fatalf("ReadSlab: x-request-id %q (want a trace id), %d bytes", id, sent)
	}

	// The trace: the request id is its trace id.
	var spans map[string]gotSpan
	complete := func() bool {
		spans = recv.trace(id)
		seen := map[string]bool{}
		for _, s := range spans {
			seen[s.service+" "+s.name] = true
		}
		return seen["zarrgate-gateway zarrgate.gateway.v1.ArrayService/ReadSlab"] && seen["zarrgate-gateway gateway.plan"] &&
			seen["zarrgate-gateway gateway.fetch"] && seen["zarrgate-gateway gateway.decode"] && seen["zarrgate-gateway gateway.send"] &&
			seen["zarrgate-store-worker zarrgate.store.v1.StoreService/GetPartialValues"] && seen["zarrgate-codec-worker codec.Decode"]
	}
	if !waitFor(20*time.Second, complete) {
		var names []string
		for _, s := range spans {
			names = append(names, s.service+" "+s.name)
		}
		t.Fatalf("trace %s is missing spans; it has %q (all traces: %d spans)", id, names, len(recv.spans))
	}
	isRead := func(s gotSpan) bool {
		return s.service == "zarrgate-gateway" && s.name == "zarrgate.gateway.v1.ArrayService/ReadSlab"
	}
	named := func(service, name string) func(gotSpan) bool {
		return func(s gotSpan) bool { return s.service == service && s.name == name }
	}
	for _, s := range spans {
		switch {
		case s.service == "zarrgate-gateway" && strings.HasPrefix(s.name, "gateway."):
			if !hasAncestor(spans, s, isRead) {
				t.Errorf("gateway span %s is not under the ReadSlab span", s.name)
			}
		case s.service == "zarrgate-store-worker" && s.name == "zarrgate.store.v1.StoreService/GetPartialValues":
			if !hasAncestor(spans, s, named("zarrgate-gateway", "gateway.fetch")) {
				t.Errorf("the store worker's %s is not under a gateway.fetch span", s.name)
			}
		case s.service == "zarrgate-codec-worker":
			if !hasAncestor(spans, s, named("zarrgate-gateway", "gateway.decode")) {
				t.Errorf("the codec worker's %s is not under a gateway.decode span", s.name)
			}
		}
		if !hasAncestor(spans, s, isRead) {
			t.Errorf("span %s %s is not under the ReadSlab span", s.service, s.name)
		}
	}

	// The request id in the logs, which are JSON, and the access line's
	// fields.
	// (An access line is written as its call's goroutine ends, which may
	// be just after the client has its answer.)
	waitFor(5*time.Second, func() bool { return len(accessLines(jsonLines(t, "store worker", store.logs.String()), "", id)) > 0 })
	var acc []map[string]any
	waitFor(5*time.Second, func() bool {
		acc = accessLines(jsonLines(t, "gateway", gw.logs.String()), "ReadSlab", id)
		return len(acc) > 0
	})
	jsonLines(t, "codec worker", codec.logs.String())
	if len(acc) != 1 {
		t.Fatalf("%d gateway access lines of ReadSlab with request_id %s, want 1", len(acc), id)
	}
	l := acc[0]
	if l["grpc.service"] != "zarrgate.gateway.v1.ArrayService" || l["grpc.code"] != "OK" || l["principal"] != "anonymous" {
		t.Errorf("access line: %v", l)
	}
	if ms, ok := l["grpc.time_ms"].(float64); !ok || ms <= 0 {
		t.Errorf("access line duration grpc.time_ms = %v", l["grpc.time_ms"])
	}
	if n, _ := l["bytes_sent"].(float64); n < 64*64*4 {
		t.Errorf("access line bytes_sent = %v, want at least the slab's %d bytes", l["bytes_sent"], 64*64*4)
	}
	if n, _ := l["bytes_received"].(float64); n <= 0 {
		t.Errorf("access line bytes_received = %v", l["bytes_received"])
	}
	if n := len(accessLines(jsonLines(t, "store worker", store.logs.String()), "", id)); n == 0 {
		t.Errorf("no store worker log line carries the request id %s", id)
	}

	// A caller's own request id is kept, returned and sent on to the
	// workers; an unacceptable one is replaced.
	mine := "client-req-42"
	got, _ := readSlab(metadata.AppendToOutgoingContext(ctx, "x-request-id", mine))
	if got != mine {
		t.Errorf("x-request-id %q sent, %q returned", mine, got)
	}
	bad := "has space " + strings.Repeat("x", 200)
	if got, _ := readSlab(metadata.AppendToOutgoingContext(ctx, "x-request-id", bad)); got == bad || len(got) != 32 {
		t.Errorf("x-request-id %q sent, %q returned: want a fresh id", bad, got)
	}
	if !waitFor(5*time.Second, func() bool {
		return len(accessLines(jsonLines(t, "store worker", store.logs.String()), "GetPartialValues", mine)) > 0
	}) {
		t.Errorf("the store worker's access lines do not carry the caller's request id %s", mine)
	}
	var mineLines []map[string]any
	waitFor(5*time.Second, func() bool {
		mineLines = accessLines(jsonLines(t, "gateway", gw.logs.String()), "ReadSlab", mine)
		return len(mineLines) > 0
	})
	if n := len(mineLines); n != 1 {
		t.Errorf("%d gateway access lines with the caller's request id, want 1", n)
	}

	// A unary call's response is sent after the interceptors: the stats
	// handler still counts it.
	var hdr metadata.MD
	if _, err := arrays.GetNode(ctx, &gatewayv1.GetNodeRequest{Path: "t"}, grpc.Header(&hdr)); err != nil {
		t.Fatal(err)
	}
	gid := hdr.Get("x-request-id")
	if len(gid) != 1 {
		t.Fatalf("GetNode returned no request id: %v", hdr)
	}
	var node []map[string]any
	waitFor(5*time.Second, func() bool {
		node = accessLines(jsonLines(t, "gateway", gw.logs.String()), "GetNode", gid[0])
		return len(node) == 1
	})
	if len(node) != 1 {
		t.Fatalf("no GetNode access line with request id %s", gid[0])
	}
	if n, _ := node[0]["bytes_sent"].(float64); n <= 0 {
		t.Errorf("GetNode access line bytes_sent = %v", node[0]["bytes_sent"])
	}
}

// A gateway at --trace-sample-ratio 0 in front of workers at the default
// ratio (1): a call without a trace context is recorded nowhere — the
// gateway passes its unsampled trace context on, so the workers do not
// start traces of their own — and still gets a request id; a Go client
// that traces (otelgrpc on its connection, through client.WithDialOptions)
// and samples its call gets the whole trace, from the gateway and both
// workers, under its own trace id.
func TestTraceRatioZeroFollowsCaller(t *testing.T) {
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	recv, endpoint := startReceiver(t)
	obs := []string{"--otlp-endpoint", endpoint}
	store := startCommand(t, "store-worker", append([]string{"--root", t.TempDir()}, obs...)...)
	codec := startCommand(t, "codec-worker", obs...)
	gw := startCommand(t, "gateway", append([]string{"--store", store.addr, "--codec", codec.addr, "--trace-sample-ratio", "0"}, obs...)...)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, gw.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, err := c.CreateArray(ctx, "t", client.ArraySpec{Shape: []int64{64, 64}, DataType: "int32", ChunkShape: []int64{32, 32}})
	if err != nil {
		t.Fatal(err)
	}
	data := make([]int32, 64*64) // not the fill value: chunks are stored, and decoded when read
	for i := range data {
		data[i] = int32(i + 1)
	}
	if _, err := client.Write(ctx, a, nil, data); err != nil {
		t.Fatal(err)
	}
	if _, _, err := client.Read[int32](ctx, a, nil); err != nil {
		t.Fatal(err)
	}

	// A traced Go client: its own tracer provider, sampling everything,
	// and otelgrpc on its connection.
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	defer tp.Shutdown(context.Background())
	tc, err := client.Dial(ctx, gw.addr, client.WithDialOptions(grpc.WithStatsHandler(otelgrpc.NewClientHandler(
		otelgrpc.WithTracerProvider(tp), otelgrpc.WithPropagators(propagation.TraceContext{})))))
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	sctx, span := tp.Tracer("test").Start(ctx, "client read")
	ta, err := tc.OpenArray(sctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := client.Read[int32](sctx, ta, nil); err != nil {
		t.Fatal(err)
	}
	span.End()
	traced := span.SpanContext().TraceID().String()

	complete := func() bool {
		seen := map[string]bool{}
		for _, s := range recv.trace(traced) {
			seen[s.service+" "+s.name] = true
		}
		// A slab this small is one ReadSlabSmall call (client/small.go).
		return seen["zarrgate-gateway zarrgate.gateway.v1.ArrayService/ReadSlabSmall"] && seen["zarrgate-gateway gateway.decode"] &&
			seen["zarrgate-store-worker zarrgate.store.v1.StoreService/GetPartialValues"] && seen["zarrgate-codec-worker codec.Decode"]
	}
	if !waitFor(20*time.Second, complete) {
		t.Fatalf("the traced client's trace %s is incomplete: %v", traced, recv.trace(traced))
	}
	// By now the untraced calls' spans, had any been made, would have
	// been exported too (they ended before the traced call began).
	time.Sleep(500 * time.Millisecond)
	recv.mu.Lock()
	defer recv.mu.Unlock()
	for _, s := range recv.spans {
		if s.traceID != traced {
			t.Errorf("span %s %s of trace %s: a call outside any trace was recorded at ratio 0", s.service, s.name, s.traceID)
		}
	}
}
