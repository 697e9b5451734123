package gateway

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/internal/testenv"
	"github.com/zarrgate/zarrgate/storesvc/memory"
	"github.com/zarrgate/zarrgate/zarr"
)

// processNice is the nice value of every thread of this process.
func processNice(t *testing.T) int {
	t.Helper()
	base := testenv.ThreadNices(t, 0)
	if len(base) != 1 {
		t.Fatalf("threads of several nice values before the test: %v", base)
	}
	var nice int
	for n := range base {
		nice = n
	}
	return nice
}

// rowsArray writes array "a" of rows × 256 uint8, a zstd chunk per row,
// and returns its content.
func rowsArray(t *testing.T, g *Gateway, rows int64) []byte {
	t.Helper()
	if _, err := g.CreateArray(ctx, "a", ArraySpec{Shape: []int64{rows, 256}, DataType: "uint8", ChunkShape: []int64{1, 256}, Codecs: json.RawMessage(zstdBytes)}); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, rows*256)
	for i := range data {
		data[i] = byte(i * 7 / 5)
	}
	if _, err := g.WriteSlab(ctx, "a", nil, nextFrom([]Block{{Origin: []int64{0, 0}, Shape: []int64{rows, 256}, Data: data}})); err != nil {
		t.Fatal(err)
	}
	return data
}

// TestSharedWorkersRunLowered checks Config.BackgroundNice: a ReadSlab's
// chunk workers run on threads BackgroundNice above the process's nice
// value while the call shares the gateway, and only then (a call alone
// again goes on at the process's priority); once the read ends, no thread
// of lowered priority is left to run other goroutines.
func TestSharedWorkersRunLowered(t *testing.T) {
	nice := processNice(t)
	const rows = 256
	lower := min(7, 19-nice)
	if lower == 0 {
		t.Fatalf("the test runs at nice %d: no room to lower a thread's priority", nice)
	}
	for _, c := range []struct {
		name       string
		background int // Config.BackgroundNice
		shared     bool
		alone      bool // the other call ends a quarter into the read
		want       bool // threads at nice+lower while the read runs
	}{
		{"sharing", lower, true, false, true},
		{"sharing, then alone", lower, true, true, true},
		{"alone", lower, false, false, false},
		{"sharing, lowering off", -1, true, false, false},
	} {
		g := New(memory.New(), codecsvc.NewLocal(), Config{Parallelism: 4, BackgroundNice: c.background})
		data := rowsArray(t, g, rows)
		var other *call
		if c.shared {
			other = g.sched.begin(true)
		}
		lowered, blocks := 0, 0
		afterAlone := 0 // lowered threads seen well after the read is alone again
		got := make([]byte, len(data))
		err := g.ReadSlab(ctx, "a", []zarr.Range{{Start: 0, Stop: rows, Step: 1}, {Start: 0, Stop: 256, Step: 1}}, func(SlabInfo) error { return nil }, func(b Block) error {
			// The workers that started a batch hold their threads
			// meanwhile. (A worker on the process's main thread
			// hands its batch to a successor on another.)
			n := testenv.ThreadNices(t, 0)[nice+lower]
			blocks++
			switch {
			case c.alone && blocks == rows/4:
				// Alone once the cooldown has passed: each
				// worker hands on at the end of its batch.
				other.end()
				other = nil
				time.Sleep(fairCooldown + 50*time.Millisecond)
			case c.alone && blocks > rows/4 && blocks <= rows*5/8:
				// Time for every worker to run (with one Go
				// processor, two goroutines handing each other
				// blocks could keep the others waiting).
				time.Sleep(time.Millisecond)
			case c.alone && blocks > rows*5/8 && blocks <= rows*5/8+8:
				// 96 blocks on: each worker has ended the batch
				// it was in (8 blocks; at most 36 were in the
				// workers' hands or queued), and 11 batches are
				// still to read, by the workers that took over.
				afterAlone = max(afterAlone, n)
			}
			if blocks < rows/4 || !c.alone {
				lowered = max(lowered, n)
			}
			copy(got[b.Origin[0]*256:], b.Data)
			return nil
		})
		if other != nil {
			other.end()
		}
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(data) {
			t.Fatalf("%s: the slab read differs from what was written", c.name)
		}
		if c.want && (lowered == 0 || lowered > 4) {
			t.Errorf("%s: %d threads at nice %d during the read, want 1 to 4 (its workers')", c.name, lowered, nice+lower)
		}
		if c.alone && afterAlone != 0 {
			t.Errorf("%s: alone again, the read went on with %d threads at nice %d", c.name, afterAlone, nice+lower)
		}
		if !c.want && lowered != 0 {
			t.Errorf("%s: %d threads at nice %d during the read, want none", c.name, lowered, nice+lower)
		}
		// The workers have ended, and their threads with them.
		deadline := time.Now().Add(5 * time.Second)
		for {
			n := testenv.ThreadNices(t, 0)
			if len(n) == 1 && n[nice] > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: after the read, threads by nice value %v: lowered threads were left behind", c.name, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// TestLoweredWorkersBounded checks maxLowered: however many calls share
// the gateway, at most 4 × Parallelism of their workers run on threads
// of their own at a lower priority (each a thread: the process must not
// run out of them), and the count returns to 0 once the calls end.
func TestLoweredWorkersBounded(t *testing.T) {
	nice := processNice(t)
	const rows, calls = 64, 6
	lower := min(7, 19-nice)
	if lower == 0 {
		t.Fatalf("the test runs at nice %d: no room to lower a thread's priority", nice)
	}
	g := New(memory.New(), codecsvc.NewLocal(), Config{Parallelism: 2, BackgroundNice: lower})
	if got := g.maxLowered(); got != 8 {
		t.Fatalf("maxLowered %d with Parallelism 2, want 8", got)
	}
	rowsArray(t, g, rows)
	// calls reads, each with 2 workers (12 in all), held in their first
	// block's emit meanwhile.
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range calls {
		wg.Go(func() {
			held := false
			err := g.ReadSlab(ctx, "a", []zarr.Range{{Start: 0, Stop: rows, Step: 1}, {Start: 0, Stop: 256, Step: 1}}, func(SlabInfo) error { return nil }, func(b Block) error {
				if !held {
					held = true
					<-release
				}
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	most, counted := 0, int64(0)
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		most = max(most, testenv.ThreadNices(t, 0)[nice+lower])
		counted = max(counted, g.lowered.Load())
	}
	close(release)
	wg.Wait()
	if most == 0 || most > 8 || counted > 8 {
		t.Errorf("%d calls of 2 workers beside each other: %d threads at nice %d (counted %d), want 1 to 8", calls, most, nice+lower, counted)
	}
	if n := g.lowered.Load(); n != 0 {
		t.Errorf("after the calls, %d workers counted as lowered", n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for n := testenv.ThreadNices(t, 0); len(n) != 1 || n[nice] == 0; n = testenv.ThreadNices(t, 0) {
		if time.Now().After(deadline) {
			t.Fatalf("after the calls, threads by nice value %v: lowered threads were left behind", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
