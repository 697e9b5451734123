package metrics

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/gateway"
	"github.com/zarrgate/zarrgate/internal/membudget"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/memory"
	"github.com/zarrgate/zarrgate/zarr"
)

// fakeWorkers reports batches in flight as the remote codec engine does.
type fakeWorkers map[string]int

func (f fakeWorkers) InFlight(fn func(string, int)) {
	for w, n := range f {
		fn(w, n)
	}
}

// everything returns a registry with every collector registered and
// exercised once, and the gateway it measures.
func everything(t *testing.T) (*Registry, *gateway.Gateway, *membudget.Budget) {
	t.Helper()
	r := New()
	b := membudget.New(1<<20, 0)
	store := storesvc.Wrap(memory.New(), storesvc.WithObserver(r.StoreObserver("memory")))
	g := gateway.New(store, r.Engine(codecsvc.NewLocal()), gateway.Config{Budget: b})
	r.Budget(b)
	r.Gateway(g)
	r.CodecWorkers(fakeWorkers{"10.0.0.1:50053": 2})
	ctx := context.Background()
	if _, err := store.Set(ctx, "k", strings.NewReader("hello"), storesvc.Condition{}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Get(ctx, "missing", storesvc.ByteRange{}); err == nil {
		t.Fatal("missing key found")
	}
	// A batch of each kind, and a failing one.
	var cs []zarr.CodecSpec
	json.Unmarshal([]byte(`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd"}]`), &cs)
	spec := &codec.BatchSpec{Codecs: cs, Shape: []int64{4}, DataType: zarr.MustDataType("int32")}
	e := r.Engine(codecsvc.NewLocal())
	enc, err := e.Encode(ctx, spec, []codec.Chunk{{Data: make([]byte, 16)}})
	if err != nil {
		t.Fatal(err)
	}
	e.Decode(ctx, spec, enc)
	e.Decode(ctx, spec, [][]byte{[]byte("not zstd")})
	return r, g, b
}

// Every metric name and help text passes promlint (units in names,
// _total on counters, no camel case...), apart from what the Go and
// process collectors and gRPC provider export as they are.
func TestMetricNamesLint(t *testing.T) {
	r, _, _ := everything(t)
	fams, err := r.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(fams).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "zarrgate_") {
			t.Errorf("%s: %s", p.Metric, p.Text)
		}
	}
	ours := 0
	for _, f := range fams {
		if strings.HasPrefix(f.GetName(), "zarrgate_") {
			ours++
		}
	}
	if ours != 19 {
		t.Errorf("%d zarrgate_ metrics gathered, want 19", ours)
	}
}

// The store observer counts calls by op and code, and exactly the bytes of
// values returned and written; a Set from a bytes.Reader keeps its
// WriteTo (the count is right either way).
func TestStoreObserver(t *testing.T) {
	r := New()
	s := storesvc.Wrap(memory.New(), storesvc.WithObserver(r.StoreObserver("memory")))
	ctx := context.Background()
	s.Set(ctx, "a", bytes.NewReader(make([]byte, 1000)), storesvc.Condition{})
	s.Set(ctx, "b", io.MultiReader(strings.NewReader("xyz")), storesvc.Condition{})
	obj, err := s.Get(ctx, "a", storesvc.Bounded(100, 50))
	if err != nil {
		t.Fatal(err)
	}
	obj.Close()
	s.Get(ctx, "nope", storesvc.ByteRange{})
	s.GetPartialValues(ctx, []storesvc.KeyRange{{Key: "a"}, {Key: "b"}, {Key: "nope"}})
	s.SetPartialValues(ctx, []storesvc.PartialWrite{{Key: "a", Offset: 0, Data: []byte("12345")}})
	for range s.ListPrefix(ctx, "") {
	}
	s.Erase(ctx, "b", storesvc.Condition{})
	if _, err := s.Get(ctx, "../bad", storesvc.ByteRange{}); err == nil {
		t.Fatal("bad key accepted")
	}
	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"written", testutil.ToFloat64(r.storeWritten.WithLabelValues("memory")), 1000 + 3 + 5},
		{"read", testutil.ToFloat64(r.storeRead.WithLabelValues("memory")), 50 + 1000 + 3},
		{"set OK", testutil.ToFloat64(r.storeCalls.WithLabelValues("memory", "set", "OK")), 2},
		{"get OK", testutil.ToFloat64(r.storeCalls.WithLabelValues("memory", "get", "OK")), 1},
		{"get NotFound", testutil.ToFloat64(r.storeCalls.WithLabelValues("memory", "get", "NotFound")), 1},
		{"get_partial_values", testutil.ToFloat64(r.storeCalls.WithLabelValues("memory", "get_partial_values", "OK")), 1},
		{"set_partial_values", testutil.ToFloat64(r.storeCalls.WithLabelValues("memory", "set_partial_values", "OK")), 1},
		{"list_prefix", testutil.ToFloat64(r.storeCalls.WithLabelValues("memory", "list_prefix", "OK")), 1},
		{"erase", testutil.ToFloat64(r.storeCalls.WithLabelValues("memory", "erase", "OK")), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
	// A refused key never reached the backend: no InvalidArgument series,
	// only the OK series of every op (made at once) and NotFound.
	if n := testutil.CollectAndCount(r.storeCalls); n != int(storesvc.NumOps)+1 {
		t.Errorf("%d store call series, want %d", n, storesvc.NumOps+1)
	}
}

