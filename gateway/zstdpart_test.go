package gateway

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/membudget"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/memory"
	"github.com/zarrgate/zarrgate/zarr"
)

const zstdPartCodecs = `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":3}}]`

// zstdPartArray makes array "z" of float32 (600 × 300 in 256 × 256 chunks
// of bytes + zstd, 256 KiB each: two zstd blocks; the last row and
// column of chunks partial; in 512 × 512 shards when sharded) on a fresh
// memory store, written with a smooth field with noise except chunk
// (1, 0), left fill (7), and returns its reference. Its chunks are read
// in part from their first zstd blocks (codecsvc.Local.DecodeSelected).
func zstdPartArray(t *testing.T, sharded bool) (*Gateway, *memory.Store, *refArray) {
	t.Helper()
	store := memory.New()
	g := New(store, codecsvc.NewLocal(), Config{})
	c := slabCase{dtype: "float32", shape: []int64{600, 300}, chunks: []int64{256, 256}, codecs: zstdPartCodecs}
	if sharded {
		c.shards = []int64{512, 512}
	}
	ref := c.create(t, g, "z")
	r := rand.New(rand.NewPCG(11, 12))
	for i := range int64(600) {
		for j := range int64(300) {
			if i >= 256 && i < 512 && j < 256 {
				continue // chunk (1, 0): fill
			}
			v := float32(math.Sin(float64(i)*0.01)*1000 + math.Cos(float64(j)*0.02)*100 + float64(r.IntN(17)))
			binary.LittleEndian.PutUint32(ref.data[ref.index([]int64{i, j})*4:], math.Float32bits(v))
		}
	}
	for i := int64(0); i < 600; i += 256 {
		for j := int64(0); j < 300; j += 256 {
			if i == 256 && j == 0 {
				continue
			}
			sel := []zarr.Range{{Start: i, Stop: min(i+256, 600), Step: 1}, {Start: j, Stop: min(j+256, 300), Step: 1}}
			data, _ := ref.expect(sel)
			blk := Block{Origin: []int64{0, 0}, Shape: []int64{sel[0].Stop - i, sel[1].Stop - j}, Data: data}
			if _, err := g.WriteSlab(ctx, "z", sel, nextFrom([]Block{blk})); err != nil {
				t.Fatal(err)
			}
		}
	}
	return g, store, ref
}

// TestZstdPartReads: reads of parts of zstd chunks, which decode only the
// blocks their selection needs, give what the reference holds: boxes at
// the chunks' edges and across them, in the partial chunks at the array's
// edges, in the chunk never written (fill), strided, single elements, the
// whole array, and random boxes; unsharded and sharded.
func TestZstdPartReads(t *testing.T) {
	for _, sharded := range []bool{false, true} {
		t.Run(fmt.Sprintf("sharded=%v", sharded), func(t *testing.T) {
			g, _, ref := zstdPartArray(t, sharded)
			check := func(sel ...zarr.Range) {
				t.Helper()
				got, _ := readAll(t, g, "z", sel, 4)
				if want, _ := ref.expect(sel); !bytes.Equal(got, want) {
					t.Fatalf("ReadSlab(%v) differs from the reference", sel)
				}
			}
			rg := func(a, b int64) zarr.Range { return zarr.Range{Start: a, Stop: b, Step: 1} }
			check(rg(0, 64), rg(0, 64))      // the top of chunk (0, 0): its first block
			check(rg(64, 128), rg(192, 256)) // up to the first block's last row, at the chunk's right edge
			check(rg(127, 129), rg(10, 20))  // across the blocks' boundary
			check(rg(192, 256), rg(0, 64))   // the bottom rows: both blocks
			check(rg(250, 262), rg(250, 262))
			check(rg(512, 576), rg(256, 300)) // the corner chunk, partial both ways
			check(rg(599, 600), rg(299, 300))
			check(rg(540, 600), rg(100, 140))
			check(rg(300, 364), rg(10, 74)) // the chunk never written: fill
			check(rg(500, 520), rg(250, 260))
			check(zarr.Range{Start: 3, Stop: 120, Step: 7}, zarr.Range{Start: 1, Stop: 299, Step: 13})
			check(rg(0, 600), rg(0, 300))
			r := rand.New(rand.NewPCG(13, 14))
			for range 150 {
				y, x := r.Int64N(600), r.Int64N(300)
				check(rg(y, min(y+1+r.Int64N(80), 600)), rg(x, min(x+1+r.Int64N(80), 300)))
			}
		})
	}
}

