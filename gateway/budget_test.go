package gateway

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/storesvc/memory"
	"github.com/zarrgate/zarrgate/zarr"
)

// When the store worker is gone (every call fails with Unavailable, as
// storesvc/remote reports a killed worker), the calls the gateway sends
// the store tier stay within its retry budget, counted at the store: the
// first attempts plus at most the budget's burst, 10 % and floor, instead
// of every call tried retryAttempts times. Each read fails with
// Unavailable naming the store tier, promptly.
func TestRetryBudgetBoundsDeadStoreWorker(t *testing.T) {
	ctx := context.Background()
	f := &flaky{Store: memory.New(), r: rand.New(rand.NewPCG(1, 2))}
	g := New(f, testCodecs{}, Config{Parallelism: 4})
	if _, err := g.CreateArray(ctx, "a", ArraySpec{Shape: []int64{256}, DataType: "int32", ChunkShape: []int64{8}}); err != nil {
		t.Fatal(err)
	}
	f.share = 1 // the worker is killed
	const reads = 40
	start := time.Now()
	var wg sync.WaitGroup
	errc := make(chan error, reads)
	for i := range reads {
		wg.Go(func() {
			// Each read a different chunk: the metadata is cached, so
			// each is one store call (a first attempt) and its retries.
			sel := []zarr.Range{{Start: int64(8 * (i % 32)), Stop: int64(8*(i%32) + 8), Step: 1}}
			rctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			errc <- g.ReadSlab(rctx, "a", sel, func(SlabInfo) error { return nil }, func(Block) error { return nil })
		})
		time.Sleep(time.Millisecond)
	}
	wg.Wait()
	close(errc)
	took := time.Since(start)
	for err := range errc {
		if !errors.Is(err, errs.Unavailable) || !strings.Contains(err.Error(), "store tier") {
			t.Fatalf("read with the store worker gone: %v, want Unavailable naming the store tier", err)
		}
	}
	calls := f.fails
	retries := calls - reads
	budget := 10 + 0.12*float64(calls) + took.Seconds() + 1
	t.Logf("%d reads, worker gone: %d store calls (%d retries, budget %.0f) in %v; stats %+v", reads, calls, retries, budget, took.Round(time.Millisecond), g.cfg.StoreRetries.Stats())
	if float64(retries) > budget {
		t.Errorf("%d reads sent the dead store tier %d calls: %d retries, over the budget of %.0f", reads, calls, retries, budget)
	}
	if took > 20*time.Second {
		t.Errorf("reads took %v to fail", took)
	}
}
