package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
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
	}
	vals, err := storesvc.Wrap(f.s).GetPartialValuesMax(ctx, reqs, max)
	if err != nil {
		return nil, nil, err
	}
	out, found := make([][]byte, len(vals)), make([]bool, len(vals))
	for i, v := range vals {
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
	for it := range 60 {
		c := randCaseFor(r, true)
		c.shards, c.shardIndex = nil, ""
		if c.dtype == "string" {
			continue // fixed-size types only
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
			want, _ := readAll(t, embedded, path, rsel, ref.elem)
			got, _ := readAll(t, fetching, path, rsel, ref.elem)
			if string(got) != string(want) {
				t.Fatalf("case %d %+v: ReadSlab(%v) through worker-fetch differs\n got %v\nwant %v", it, c, rsel, got, want)
			}
		}
	}
	if keys.Load() == 0 {
		t.Fatal("no chunk was fetched by the worker")
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
	plain := fetchingWorker(t, nil, nil)
	if _, _, err := plain.DecodeFetched(ctx, spec, []codec.Ref{{Key: "k"}}, nil); !errors.Is(err, errs.FailedPrecondition) {
		t.Fatalf("a worker without a store tier: %v", err)
	}
}