// TestZstdPartReadsCorrupt: a damaged zstd chunk read in part is
// DataLoss naming the chunk: cut short in the blocks the read needs, or
// not zstd at all; a chunk damaged only past the blocks a read needs
// still reads those (as a ranged read of an uncompressed chunk does).
func TestZstdPartReadsCorrupt(t *testing.T) {
	g, store, ref := zstdPartArray(t, false)
	obj, err := store.Get(ctx, "z/c/0/0", storesvc.ByteRange{})
	if err != nil {
		t.Fatal(err)
	}
	good, err := io.ReadAll(obj)
	obj.Close()
	if err != nil {
		t.Fatal(err)
	}
	top := []zarr.Range{{Start: 2, Stop: 40, Step: 1}, {Start: 5, Stop: 69, Step: 1}}
	for name, bad := range map[string][]byte{
		"cut short":   good[:len(good)/5],
		"not zstd":    bytes.Repeat([]byte("not a frame"), 50),
		"header only": good[:9],
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := store.Set(ctx, "z/c/0/0", bytes.NewReader(bad), storesvc.Condition{}); err != nil {
				t.Fatal(err)
			}
			err := g.ReadSlab(ctx, "z", top, func(SlabInfo) error { return nil }, func(Block) error { return nil })
			if errs.CodeOf(err) != errs.CodeDataLoss || !strings.Contains(err.Error(), "z/c/0/0") {
				t.Fatalf("read of part of a damaged chunk: %v, want DataLoss naming the chunk", err)
			}
		})
	}
	// Cut in its second block: the top rows read, the bottom ones are
	// DataLoss.
	if _, err := store.Set(ctx, "z/c/0/0", bytes.NewReader(good[:len(good)-100]), storesvc.Condition{}); err != nil {
		t.Fatal(err)
	}
	got, _ := readAll(t, g, "z", top, 4)
	if want, _ := ref.expect(top); !bytes.Equal(got, want) {
		t.Fatal("the top rows of a chunk damaged in its second block differ from the reference")
	}
	bottom := []zarr.Range{{Start: 200, Stop: 256, Step: 1}, {Start: 0, Stop: 10, Step: 1}}
	err = g.ReadSlab(ctx, "z", bottom, func(SlabInfo) error { return nil }, func(Block) error { return nil })
	if errs.CodeOf(err) != errs.CodeDataLoss {
		t.Fatalf("read of the damaged rows: %v, want DataLoss", err)
	}
}

// meetEngine is codecsvc.Local whose first decode call waits until
// another call has started: a read whose chunks are decoded one after
// another (in one call, or in calls one at a time) never gets past it
// (the test's context ends it), one whose chunks are decoded side by side
// does.
type meetEngine struct {
	*codecsvc.Local
	calls   atomic.Int32
	started chan struct{}
}