func TestCodecLabel(t *testing.T) {
	spec := func(chain string) *codec.BatchSpec {
		var cs []zarr.CodecSpec
		if err := json.Unmarshal([]byte(chain), &cs); err != nil {
			t.Fatal(err)
		}
		return &codec.BatchSpec{Codecs: cs}
	}
	for chain, want := range map[string]string{
		`[{"name":"bytes"},{"name":"zstd"},{"name":"crc32c"}]`: "zstd",
		`[{"name":"bytes"}]`: "bytes",
		`[{"name":"transpose"},{"name":"bytes"},{"name":"gzip"}]`: "gzip",
		`[{"name":"bytes"},{"name":"made-up-by-a-client-1"}]`:     "other",
		`[{"name":"crc32c"}]`: "crc32c",
		`[]`:                  "none",
	} {
		if got := CodecLabel(spec(chain)); got != want {
			t.Errorf("%s: label %q, want %q", chain, got, want)
		}
	}
}

// The engine decorator counts chunks and batches by codec, failures by
// code; the gateway collector reads its counters and segments; the
// budget's gauges follow reservations.
func TestCollectors(t *testing.T) {
	r, g, budget := everything(t)
	ctx := context.Background()
	var cs []zarr.CodecSpec
	json.Unmarshal([]byte(`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd"}]`), &cs)
	spec := &codec.BatchSpec{Codecs: cs, Shape: []int64{4}, DataType: zarr.MustDataType("int32")}
	e := r.Engine(codecsvc.NewLocal())
	enc, err := e.Encode(ctx, spec, []codec.Chunk{{Data: make([]byte, 16)}, {Data: make([]byte, 16)}, {Data: make([]byte, 16)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Decode(ctx, spec, enc[:2]); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Decode(ctx, spec, [][]byte{[]byte("not zstd")}); err == nil {
		t.Fatal("garbage decoded")
	}
	// everything did one of each already.
	if got := testutil.ToFloat64(r.codecChunks.WithLabelValues("encode", "zstd")); got != 1+3 {
		t.Errorf("encoded chunks %v, want 4", got)
	}
	if got := testutil.ToFloat64(r.codecChunks.WithLabelValues("decode", "zstd")); got != 1+2 {
		t.Errorf("decoded chunks %v, want 3", got)
	}
	if got := testutil.ToFloat64(r.codecFailed.WithLabelValues("decode", "DataLoss")); got != 2 {
		t.Errorf("failed decodes %v, want 2", got)
	}
	if got := testutil.CollectAndCount(r.codecFailed); got != 1 {
		t.Errorf("%d failed-batch series, want 1", got)
	}
	// Another chain counts under its own label, in both ops (the series
	// are cached by op and label).
	var plain []zarr.CodecSpec
	json.Unmarshal([]byte(`[{"name":"bytes","configuration":{"endian":"little"}}]`), &plain)
	pspec := &codec.BatchSpec{Codecs: plain, Shape: []int64{4}, DataType: zarr.MustDataType("int32")}
	penc, err := e.Encode(ctx, pspec, []codec.Chunk{{Data: make([]byte, 16)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Decode(ctx, pspec, [][]byte{penc[0], penc[0]}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		op, label string
		want      float64
	}{{"encode", "bytes", 1}, {"decode", "bytes", 2}, {"encode", "zstd", 4}, {"decode", "zstd", 3}} {
		if got := testutil.ToFloat64(r.codecChunks.WithLabelValues(c.op, c.label)); got != c.want {
			t.Errorf("%s %s chunks %v, want %v", c.op, c.label, got, c.want)
		}
	}
	if got := testutil.CollectAndCount(r.codecDuration); got != 4 {
		t.Errorf("%d batch-duration series, want 4", got)
	}

	g.Stats().NodeHits.Add(3)
	g.Stats().WriteConflicts.Add(2)
	res, err := budget.Acquire(ctx, 4096, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Release()
	want := `
# HELP zarrgate_codec_worker_batches_in_flight Batches sent to a codec worker and not yet answered, by worker address.
# TYPE zarrgate_codec_worker_batches_in_flight gauge
zarrgate_codec_worker_batches_in_flight{worker="10.0.0.1:50053"} 2
# HELP zarrgate_memory_budget_in_use_bytes Bytes reserved against the memory budget (--memory-limit) by calls in flight and kept buffers.
# TYPE zarrgate_memory_budget_in_use_bytes gauge
zarrgate_memory_budget_in_use_bytes 4096
# HELP zarrgate_memory_budget_limit_bytes The memory budget (--memory-limit).
# TYPE zarrgate_memory_budget_limit_bytes gauge
zarrgate_memory_budget_limit_bytes 1.048576e+06
# HELP zarrgate_write_conflicts_total Read-modify-writes of a chunk or shard whose conditional write found the value changed (a concurrent writer), and that were read and merged again.
# TYPE zarrgate_write_conflicts_total counter
zarrgate_write_conflicts_total 2
`
	if err := testutil.GatherAndCompare(r.Gatherer(), strings.NewReader(want), "zarrgate_codec_worker_batches_in_flight",
		"zarrgate_memory_budget_in_use_bytes", "zarrgate_memory_budget_limit_bytes", "zarrgate_write_conflicts_total"); err != nil {
		t.Error(err)
	}
	if err := testutil.GatherAndCompare(r.Gatherer(), strings.NewReader(`
# HELP zarrgate_metadata_cache_hits_total Lookups answered by the gateway's metadata cache, by kind (node: a node's metadata; shard_index: a shard's index).
# TYPE zarrgate_metadata_cache_hits_total counter
zarrgate_metadata_cache_hits_total{kind="node"} 3
zarrgate_metadata_cache_hits_total{kind="shard_index"} 0
`), "zarrgate_metadata_cache_hits_total"); err != nil {
		t.Error(err)
	}
}

// remoteEngine is an engine that says it runs on codec workers.
type remoteEngine struct{ codec.Engine }

func (remoteEngine) Remote() bool { return true }

// remoteSelect is a remote engine that takes selections (as the codec
// workers' client does).
type remoteSelect struct{ selectLocal }

func (remoteSelect) Remote() bool { return true }

// remoteFetch is a remote engine whose workers also fetch.
type remoteFetch struct{ remoteSelect }

func (remoteFetch) DecodeFetched(context.Context, *codec.BatchSpec, []codec.Ref, []codec.Selection) ([]codec.Chunk, []bool, error) {
	return nil, nil, nil
}

// TestEngineSaysRemote: every observed engine (Engine wraps an engine in
// one of three types, by the capabilities it offers) passes on whether the
// engine it wraps runs on codec workers, which the gateway asks to know
// whether its processors do the codec work (its scheduler shares only
// those), and keeps those capabilities.
func TestEngineSaysRemote(t *testing.T) {
	r := New()
	local := codecsvc.NewLocal()
	for _, c := range []struct {
		e              codec.Engine
		want           bool
		select_, fetch bool
	}{
		{local, false, true, false}, // codecsvc.Local decodes zstd selections from a prefix
		{plainEngine{local}, false, false, false},
		{remoteEngine{local}, true, false, false},
		{selectLocal{local}, false, true, false},
		{remoteSelect{selectLocal{local}}, true, true, false},
		{remoteFetch{remoteSelect{selectLocal{local}}}, true, true, true},
	} {
		e := r.Engine(c.e)
		got, ok := e.(interface{ Remote() bool })
		if !ok || got.Remote() != c.want {
			t.Errorf("observed %T (as %T): Remote() = %v (implemented: %v), want %v", c.e, e, ok && got.Remote(), ok, c.want)
		}
		if _, ok := e.(codec.SelectDecoder); ok != c.select_ {
			t.Errorf("observed %T (as %T): offers selections %v, want %v", c.e, e, ok, c.select_)
		}
		if _, ok := e.(codec.FetchDecoder); ok != c.fetch {
			t.Errorf("observed %T (as %T): offers worker-fetch %v, want %v", c.e, e, ok, c.fetch)
		}
		// Whether the engine's encoded results are the caller's own, to
		// recycle, passes on too.
		inner, iok := c.e.(interface{ EncodesOwned() bool })
		owned, ok := e.(interface{ EncodesOwned() bool })
		if wantOwned := iok && inner.EncodesOwned(); !ok || owned.EncodesOwned() != wantOwned {
			t.Errorf("observed %T (as %T): EncodesOwned() = %v (implemented: %v), want %v", c.e, e, ok && owned.EncodesOwned(), ok, wantOwned)
		}
	}
}

// zarrgate_build_info is 1, labelled with what the binary is.
func TestBuildInfo(t *testing.T) {
	r := New()
	r.BuildInfo("v1.2.3", "0123abc", "go1.26.8", "libzstd 1.5.4, libdeflate 1.14")
	if err := testutil.GatherAndCompare(r.Gatherer(), strings.NewReader(`
# HELP zarrgate_build_info 1, labelled with the binary's version, VCS revision, Go version and what does its codec work (pure Go, or the C libraries of the cgocodecs build).
# TYPE zarrgate_build_info gauge
zarrgate_build_info{codecs="libzstd 1.5.4, libdeflate 1.14",goversion="go1.26.8",revision="0123abc",version="v1.2.3"} 1
`), "zarrgate_build_info"); err != nil {
		t.Error(err)
	}
}
