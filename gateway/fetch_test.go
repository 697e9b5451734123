package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/codecsvc/remote"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/membudget"
	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/memory"
	"github.com/zarrgate/zarrgate/zarr"
)

// storeFetcher reads a codec worker's chunks from a store (as
// cmd/zarrgate's does from the store tier), counting the keys it reads.
type storeFetcher struct {
	s    storesvc.Store
	keys *atomic.Int64
}

func (f storeFetcher) Fetch(ctx context.Context, refs []codec.Ref, max int64) ([][]byte, []bool, error) {
	reqs := make([]storesvc.KeyRange, len(refs))
	for i, r := range refs {
		if err := storesvc.ValidateKey(r.Key); err != nil {
			return nil, nil, err
		}
		reqs[i] = storesvc.KeyRange{Key: r.Key}
		switch {
		case r.Length > 0:
			reqs[i].Range = storesvc.Bounded(r.Offset, r.Length)
		case r.Offset > 0:
			reqs[i].Range = storesvc.FromOffset(r.Offset)
		}
	}
	vals, err := storesvc.Wrap(f.s).GetPartialValuesMax(ctx, reqs, max)
	if err != nil {
		return nil, nil, err
	}
	out, found := make([][]byte, len(vals)), make([]bool, len(vals))
	for i, v := range vals {
		if g := refs[i].Generation; v.Found && g != "" && v.Generation != g {
			return nil, nil, errs.New(errs.Aborted, "%q changed (generation %q, want %q)", refs[i].Key, v.Generation, g)
		}
		out[i], found[i] = v.Data, v.Found
	}
	f.keys.Add(int64(len(refs)))
	return out, found, nil
}

// fetchingWorker serves a codec worker reading store on loopback.
func fetchingWorker(t *testing.T, store storesvc.Store, keys *atomic.Int64, budget ...*membudget.Budget) *remote.Client {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	s := codecsvc.NewServer(codecsvc.NewLocal())
	if len(budget) > 0 {
		s = codecsvc.NewBudgetServer(codecsvc.NewLocal(), budget[0])
	}
	if store != nil {
		s.SetFetcher(storeFetcher{store, keys})
	}
	s.Register(srv)
	go srv.Serve(lis)
	cc, err := rpc.Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	r := remote.New(cc)
	t.Cleanup(func() { r.Close(); cc.Close(); srv.Stop() })
	return r
}

// With worker-fetch, reads of unsharded arrays go to codec workers as
// keys, and give what the embedded gateway reads: random arrays, written
// in part (so that some chunks are missing and read as fill), read back
// through random strided selections.
func TestWorkerFetchMatchesEmbedded(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 17))
	store := memory.New()
	var keys atomic.Int64
	w := fetchingWorker(t, store, &keys)
	embedded := New(store, codecsvc.NewLocal(), Config{})
	fetching := New(store, w, Config{WorkerFetch: true})
	sharded, strings := matchEmbedded(t, r, 90, embedded, fetching, "worker-fetch")
	if keys.Load() == 0 || sharded == 0 || strings == 0 {
		t.Fatalf("%d chunks fetched by the worker, %d sharded cases, %d of strings", keys.Load(), sharded, strings)
	}
}

