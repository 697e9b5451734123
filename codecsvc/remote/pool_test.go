package remote_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/codecsvc/remote"
	"github.com/zarrgate/zarrgate/internal/rpc"
)

// startCounting serves counting engines as codec workers, returning their
// addresses.
func startCounting(t *testing.T, es ...counting) []string {
	t.Helper()
	var addrs []string
	for _, e := range es {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
		codecsvc.NewServer(e).Register(srv)
		go srv.Serve(lis)
		t.Cleanup(srv.Stop)
		addrs = append(addrs, lis.Addr().String())
	}
	return addrs
}

// decodeConcurrently runs callers goroutines of n decodes each.
func decodeConcurrently(t *testing.T, r *remote.Client, callers, n int) {
	t.Helper()
	ctx := context.Background()
	s := spec(zstdChain, 64)
	enc, _ := codecsvc.NewLocal().Encode(ctx, s, []codec.Chunk{{Data: floats(64, 1)}})
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for range n {
				if _, err := r.Decode(ctx, s, enc); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// With six workers, more than a fixed set of streams would reach, every
// worker gets a fair share of the batches: the streams follow the pool's
// ready workers, and each batch goes to the least loaded.
func TestPoolStreamsCoverEveryWorker(t *testing.T) {
	ns := make([]atomic.Int64, 6)
	var es []counting
	for i := range ns {
		es = append(es, counting{codecsvc.NewLocal(), 2 * time.Millisecond, &ns[i]})
	}
	addrs := startCounting(t, es...)
	cc, pool, err := rpc.DialPool(strings.Join(addrs, ","), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cc.Connect()
	for i := 0; ; i++ {
		if ready, _ := pool.Ready(); len(ready) == len(addrs) {
			break
		}
		if i == 500 {
			t.Fatal("the workers never all became ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
	r := remote.NewPool(cc, pool)
	defer r.Close()
	decodeConcurrently(t, r, 12, 30)
	var got []int64
	for i := range ns {
		got = append(got, ns[i].Load())
	}
	t.Logf("batches per worker: %v", got)
	if slices.Min(got) < 360/6/3 {
		t.Fatalf("batches per worker %v: want each of the 6 workers to get at least a third of its share of 360", got)
	}
}

// The client follows the ready set as it changes between batches: a
// worker not (yet) ready gets nothing, one that becomes ready gets its
// share from the next batches, one that leaves gets nothing more (its
// streams are retired, not cut: nothing was in flight here).
func TestPoolStreamsFollowChanges(t *testing.T) {
	var nA, nB atomic.Int64
	addrs := startCounting(t, counting{codecsvc.NewLocal(), time.Millisecond, &nA}, counting{codecsvc.NewLocal(), time.Millisecond, &nB})
	cc, pool, err := rpc.DialPool(strings.Join(addrs, ","), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cc.Connect()
	for i := 0; ; i++ {
		if ready, _ := pool.Ready(); len(ready) == 2 {
			break
		}
		if i == 500 {
			t.Fatal("the workers never both became ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
	w := &someWorkers{pool: pool, ready: addrs[:1]}
	r := remote.NewPool(cc, w)
	defer r.Close()
	decodeConcurrently(t, r, 8, 10)
	if nA.Load() != 80 || nB.Load() != 0 {
		t.Fatalf("only A ready: A %d batches, B %d; want 80, 0", nA.Load(), nB.Load())
	}
	w.set(addrs)
	decodeConcurrently(t, r, 8, 10)
	if a, b := nA.Load()-80, nB.Load(); b < 20 || a+b != 80 {
		t.Fatalf("A and B ready: A %d batches, B %d; want B to get at least a quarter of 80", a, b)
	}
	a0 := nA.Load()
	w.set(addrs[1:])
	decodeConcurrently(t, r, 8, 10)
	if nA.Load() != a0 {
		t.Fatalf("A no longer ready got %d batches", nA.Load()-a0)
	}
	inflight := map[string]int{}
	r.InFlight(func(w string, n int) { inflight[w] = n })
	t.Logf("streams open per worker after A left: %v", inflight)
}

// someWorkers is a pool of which the test decides which workers count as
// ready (of those really ready).
type someWorkers struct {
	pool    *rpc.Pool
	mu      sync.Mutex
	ready   []string
	version uint64
}

func (w *someWorkers) set(ready []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ready = ready
	w.version++
}

func (w *someWorkers) Ready() ([]string, uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ready, w.version
}

func (w *someWorkers) On(ctx context.Context, addr string) (context.Context, func() string) {
	return w.pool.On(ctx, addr)
}
