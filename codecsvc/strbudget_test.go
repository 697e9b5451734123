package codecsvc_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/codecsvc"
	codecv1 "github.com/zarrgate/zarrgate/gen/zarrgate/codec/v1"
	"github.com/zarrgate/zarrgate/internal/membudget"
	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/zarr"
)

// Two string batches decoding at once on one worker under a tight budget
// both finish: a batch never waits for memory while it holds some (no
// hold-and-wait between batches, whose waits the budget serves in order).
// The test holds the whole budget until both batches wait for their first
// reservation, then frees it, so that both start holding memory together;
// their decoded strings then fit the budget only one batch at a time.
// Before the fix each held its first reservation and waited for its
// strings' bytes behind the other until the budget's wait ran out
// (ResourceExhausted).
func TestBudgetServerStringsNoHoldAndWait(t *testing.T) {
	const (
		n      = 16       // chunks a batch
		elems  = 16       // strings a chunk
		strLen = 16 << 10 // bytes a string: 256 KiB of strings a chunk
		varMax = 1 << 20  // --max-variable-chunk-bytes
	)
	lim := codec.Limits{MaxVariableBytes: varMax}
	local := codecsvc.NewLocalLimits(lim)
	spec := &codec.BatchSpec{Codecs: []zarr.CodecSpec{{Name: "vlen-utf8"}, {Name: "zstd"}}, Shape: []int64{elems}, DataType: zarr.MustDataType("string")}
	chunks := make([]codecsvc.Chunk, n)
	for i := range chunks {
		offs := make([]int64, elems+1)
		for e := range elems {
			offs[e+1] = offs[e] + strLen
		}
		chunks[i] = codecsvc.Chunk{Data: []byte(strings.Repeat(string(rune('a'+i)), elems*strLen)), Offsets: offs}
	}
	enc, err := local.Encode(context.Background(), spec, chunks)
	if err != nil {
		t.Fatal(err)
	}
	c, err := local.Chain(spec)
	if err != nil {
		t.Fatal(err)
	}
	var in int64
	for _, e := range enc {
		in += int64(len(e))
	}
	// What a batch reserves before its first chunk, and what the strings
	// of all its chunks but the last add while it decodes.
	first := in + int64(n)*c.DecodedBound() - (int64(n)-1)*varMax + c.WorkingBound()
	strs := int64(n-1) * elems * strLen
	// Room for both batches' first reservations and half of one batch's
	// strings: either batch alone fits, both together do not.
	limit := 2*first + strs/2
	if first+strs > limit {
		t.Fatalf("a batch alone needs %d of %d bytes", first+strs, limit)
	}
	b := membudget.New(limit, 2*time.Second)

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	codecsvc.NewBudgetServer(local, b).Register(srv)
	go srv.Serve(lis)
	cc, err := rpc.Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cc.Close(); srv.Stop() }()
	cl := codecv1.NewCodecServiceClient(cc)
	ps, err := codecsvc.SpecToProto(spec)
	if err != nil {
		t.Fatal(err)
	}

	for round := range 3 {
		all, ok := b.TryAcquire(limit)
		if !ok {
			t.Fatal("budget not free")
		}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		outs := make([]*codecv1.DecodeResponse, 2)
		for k := range 2 {
			wg.Go(func() {
				outs[k], errs[k] = cl.Decode(context.Background(), &codecv1.DecodeRequest{Spec: ps, Encoded: enc})
			})
		}
		for b.Waiting() < 2 { // both batches wait for their first reservation
			time.Sleep(time.Millisecond)
		}
		all.Release()
		wg.Wait()
		for k := range 2 {
			if errs[k] != nil {
				t.Fatalf("round %d, batch %d: %v", round, k, errs[k])
			}
			if len(outs[k].GetChunks()) != n {
				t.Fatalf("round %d, batch %d: %d chunks", round, k, len(outs[k].GetChunks()))
			}
			for i, ch := range outs[k].GetChunks() {
				if string(ch.GetData()) != string(chunks[i].Data) || len(ch.GetOffsets()) != elems+1 {
					t.Fatalf("round %d, batch %d, chunk %d: wrong strings", round, k, i)
				}
			}
		}
		if b.Peak() > limit {
			t.Fatalf("peak reservation %d over the budget of %d", b.Peak(), limit)
		}
		waitIdle(t, b)
	}
}

// mapFetcher is a store tier of values in memory, for worker-fetch.
type mapFetcher map[string][]byte