// With worker-fetch, a shard rewritten after the gateway cached its index
// is read as it is now, never as a mix: the worker reads the inner chunks'
// ranges only from the generation the index was read at, and the gateway,
// told the shard changed, reads the index again.
func TestWorkerFetchShardRewritten(t *testing.T) {
	store := memory.New()
	var keys atomic.Int64
	w := fetchingWorker(t, store, &keys)
	writer := New(store, codecsvc.NewLocal(), Config{})
	fetching := New(store, w, Config{WorkerFetch: true})
	c := slabCase{shape: []int64{32, 32}, chunks: []int64{4, 4}, shards: []int64{16, 16}, dtype: "float32", codecs: realChains[0]}
	ref := c.create(t, writer, "s")
	all := []zarr.Range{{Start: 0, Stop: 32, Step: 1}, {Start: 0, Stop: 32, Step: 1}}
	part := []zarr.Range{{Start: 1, Stop: 30, Step: 3}, {Start: 2, Stop: 31, Step: 2}}
	for round := range 3 {
		// Each round writes values of other sizes once compressed, so that
		// the inner chunks move within their shards.
		r := rand.New(rand.NewPCG(uint64(round), 5))
		blocks, _ := ref.blocksFor(r, all, func([]int64) any {
			b := make([]byte, 4)
			b[0], b[1] = byte(r.IntN(1+round*100)), byte(round)
			return b
		})
		if _, err := writer.WriteSlab(ctx, "s", all, nextFrom(blocks)); err != nil {
			t.Fatal(err)
		}
		for _, sel := range [][]zarr.Range{all, part} {
			want, _ := readAll(t, writer, "s", sel, ref.elem)
			got, _ := readAll(t, fetching, "s", sel, ref.elem)
			if string(got) != string(want) {
				t.Fatalf("round %d: ReadSlab(%v) through worker-fetch differs (%d index misses) from the shard as written", round, sel, fetching.stats.IndexMisses.Load())
			}
		}
	}
}

// Keys that break the store's rules are refused by the worker with
// InvalidArgument, whoever sends them; a worker without a store tier
// refuses keys with FailedPrecondition; and a missing key is reported, not
// an error.
func TestWorkerFetchRefusals(t *testing.T) {
	store := memory.New()
	var keys atomic.Int64
	w := fetchingWorker(t, store, &keys)
	spec := &codec.BatchSpec{Codecs: []zarr.CodecSpec{{Name: "bytes"}}, Shape: []int64{2}, DataType: zarr.MustDataType("uint8")}
	for _, k := range []string{"../etc/passwd", "/abs", "a//b", "a/./b", "", "a/\x00"} {
		_, _, err := w.DecodeFetched(ctx, spec, []codec.Ref{{Key: k}}, nil)
		if !errors.Is(err, errs.InvalidArgument) {
			t.Errorf("key %q: %v, want InvalidArgument", k, err)
		}
	}
	_, _, err := w.DecodeFetched(ctx, spec, []codec.Ref{{Key: "k", Offset: 1 << 62, Length: 1 << 62}}, nil)
	if !errors.Is(err, errs.InvalidArgument) {
		t.Errorf("overflowing range: %v", err)
	}
	out, found, err := w.DecodeFetched(ctx, spec, []codec.Ref{{Key: "missing"}}, nil)
	if err != nil || found[0] || len(out[0].Data) != 0 {
		t.Fatalf("missing key: %v %v", found, err)
	}
	// The fetch's bound is reserved before the store is called.
	small := fetchingWorker(t, store, &keys, membudget.New(1<<20, time.Second))
	big := &codec.BatchSpec{Codecs: []zarr.CodecSpec{{Name: "bytes"}}, Shape: []int64{256 << 10}, DataType: zarr.MustDataType("uint8")}
	before := keys.Load()
	if _, _, err := small.DecodeFetched(ctx, big, make([]codec.Ref, 8), nil); !errors.Is(err, errs.InvalidArgument) {
		t.Fatalf("refs without keys: %v", err)
	}
	refs := []codec.Ref{{Key: "a"}, {Key: "b"}, {Key: "c"}, {Key: "d"}, {Key: "e"}}
	if _, _, err := small.DecodeFetched(ctx, big, refs, nil); !errors.Is(err, errs.ResourceExhausted) || keys.Load() != before {
		t.Fatalf("5 chunks of 256 KiB under a 1 MiB budget: %v (%d keys read)", err, keys.Load()-before)
	}
	// A range longer than any encoding of the chunk is refused before the
	// store is called (its bytes would exceed what was reserved).
	if _, _, err := small.DecodeFetched(ctx, big, []codec.Ref{{Key: "a", Length: 1 << 30}}, nil); !errors.Is(err, errs.InvalidArgument) || keys.Load() != before {
		t.Fatalf("a 1 GiB range of a 256 KiB chunk: %v (%d keys read)", err, keys.Load()-before)
	}
	// A batch of strings whose chunks are all missing decodes nothing
	// (the budgeted worker once indexed its last result: a crash).
	strs := &codec.BatchSpec{Codecs: []zarr.CodecSpec{{Name: "vlen-utf8"}}, Shape: []int64{2}, DataType: zarr.MustDataType("string")}
	budgeted := fetchingWorker(t, store, &keys, membudget.New(512<<20, time.Second))
	if _, found, err := budgeted.DecodeFetched(ctx, strs, []codec.Ref{{Key: "missing"}, {Key: "missing/too"}}, nil); err != nil || found[0] || found[1] {
		t.Fatalf("strings, all missing: %v %v", found, err)
	}
	plain := fetchingWorker(t, nil, nil)
	if _, _, err := plain.DecodeFetched(ctx, spec, []codec.Ref{{Key: "k"}}, nil); !errors.Is(err, errs.FailedPrecondition) {
		t.Fatalf("a worker without a store tier: %v", err)
	}
}

