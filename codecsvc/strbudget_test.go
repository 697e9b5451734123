package codecsvc_test

import (
	"context"
	"io"
	"log/slog"
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