func (e *meetEngine) wait(ctx context.Context) error {
	if e.calls.Add(1) > 1 {
		select {
		case e.started <- struct{}{}:
		default:
		}
		return nil
	}
	select {
	case <-e.started:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (e *meetEngine) Decode(ctx context.Context, spec *codec.BatchSpec, encoded [][]byte) ([]codec.Chunk, error) {
	if err := e.wait(ctx); err != nil {
		return nil, err
	}
	return e.Local.Decode(ctx, spec, encoded)
}

func (e *meetEngine) DecodeSelected(ctx context.Context, spec *codec.BatchSpec, encoded [][]byte, sel []codec.Selection) ([]codec.Chunk, error) {
	if err := e.wait(ctx); err != nil {
		return nil, err
	}
	return e.Local.DecodeSelected(ctx, spec, encoded, sel)
}

// TestSmallReadDecodesSideBySide: a small read of several chunks decodes
// them side by side, with two processors: each chunk read and decoded on
// a goroutine of its own (readSmall), a shard's inner chunks each decoded
// on its own (decodeSpread); the first decode waits for another to start.
// The read's result is the reference's; a damaged chunk among them is
// DataLoss naming that chunk, not its neighbour.
func TestSmallReadDecodesSideBySide(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	for _, sharded := range []bool{false, true} {
		t.Run(fmt.Sprintf("sharded=%v", sharded), func(t *testing.T) {
			_, store, ref := zstdPartArray(t, sharded)
			e := &meetEngine{Local: codecsvc.NewLocal(), started: make(chan struct{}, 1)}
			g := New(store, e, Config{})
			rctx, cancel := context.WithTimeout(ctx, time.Minute) // a read that never decodes side by side fails here, it does not hang
			defer cancel()
			// Chunks (0,0), (0,1), (1,0) (fill), (1,1); sharded, inner
			// chunks of shard (0, 0).
			sel := []zarr.Range{{Start: 200, Stop: 264, Step: 1}, {Start: 230, Stop: 294, Step: 1}}
			var blocks []Block
			err := g.ReadSlab(rctx, "z", sel, func(SlabInfo) error { return nil }, func(b Block) error {
				blocks = append(blocks, Block{Origin: b.Origin, Shape: b.Shape, Data: bytes.Clone(b.Data)})
				return nil
			})
			if err != nil {
				t.Fatalf("a read of four chunks: %v", err)
			}
			got := make([]byte, 64*64*4)
			for _, b := range blocks {
				for i := range b.Shape[0] {
					copy(got[((b.Origin[0]+i)*64+b.Origin[1])*4:], b.Data[i*b.Shape[1]*4:(i+1)*b.Shape[1]*4])
				}
			}
			if want, _ := ref.expect(sel); !bytes.Equal(got, want) {
				t.Fatal("the read differs from the reference")
			}
			if e.calls.Load() < 2 {
				t.Fatalf("%d decode calls, want one per chunk", e.calls.Load())
			}
			if sharded {
				return
			}
			obj, err := store.Get(ctx, "z/c/0/0", storesvc.ByteRange{})
			if err != nil {
				t.Fatal(err)
			}
			first, _ := io.ReadAll(obj)
			obj.Close()
			if _, err := store.Set(ctx, "z/c/0/1", bytes.NewReader(first[:len(first)/5]), storesvc.Condition{}); err != nil {
				t.Fatal(err)
			}
			err = g.ReadSlab(rctx, "z", sel, func(SlabInfo) error { return nil }, func(Block) error { return nil })
			if errs.CodeOf(err) != errs.CodeDataLoss || !strings.Contains(err.Error(), "z/c/0/1") {
				t.Fatalf("a read of four chunks, one damaged: %v, want DataLoss naming z/c/0/1", err)
			}
		})
	}
}

// budgetEngine is codecsvc.Local that records the least of the budget's
// bytes in use that any of its decodes saw.
type budgetEngine struct {
	*codecsvc.Local
	b     *membudget.Budget
	least atomic.Int64
}

func (e *budgetEngine) see() {
	for n := e.b.InUse(); ; {
		old := e.least.Load()
		if old <= n || e.least.CompareAndSwap(old, n) {
			return
		}
	}
}

func (e *budgetEngine) Decode(ctx context.Context, spec *codec.BatchSpec, encoded [][]byte) ([]codec.Chunk, error) {
	e.see()
	return e.Local.Decode(ctx, spec, encoded)
}

func (e *budgetEngine) DecodeSelected(ctx context.Context, spec *codec.BatchSpec, encoded [][]byte, sel []codec.Selection) ([]codec.Chunk, error) {
	e.see()
	return e.Local.DecodeSelected(ctx, spec, encoded, sel)
}

// TestSmallReadReservesAtOnce: a small read whose chunks are decoded side
// by side reserves the memory of all of them before it decodes any (no
// read holds part of the budget while it waits for more, which two such
// reads at once could do for ever); under a budget that cannot hold them
// all, it reads them in turn, and completes.
func TestSmallReadReservesAtOnce(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	_, store, ref := zstdPartArray(t, false)
	sel := []zarr.Range{{Start: 200, Stop: 264, Step: 1}, {Start: 230, Stop: 294, Step: 1}} // 4 chunks, one fill
	const cost = 2 * 256 * 256 * 4                                                          // layout.readCost of a 256 × 256 float32 chunk
	for _, limit := range []int64{1 << 30, 3 * cost} {
		b := membudget.New(limit, 0)
		e := &budgetEngine{Local: codecsvc.NewLocal(), b: b}
		e.least.Store(math.MaxInt64)
		g := New(store, e, Config{Budget: b})
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		got := make([]byte, 64*64*4)
		err := g.ReadSlab(rctx, "z", sel, func(SlabInfo) error { return nil }, func(b Block) error {
			for i := range b.Shape[0] {
				copy(got[((b.Origin[0]+i)*64+b.Origin[1])*4:], b.Data[i*b.Shape[1]*4:(i+1)*b.Shape[1]*4])
			}
			return nil // blocks kept to the read's end
		})
		cancel()
		if err != nil {
			t.Fatalf("budget %d: %v", limit, err)
		}
		if want, _ := ref.expect(sel); !bytes.Equal(got, want) {
			t.Fatalf("budget %d: the read differs from the reference", limit)
		}
		if least := e.least.Load(); limit > 4*cost && least < 4*cost {
			t.Fatalf("a decode ran with %d bytes reserved, want the 4 chunks' %d at once", least, 4*cost)
		}
		if n := b.InUse(); n != 0 {
			t.Fatalf("budget %d: %d bytes still reserved after the read", limit, n)
		}
	}
}