func (m mapFetcher) Fetch(_ context.Context, refs []codec.Ref, _ int64) ([][]byte, []bool, error) {
	vals, found := make([][]byte, len(refs)), make([]bool, len(refs))
	for i, r := range refs {
		v, ok := m[r.Key]
		if ok && r.Length > 0 {
			v = v[r.Offset:min(r.Offset+r.Length, int64(len(v)))]
		}
		vals[i], found[i] = v, ok
	}
	return vals, found, nil
}

// Worker-fetch string batches two at a time, under budgets from the most
// one batch alone needs to twice that, all finish: a batch holding the
// chunks it fetched (or a fetch round's) never waits for more. Before
// the fix, a batch holding the bytes of its first fetch round waited for
// its next round's behind the other batch, which held its own.
func TestWorkerFetchStringsNoHoldAndWait(t *testing.T) {
	const (
		n      = 12      // chunks a batch
		elems  = 16      // strings a chunk
		strLen = 8 << 10 // bytes a string
		varMax = 1 << 20 // --max-variable-chunk-bytes
	)
	local := codecsvc.NewLocalLimits(codec.Limits{MaxVariableBytes: varMax})
	spec := &codec.BatchSpec{Codecs: []zarr.CodecSpec{{Name: "vlen-utf8"}, {Name: "zstd"}}, Shape: []int64{elems}, DataType: zarr.MustDataType("string")}
	r := rand.New(rand.NewPCG(5, 7))
	chunks := make([]codecsvc.Chunk, n)
	for i := range chunks {
		offs := make([]int64, elems+1)
		data := make([]byte, elems*strLen)
		for j := range data {
			data[j] = 'a' + byte(r.IntN(26)) // hardly compressible
		}
		for e := range elems {
			offs[e+1] = offs[e] + strLen
		}
		chunks[i] = codecsvc.Chunk{Data: data, Offsets: offs}
	}
	enc, err := local.Encode(context.Background(), spec, chunks)
	if err != nil {
		t.Fatal(err)
	}
	store := mapFetcher{}
	refs := make([]*codecv1.ChunkRef, n)
	for i, e := range enc {
		k := fmt.Sprintf("c/%d", i)
		store[k] = e
		refs[i] = &codecv1.ChunkRef{Key: k}
	}
	ps, err := codecsvc.SpecToProto(spec)
	if err != nil {
		t.Fatal(err)
	}
	serve := func(b *membudget.Budget) codecv1.CodecServiceClient {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
		s := codecsvc.NewBudgetServer(local, b)
		s.SetFetcher(store)
		s.Register(srv)
		go srv.Serve(lis)
		cc, err := rpc.Dial(lis.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close(); srv.Stop() })
		return codecv1.NewCodecServiceClient(cc)
	}
	check := func(resp *codecv1.DecodeResponse) error {
		if len(resp.GetChunks()) != n {
			return fmt.Errorf("%d chunks", len(resp.GetChunks()))
		}
		for i, ch := range resp.GetChunks() {
			if string(ch.GetData()) != string(chunks[i].Data) {
				return fmt.Errorf("chunk %d: wrong strings", i)
			}
		}
		return nil
	}
	// The most one batch alone holds (fetched in one round).
	big := membudget.New(1<<30, time.Second)
	resp, err := serve(big).Decode(context.Background(), &codecv1.DecodeRequest{Spec: ps, Refs: refs})
	if err == nil {
		err = check(resp)
	}
	if err != nil {
		t.Fatal(err)
	}
	solo := big.Peak()
	for _, limit := range []int64{solo * 3 / 5, solo * 3 / 4, solo, solo * 5 / 4, solo * 3 / 2, solo * 7 / 4, solo * 2} {
		b := membudget.New(limit, time.Second)
		cl := serve(b)
		all, ok := b.TryAcquire(limit)
		if !ok {
			t.Fatal("budget not free")
		}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for k := range 2 {
			wg.Go(func() {
				resp, err := cl.Decode(context.Background(), &codecv1.DecodeRequest{Spec: ps, Refs: refs})
				if err == nil {
					err = check(resp)
				}
				errs[k] = err
			})
		}
		for b.Waiting() < 2 { // both batches wait for their first reservation
			time.Sleep(time.Millisecond)
		}
		all.Release()
		wg.Wait()
		for k := range 2 {
			if errs[k] != nil {
				t.Errorf("budget %d (%.2f of one batch's peak), batch %d: %v", limit, float64(limit)/float64(solo), k, errs[k])
			}
		}
		if b.Peak() > limit {
			t.Errorf("peak reservation %d over the budget of %d", b.Peak(), limit)
		}
		waitIdle(t, b)
	}
}
