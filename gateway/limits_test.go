package gateway

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/membudget"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/file"
	"github.com/zarrgate/zarrgate/storesvc/memory"
	"github.com/zarrgate/zarrgate/zarr"
)

// allocated runs fn and returns the bytes it allocated on the heap.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

func drainSlab(g *Gateway, path string, sel []zarr.Range) error {
	return g.ReadSlab(ctx, path, sel, func(SlabInfo) error { return nil }, func(Block) error { return nil })
}

// wantErr checks the code, a word of the message, and that the call
// allocated less than maxAlloc on the way.
func wantErr(t *testing.T, what string, kind *errs.Kind, word string, maxAlloc uint64, fn func() error) {
	t.Helper()
	var err error
	start := time.Now()
	n := allocated(func() { err = fn() })
	if !errors.Is(err, kind) || !strings.Contains(err.Error(), word) {
		t.Errorf("%s: %v, want %v naming %q", what, err, kind, word)
	}
	if n > maxAlloc {
		t.Errorf("%s: allocated %d bytes on the way to %v", what, n, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("%s: took %v", what, d)
	}
}

// Issue 12, defect 1: arrays whose chunks could never be held are refused
// before anything of their size is allocated, whether created through the
// gateway or found in a store.
func TestHugeChunksRefused(t *testing.T) {
	st := memory.New()
	g := New(st, codecsvc.NewLocal(), Config{})
	wantErr(t, "chunk [2^40] uint8", errs.ResourceExhausted, "max-chunk-bytes", 1<<20, func() error {
		_, err := g.CreateArray(ctx, "a", ArraySpec{Shape: []int64{1 << 40}, DataType: "uint8", ChunkShape: []int64{1 << 40}})
		return err
	})
	wantErr(t, "chunk [2^31, 2^31]", errs.ResourceExhausted, "max-chunk-bytes", 1<<20, func() error {
		_, err := g.CreateArray(ctx, "b", ArraySpec{Shape: []int64{1 << 31, 1 << 31}, DataType: "uint8", ChunkShape: []int64{1 << 31, 1 << 31}})
		return err
	})
	wantErr(t, "chunk overflowing int64", errs.InvalidArgument, "2^63", 1<<20, func() error {
		_, err := g.CreateArray(ctx, "c", ArraySpec{Shape: []int64{1 << 62, 1 << 62}, DataType: "float64", ChunkShape: []int64{1 << 62, 1 << 62}})
		return err
	})
	meta := `{"zarr_format":3,"node_type":"array","shape":[68719476736],"data_type":"uint8","chunk_grid":{"name":"regular","configuration":{"chunk_shape":[68719476736]}},` +
		`"chunk_key_encoding":{"name":"default"},"fill_value":0,"codecs":[{"name":"bytes"}]}`
	if _, err := st.Set(ctx, "d/zarr.json", strings.NewReader(meta), storesvc.Condition{}); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "stored chunk of 2^36", errs.ResourceExhausted, "max-chunk-bytes", 1<<20, func() error {
		return drainSlab(g, "d", []zarr.Range{{Start: 0, Stop: 1, Step: 1}})
	})
	// A shard of 2^40 inner chunks: its index alone would be 16 TiB.
	wantErr(t, "shard index of 2^40 entries", errs.ResourceExhausted, "max-chunk-bytes", 1<<20, func() error {
		_, err := g.CreateArray(ctx, "e", ArraySpec{Shape: []int64{1 << 40}, DataType: "uint8", ShardShape: []int64{1 << 40}, ChunkShape: []int64{1}})
		return err
	})
}

// Selections over huge virtual arrays cost nothing per chunk before they
// are refused, and a small part of such an array reads at once.
func TestHugeVirtualArrays(t *testing.T) {
	g := New(memory.New(), codecsvc.NewLocal(), Config{})
	if _, err := g.CreateArray(ctx, "v", ArraySpec{Shape: []int64{1e12}, DataType: "uint8", ChunkShape: []int64{1000}}); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "all of [10^12]", errs.ResourceExhausted, "limit", 1<<20, func() error { return drainSlab(g, "v", nil) })
	wantErr(t, "every 1000th of [10^12]", errs.ResourceExhausted, "max-slab-chunks", 1<<20, func() error {
		return drainSlab(g, "v", []zarr.Range{{Start: 0, Stop: 1e12, Step: 1000}})
	})
	wantErr(t, "write header over [10^12]", errs.ResourceExhausted, "limit", 1<<20, func() error {
		_, err := g.WriteSlab(ctx, "v", []zarr.Range{{Start: 0, Stop: 1e12, Step: 1000}}, func() (Block, error) { return Block{}, errors.New("no block should be asked for") })
		return err
	})
	if err := drainSlab(g, "v", []zarr.Range{{Start: 1e12 - 5000, Stop: 1e12, Step: 1}}); err != nil {
		t.Fatalf("small read of a huge array: %v", err)
	}
	if _, err := g.CreateArray(ctx, "w", ArraySpec{Shape: []int64{1 << 62, 1 << 62}, DataType: "uint8", ChunkShape: []int64{1 << 20, 1 << 8}}); err == nil {
		wantErr(t, "whole [2^62, 2^62]", errs.ResourceExhausted, "limit", 1<<20, func() error { return drainSlab(g, "w", nil) })
	} else if !errors.Is(err, errs.InvalidArgument) {
		t.Fatalf("create [2^62, 2^62]: %v", err)
	}
}

