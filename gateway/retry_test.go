package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/retrybudget"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/memory"
	"github.com/zarrgate/zarrgate/zarr"
)

// flaky wraps a real store and fails a share of calls with Unavailable, as
// a store worker that dies does; writes fail after they landed half of the
// time (the answer was lost), which is what makes blind retries unsafe.
type flaky struct {
	storesvc.Store
	mu    sync.Mutex
	r     *rand.Rand
	share float64
	fails int
}

func (f *flaky) fail() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.r.Float64() < f.share {
		f.fails++
		return true
	}
	return false
}

func (f *flaky) coin() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.r.IntN(2) == 0
}

func unavailable() error { return errs.New(errs.Unavailable, "injected: store worker gone") }

func (f *flaky) GetPartialValues(ctx context.Context, reqs []storesvc.KeyRange) ([]storesvc.PartialValue, error) {
	if f.fail() {
		return nil, unavailable()
	}
	return storesvc.Wrap(f.Store).GetPartialValues(ctx, reqs)
}

func (f *flaky) Get(ctx context.Context, key string, r storesvc.ByteRange) (*storesvc.Object, error) {
	if f.fail() {
		return nil, unavailable()
	}
	return f.Store.Get(ctx, key, r)
}

func (f *flaky) Set(ctx context.Context, key string, v io.Reader, c storesvc.Condition) (string, error) {
	if f.fail() {
		if f.coin() {
			f.Store.Set(ctx, key, v, c) // landed, but the answer is lost
		}
		return "", unavailable()
	}
	return f.Store.Set(ctx, key, v, c)
}

// A store that keeps failing transiently still gives correct slabs.
func TestSlabsSurviveUnavailableStore(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for it := range 30 {
		c := randCase(r)
		f := &flaky{Store: memory.New(), r: rand.New(rand.NewPCG(uint64(it), 1)), share: 0}
		// 15 % of calls failing needs more retries than the default
		// budget (10 %) allows: this test is about correctness under
		// failures, so it gives the store tier an ample budget.
		g := New(f, testCodecs{}, Config{Parallelism: 3, StoreRetries: retrybudget.New("store tier", 0.9, 1000, 1000)})
		f.share = 0.15
		ref := c.create(t, g, "a")
		for step := range 3 {
			sel := randSel(r, c.shape)
			if step == 0 {
				sel = zarr.FullSelection(c.shape)
			}
			blocks, _ := ref.blocksFor(r, sel, randValue(r, ref.elem))
			if _, err := g.WriteSlab(ctx, "a", sel, nextFrom(blocks)); err != nil {
				t.Fatalf("case %d %+v: WriteSlab: %v", it, c, err)
			}
			rsel := randSel(r, c.shape)
			got, gotV := readAll(t, g, "a", rsel, ref.elem)
			want, wantV := ref.expect(rsel)
			if string(got) != string(want) || len(gotV) != len(wantV) {
				t.Fatalf("case %d %+v: wrong values after retries", it, c)
			}
			for i := range gotV {
				if gotV[i] != wantV[i] {
					t.Fatalf("case %d: element %d = %q, want %q", it, i, gotV[i], wantV[i])
				}
			}
		}
	}
}

// Every retry of a store call after a transient failure is logged as a
// warning, through slog's default logger: the line operators (and the
// drain test) look for. No failure, no line.
func TestRetriesAreLogged(t *testing.T) {
	var logs strings.Builder
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	defer slog.SetDefault(old)
	r := rand.New(rand.NewPCG(7, 8))
	for _, share := range []float64{0, 0.2} {
		logs.Reset()
		f := &flaky{Store: memory.New(), r: rand.New(rand.NewPCG(9, 1))}
		for it := 0; it < 10 || share > 0 && f.fails == 0; it++ {
			c := randCase(r)
			g := New(f, testCodecs{}, Config{Parallelism: 1})
			f.share = 0
			ref := c.create(t, g, fmt.Sprint(it))
			f.share = share
			sel := zarr.FullSelection(c.shape)
			blocks, _ := ref.blocksFor(r, sel, randValue(r, ref.elem))
			if _, err := g.WriteSlab(ctx, fmt.Sprint(it), sel, nextFrom(blocks)); err != nil {
				t.Fatal(err)
			}
			readAll(t, g, fmt.Sprint(it), sel, ref.elem)
		}
		lines := strings.Count(logs.String(), "retrying a store or codec call after a transient failure")
		if share == 0 && lines != 0 || share > 0 && (lines == 0 || lines > f.fails) {
			t.Fatalf("%d injected failures, %d retry lines:\n%s", f.fails, lines, logs.String())
		}
		t.Logf("%d injected failures, %d retries logged", f.fails, lines)
	}
}