// Strings through worker-fetch under a worker budget that cannot hold a
// batch's chunks at their bound (each up to 64 MiB) at once: the worker
// fetches them in rounds, keeps only the bytes read, and the read is the
// embedded one; the budget is all given back. (One batch at a time: two
// string batches decoding at once under a budget this tight can wait on
// each other until the budget's wait runs out, a limit of the decoder's
// incremental reservations, worker-fetch or not.)
func TestWorkerFetchStringsSmallBudget(t *testing.T) {
	store := memory.New()
	var keys atomic.Int64
	b := membudget.New(200<<20, time.Second)
	w := fetchingWorker(t, store, &keys, b)
	embedded := New(store, codecsvc.NewLocal(), Config{})
	fetching := New(store, w, Config{WorkerFetch: true, Parallelism: 1})
	c := slabCase{shape: []int64{64}, chunks: []int64{4}, dtype: "string", codecs: `[{"name":"vlen-utf8"},{"name":"zstd","configuration":{"level":1,"checksum":false}}]`}
	ref := c.create(t, embedded, "s")
	all := []zarr.Range{{Start: 0, Stop: 64, Step: 1}}
	r := rand.New(rand.NewPCG(1, 2))
	blocks, _ := ref.blocksFor(r, all, randValue(r, 0))
	if _, err := embedded.WriteSlab(ctx, "s", all, nextFrom(blocks)); err != nil {
		t.Fatal(err)
	}
	for _, sel := range [][]zarr.Range{all, {{Start: 3, Stop: 61, Step: 5}}} {
		_, want := readAll(t, embedded, "s", sel, 0)
		_, got := readAll(t, fetching, "s", sel, 0)
		if !slices.Equal(got, want) {
			t.Fatalf("ReadSlab(%v) through worker-fetch: %q, want %q", sel, got, want)
		}
	}
	if keys.Load() < 16 {
		t.Fatalf("the worker fetched %d chunks, want 16 or more", keys.Load())
	}
	for range 100 {
		if b.InUse() == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%d bytes of the worker's budget still in use", b.InUse())
}

// With worker-fetch and the automatic engine (--codec-choice auto), each
// batch goes as keys to the workers or is read and decoded here, as the
// cost model says, and reads give what the embedded gateway reads either
// way: gzip read whole and raw chunks read strided go as keys (decoding
// gzip here, or reading whole raw chunks for a sixteenth of them, costs
// more), raw chunks read whole are read here (the same bytes either way,
// nothing to decode), unsharded and sharded.
func TestAutoWorkerFetch(t *testing.T) {
	store := memory.New()
	var keys atomic.Int64
	w := fetchingWorker(t, store, &keys)
	auto := remote.NewAuto(codecsvc.NewLocal(), w, remote.DefaultCosts())
	embedded := New(store, codecsvc.NewLocal(), Config{})
	fetching := New(store, auto, Config{WorkerFetch: true})
	const raw = `[{"name":"bytes","configuration":{"endian":"little"}}]`
	gzip := `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"gzip","configuration":{"level":1}}]`
	whole := []zarr.Range{{Start: 0, Stop: 64, Step: 1}, {Start: 0, Stop: 64, Step: 1}}
	strided := []zarr.Range{{Start: 1, Stop: 64, Step: 4}, {Start: 0, Stop: 64, Step: 4}}
	for i, c := range []struct {
		name   string
		codecs string
		shards []int64
		sel    []zarr.Range
		fetch  bool
	}{
		{"gzip whole", gzip, nil, whole, true},
		{"raw whole", raw, nil, whole, false},
		{"raw strided", raw, nil, strided, true},
		{"gzip whole, sharded", gzip, []int64{32, 32}, whole, true},
		{"raw whole, sharded", raw, []int64{32, 32}, whole, false},
		{"raw strided, sharded", raw, []int64{32, 32}, strided, true},
	} {
		path := fmt.Sprintf("a%d", i)
		sc := slabCase{shape: []int64{64, 64}, chunks: []int64{16, 16}, shards: c.shards, dtype: "float32", codecs: c.codecs}
		ref := sc.create(t, embedded, path)
		r := rand.New(rand.NewPCG(1, uint64(i)))
		blocks, _ := ref.blocksFor(r, whole, randValue(r, 4))
		if _, err := embedded.WriteSlab(ctx, path, nil, nextFrom(blocks)); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		k0, f0 := keys.Load(), auto.Fetched()
		want, _ := readAll(t, embedded, path, c.sel, 4)
		got, _ := readAll(t, fetching, path, c.sel, 4)
		if string(got) != string(want) {
			t.Fatalf("%s: the read differs from the embedded gateway's", c.name)
		}
		if fetched := keys.Load() > k0; fetched != c.fetch || (auto.Fetched() > f0) != c.fetch {
			t.Errorf("%s: %d keys fetched by the worker in %d batches, want worker-fetch %v", c.name, keys.Load()-k0, auto.Fetched()-f0, c.fetch)
		}
	}
}

// matchEmbedded writes n random arrays of real chains (sharded ones and
// strings among them) in part through embedded, reads each back through
// random strided selections with both gateways, and fails unless other
// (reading via how) gives what embedded gives. It returns how many cases
// were sharded and of strings.
func matchEmbedded(t *testing.T, r *rand.Rand, n int, embedded, other *Gateway, how string) (sharded, strs int) {
	t.Helper()
	for it := range n {
		c := randCaseFor(r, true)
		if c.shards != nil {
			sharded++
		}
		if c.dtype == "string" {
			strs++
		}
		path := fmt.Sprintf("a%d", it)
		ref := c.create(t, embedded, path)
		sel := randSel(r, c.shape)
		blocks, _ := ref.blocksFor(r, sel, randValue(r, ref.elem))
		if _, err := embedded.WriteSlab(ctx, path, sel, nextFrom(blocks)); err != nil {
			t.Fatalf("case %d %+v: %v", it, c, err)
		}
		for range 3 {
			rsel := randSel(r, c.shape)
			want, wantVals := readAll(t, embedded, path, rsel, ref.elem)
			got, gotVals := readAll(t, other, path, rsel, ref.elem)
			if string(got) != string(want) || !slices.Equal(gotVals, wantVals) {
				t.Fatalf("case %d %+v: ReadSlab(%v) through %s differs\n got %v\nwant %v", it, c, rsel, how, got, want)
			}
		}
	}
	return sharded, strs
}