// A region never written streams as fill from a small pattern: reading a
// 64 MiB chunk of fill allocates a small fraction of it.
func TestFillReadsDoNotAllocateChunks(t *testing.T) {
	g := New(memory.New(), codecsvc.NewLocal(), Config{})
	if _, err := g.CreateArray(ctx, "f", ArraySpec{Shape: []int64{8192, 4096}, DataType: "float32", ChunkShape: []int64{4096, 4096}, FillValue: json.RawMessage(`1.5`)}); err != nil {
		t.Fatal(err)
	}
	var got int64
	n := allocated(func() {
		err := g.ReadSlab(ctx, "f", nil, func(SlabInfo) error { return nil }, func(b Block) error {
			if len(b.Data) > 0 && binary.LittleEndian.Uint32(b.Data) != 0x3fc00000 {
				t.Errorf("fill block holds %x", b.Data[:4])
			}
			got += int64(len(b.Data))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
	if got != 8192*4096*4 {
		t.Fatalf("read %d bytes, want %d", got, 8192*4096*4)
	}
	if n > 16<<20 {
		t.Fatalf("reading 128 MiB of fill allocated %d bytes", n)
	}
}

// countingStore counts the store calls a read makes.
type countingStore struct {
	storesvc.Store
	calls atomic.Int64
}

func (c *countingStore) Get(ctx context.Context, key string, r storesvc.ByteRange) (*storesvc.Object, error) {
	c.calls.Add(1)
	return c.Store.Get(ctx, key, r)
}

func (c *countingStore) GetPartialValues(ctx context.Context, reqs []storesvc.KeyRange) ([]storesvc.PartialValue, error) {
	c.calls.Add(1)
	return storesvc.Wrap(c.Store).GetPartialValues(ctx, reqs)
}

// Issue 12, defect 3: a shard index that cannot describe its shard is
// DataLoss naming the chunk, at once, with a handful of store calls (it
// used to be taken for a stale index and read again until the deadline).
func TestLyingShardIndex(t *testing.T) {
	codecs := `[{"name":"sharding_indexed","configuration":{"chunk_shape":[4],"codecs":[{"name":"bytes","configuration":{"endian":"little"}}],"index_codecs":[{"name":"bytes","configuration":{"endian":"little"}}],"index_location":"end"}}]`
	const n = 4 // inner chunks per shard; 4 int32 each = 16 bytes each
	cases := []struct {
		name   string
		entry  int
		off, l uint64
		word   string
	}{
		{"past the end", 1, 1000, 16, "outside"},
		{"inside the index", 2, 64, 16, "outside"},
		{"overflowing", 0, 1 << 63, 1 << 63, "entry 0"},
		{"huge", 0, 0, 1 << 40, "outside"},
		{"overlapping", 1, 8, 16, "overlap"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := &countingStore{Store: memory.New()}
			g := New(st, codecsvc.NewLocal(), Config{MetadataTTL: -1})
			a, err := g.CreateArray(ctx, "s", ArraySpec{Shape: []int64{16}, DataType: "int32", ChunkShape: []int64{16}, Codecs: json.RawMessage(codecs)})
			if err != nil {
				t.Fatal(err)
			}
			_ = a
			data := make([]byte, 64)
			for i := range data {
				data[i] = byte(i + 1)
			}
			blocks := []Block{{Origin: []int64{0}, Shape: []int64{16}, Data: data}}
			if _, err := g.WriteSlab(ctx, "s", nil, nextFrom(blocks)); err != nil {
				t.Fatal(err)
			}
			shard, _, err := storesvc.ReadAll(ctx, st.Store, "s/c/0")
			if err != nil || len(shard) != 64+16*n {
				t.Fatalf("shard: %d bytes, %v", len(shard), err)
			}
			idx := shard[64:]
			binary.LittleEndian.PutUint64(idx[16*c.entry:], c.off)
			binary.LittleEndian.PutUint64(idx[16*c.entry+8:], c.l)
			if _, err := st.Store.Set(ctx, "s/c/0", strings.NewReader(string(shard)), storesvc.Condition{}); err != nil {
				t.Fatal(err)
			}
			st.calls.Store(0)
			wantErr(t, c.name, errs.DataLoss, c.word, 1<<20, func() error { return drainSlab(g, "s", nil) })
			if !strings.Contains(fmt.Sprint(drainSlab(g, "s", nil)), "s/c/0") {
				t.Error("the error does not name the shard")
			}
			if calls := st.calls.Load(); calls > 10 {
				t.Errorf("%d store calls for a corrupt index", calls)
			}
		})
	}
}

// Every read reserves its memory from the budget and gives all of it
// back, however it ends; batches shrink to fit a small budget, and a
// chunk larger than the whole budget is ResourceExhausted naming it.
func TestReadBudget(t *testing.T) {
	for _, codecs := range []string{"", `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":1}}]`} {
		b := membudget.New(600<<10, time.Second)
		st := memory.New()
		g := New(st, codecsvc.NewLocal(), Config{Budget: b})
		writer := New(st, codecsvc.NewLocal(), Config{}) // the budget is for the reads
		spec := ArraySpec{Shape: []int64{1024, 1024}, DataType: "float32", ChunkShape: []int64{256, 256}}
		if codecs != "" {
			spec.Codecs = json.RawMessage(codecs)
		} else {
			spec.Codecs = json.RawMessage(`[{"name":"bytes","configuration":{"endian":"little"}}]`)
		}
		if _, err := writer.CreateArray(ctx, "a", spec); err != nil {
			t.Fatal(err)
		}
		data := make([]byte, 1024*1024*4)
		for i := range data {
			data[i] = byte(i * 7)
		}
		if _, err := writer.WriteSlab(ctx, "a", nil, nextFrom([]Block{{Origin: []int64{0, 0}, Shape: []int64{1024, 1024}, Data: data}})); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(data))
		err := g.ReadSlab(ctx, "a", nil, func(SlabInfo) error { return nil }, func(bl Block) error {
			copyBox(got, dense([]int64{1024, 1024}, bl.Origin), bl.Data, dense(bl.Shape, make([]int64, 2)), bl.Shape, 4)
			return nil
		})
		if err != nil {
			t.Fatalf("%s: read within a small budget: %v", codecs, err)
		}
		if string(got) != string(data) {
			t.Fatalf("%s: read back different data", codecs)
		}
		if b.InUse() != 0 || b.Peak() > b.Limit() || b.Peak() == 0 {
			t.Fatalf("%s: in use %d, peak %d of %d", codecs, b.InUse(), b.Peak(), b.Limit())
		}
		stop := errors.New("client gone")
		k := 0
		err = g.ReadSlab(ctx, "a", nil, func(SlabInfo) error { return nil }, func(Block) error {
			if k++; k == 3 {
				return stop
			}
			return nil
		})
		if !errors.Is(err, stop) || b.InUse() != 0 {
			t.Fatalf("%s: aborted read: %v, %d bytes still reserved", codecs, err, b.InUse())
		}
	}
	tiny := membudget.New(100<<10, time.Second)
	g := New(memory.New(), codecsvc.NewLocal(), Config{Budget: tiny})
	if _, err := g.CreateArray(ctx, "a", ArraySpec{Shape: []int64{1024}, DataType: "float32", ChunkShape: []int64{1 << 16}}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.store.Set(ctx, "a/c/0", strings.NewReader("x"), storesvc.Condition{}); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "chunk over the budget", errs.ResourceExhausted, "memory budget of 100 KiB", 1<<20, func() error { return drainSlab(g, "a", nil) })
	if tiny.InUse() != 0 {
		t.Fatalf("%d bytes still reserved", tiny.InUse())
	}
}

// A value under a chunk's key far larger than any encoding of that chunk
// (planted by a raw Set) is DataLoss naming it, refused before it is read;
// so is a metadata document over its limit.
func TestPlantedHugeValues(t *testing.T) {
	fs, err := file.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	g := New(fs, codecsvc.NewLocal(), Config{})
	if _, err := g.CreateArray(ctx, "a", ArraySpec{Shape: []int64{64}, DataType: "uint8", ChunkShape: []int64{16}}); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 32<<20)
	if _, err := fs.Set(ctx, "a/c/1", strings.NewReader(big), storesvc.Condition{}); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "32 MiB under a 16-byte chunk", errs.DataLoss, "a/c/1", 4<<20, func() error { return drainSlab(g, "a", nil) })
	if _, err := fs.Set(ctx, "m/zarr.json", strings.NewReader(strings.Repeat(" ", maxMetadataBytes+1)), storesvc.Condition{}); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "metadata over its limit", errs.DataLoss, "m/zarr.json", 4<<20, func() error { _, err := g.GetNode(ctx, "m"); return err })
}
