package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/internal/membudget"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/memory"
	"github.com/zarrgate/zarrgate/zarr"
)

// slowSetStore delays every Set, so that a write's flushes stay in flight
// (holding their memory) while its stream goes on.
type slowSetStore struct {
	*memory.Store
	delay time.Duration
}

func (s slowSetStore) Set(ctx context.Context, key string, v io.Reader, c storesvc.Condition) (string, error) {
	time.Sleep(s.delay)
	return s.Store.Set(ctx, key, v, c)
}

// TestWriteSlabsShareSmallBudget: two WriteSlabs on one small memory
// budget, streaming (each larger than its write buffer) with their flushes
// in flight at once, both complete: neither waits for memory while holding
// memory the other waits for (hold-and-wait). The budget's wait is longer
// than the test's deadline, so a deadlock fails the test instead of
// turning into ResourceExhausted.
func TestWriteSlabsShareSmallBudget(t *testing.T) {
	for _, tc := range []struct {
		name   string
		codecs string
		merge  bool    // write part of each chunk over stored data
		shard  []int64 // shard shape, if sharded (of 128×128 chunks)
		budget int64
	}{
		{"whole", plainBytes, false, nil, 7 << 19},
		{"whole-zstd", zstdBytes, false, nil, 7 << 19},
		{"merge", plainBytes, true, nil, 7 << 19},
		{"sharded-merge", plainBytes, true, []int64{256, 256}, 9 << 19},
		{"sharded-whole", zstdBytes, false, []int64{256, 256}, 9 << 19},
	} {
		t.Run(tc.name, func(t *testing.T) {
			budget := membudget.New(tc.budget, time.Hour)
			g := New(slowSetStore{memory.New(), time.Millisecond}, codecsvc.NewLocal(), Config{Budget: budget, WriteBufferBytes: 2 << 20, SpillDir: t.TempDir()})
			const rows, cols = 1024, 1024
			for _, name := range []string{"a", "b"} {
				if _, err := g.CreateArray(ctx, name, ArraySpec{Shape: []int64{rows, cols}, DataType: "uint32", ChunkShape: []int64{128, 128}, ShardShape: tc.shard, Codecs: json.RawMessage(tc.codecs)}); err != nil {
					t.Fatal(err)
				}
			}
			val := func(name string) func(r, c int64) []byte {
				return func(r, c int64) []byte { return u32(uint32(r*cols+c) ^ uint32(name[0])) }
			}
			sel := []zarr.Range{{Start: 0, Stop: rows, Step: 1}, {Start: 0, Stop: cols, Step: 1}}
			if tc.merge {
				// Every chunk of the last column read-modify-written over
				// what is stored.
				sel[1].Stop = cols - 8
				for _, name := range []string{"a", "b"} {
					blk := Block{Origin: []int64{0, 0}, Shape: []int64{rows, cols}, Data: make([]byte, rows*cols*4)}
					if _, err := g.WriteSlab(ctx, name, nil, nextFrom([]Block{blk})); err != nil {
						t.Fatal(err)
					}
				}
			}
			dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			errc := make(chan error, 2)
			for _, name := range []string{"a", "b"} {
				blocks := strips(rows, sel[1].Stop, 16, sel[1].Stop, 4, val(name))
				wg.Add(1)
				go func() {
					defer wg.Done()
					if _, err := g.WriteSlab(dctx, name, sel, nextFrom(blocks)); err != nil {
						errc <- fmt.Errorf("write %s: %w", name, err)
					}
				}()
			}
			wg.Wait()
			close(errc)
			for err := range errc {
				t.Error(err)
			}
			if t.Failed() {
				return
			}
			for _, name := range []string{"a", "b"} {
				got, _ := readAll(t, g, name, sel, 4)
				want := strips(rows, sel[1].Stop, rows, sel[1].Stop, 4, val(name))[0].Data
				if string(got) != string(want) {
					t.Errorf("%s: data read differs from data written", name)
				}
			}
			if n := g.Stats().FlushOverruns.Load(); n != 0 {
				t.Errorf("%d flush steps needed more memory than their flush reserved: the bound is wrong", n)
			}
			if n := budget.InUse(); n != 0 {
				t.Errorf("%d bytes still reserved after both writes", n)
			}
		})
	}
}
