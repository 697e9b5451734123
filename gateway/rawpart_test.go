package gateway

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/membudget"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/memory"
	"github.com/zarrgate/zarrgate/zarr"
)

const rawCodecs = `[{"name":"bytes","configuration":{"endian":"little"}}]`

// rawArray makes array "r" of float32 (shape 64×50×6, chunks 16×20×6,
// stored raw, fill 7) on a fresh memory store, written with random values
// except chunk (1, 1, 0), left missing, and returns its reference.
func rawArray(t *testing.T, cfg Config) (*Gateway, *memory.Store, *refArray) {
	t.Helper()
	store := memory.New()
	g := New(store, codecsvc.NewLocal(), cfg)
	c := slabCase{dtype: "float32", shape: []int64{64, 50, 6}, chunks: []int64{16, 20, 6}, codecs: rawCodecs}
	ref := c.create(t, g, "r")
	r := rand.New(rand.NewPCG(3, 4))
	for i := range ref.data {
		ref.data[i] = byte(r.IntN(256))
	}
	for i := 16; i < 32; i++ { // chunk (1, 1, 0): rows 16..31, columns 20..39
		for j := 20; j < 40; j++ {
			for k := range 6 {
				copy(ref.data[ref.index([]int64{int64(i), int64(j), int64(k)})*4:], []byte{0, 0, 0xe0, 0x40}) // 7.0
			}
		}
	}
	for i := int64(0); i < 64; i += 16 {
		for j := int64(0); j < 50; j += 20 {
			if i == 16 && j == 20 {
				continue
			}
			sel := []zarr.Range{{Start: i, Stop: i + 16, Step: 1}, {Start: j, Stop: min(j+20, 50), Step: 1}, {Start: 0, Stop: 6, Step: 1}}
			data, _ := ref.expect(sel)
			blk := Block{Origin: []int64{0, 0, 0}, Shape: []int64{16, min(j+20, 50) - j, 6}, Data: data}
			if _, err := g.WriteSlab(ctx, "r", sel, nextFrom([]Block{blk})); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := store.Get(ctx, "r/c/1/1/0", storesvc.ByteRange{}); !errors.Is(err, storesvc.ErrNotFound) {
		t.Fatalf("chunk (1, 1, 0) should be missing: %v", err)
	}
	return g, store, ref
}

// TestRawPartReads: reads of small parts of chunks stored raw (one ranged
// read each, rawSpan) give what the reference holds, whatever the
// selection: inside one chunk, across chunks (parts and whole chunks
// mixed), strided, of a missing chunk (fill), of single elements; and
// they reserve and read only the span, not the chunk.
func TestRawPartReads(t *testing.T) {
	g, _, ref := rawArray(t, Config{})
	budget := membudget.Unlimited() // its peak counts the reads only
	g.cfg.Budget = budget
	const chunkBytes = 16 * 20 * 6 * 4
	check := func(sel []zarr.Range) {
		t.Helper()
		got, _ := readAll(t, g, "r", sel, 4)
		if want, _ := ref.expect(sel); !bytes.Equal(got, want) {
			t.Fatalf("ReadSlab(%v) differs from the reference", sel)
		}
	}
	// One chunk, three rows of it: the span is 3 rows of 20×6 elements,
	// and the call holds that and the block, far less than the chunk.
	check([]zarr.Range{{Start: 2, Stop: 5, Step: 1}, {Start: 3, Stop: 9, Step: 1}, {Start: 1, Stop: 4, Step: 1}})
	if p := budget.Peak(); p != 3*20*6*4+3*6*3*4 {
		t.Errorf("a read of 3 rows of a chunk reserved up to %d bytes, want the span and the block (%d; the chunk is %d)", p, 3*20*6*4+3*6*3*4, chunkBytes)
	}
	// The missing chunk, in part: fill.
	check([]zarr.Range{{Start: 17, Stop: 19, Step: 1}, {Start: 21, Stop: 30, Step: 2}, {Start: 0, Stop: 6, Step: 5}})
	// A single element, and one in the missing chunk.
	check([]zarr.Range{{Start: 63, Stop: 64, Step: 1}, {Start: 49, Stop: 50, Step: 1}, {Start: 5, Stop: 6, Step: 1}})
	check([]zarr.Range{{Start: 20, Stop: 21, Step: 1}, {Start: 25, Stop: 26, Step: 1}, {Start: 2, Stop: 3, Step: 1}})
	// Across chunks, whole and in part, and random ones.
	check([]zarr.Range{{Start: 10, Stop: 40, Step: 1}, {Start: 15, Stop: 45, Step: 1}, {Start: 0, Stop: 6, Step: 1}})
	check(zarr.FullSelection(ref.shape))
	r := rand.New(rand.NewPCG(5, 6))
	for range 300 {
		sel := make([]zarr.Range, 3)
		for d, n := range ref.shape {
			a := r.Int64N(n)
			sel[d] = zarr.Range{Start: a, Stop: a + 1 + r.Int64N(min(n-a, 1+r.Int64N(20))), Step: 1 + r.Int64N(3)}
		}
		check(sel)
	}
}

// TestRawPartReadsCorruptChunks: a chunk stored raw whose size is not a
// chunk's is DataLoss when read in part, as when read whole, shorter
// (the span past its end, or not) or longer.
func TestRawPartReadsCorruptChunks(t *testing.T) {
	g, store, _ := rawArray(t, Config{})
	sel := []zarr.Range{{Start: 1, Stop: 3, Step: 1}, {Start: 2, Stop: 5, Step: 1}, {Start: 0, Stop: 6, Step: 1}} // chunk (0, 0, 0), rows 1-2
	for name, size := range map[string]int{"short past the span": 100, "short after the span": 16*20*6*4 - 4, "long": 16*20*6*4 + 4} {
		t.Run(name, func(t *testing.T) {
			if _, err := store.Set(ctx, "r/c/0/0/0", bytes.NewReader(make([]byte, size)), storesvc.Condition{}); err != nil {
				t.Fatal(err)
			}
			err := g.ReadSlab(ctx, "r", sel, func(SlabInfo) error { return nil }, func(Block) error { return nil })
			if errs.CodeOf(err) != errs.CodeDataLoss || !strings.Contains(err.Error(), "r/c/0/0/0") {
				t.Fatalf("read of part of a chunk of %d bytes: %v, want DataLoss naming the chunk", size, err)
			}
		})
	}
}

// TestRawPartReadsBudget: a part read reserves its span and block against
// the memory budget first: with less budget than that it is refused
// (ResourceExhausted), reading nothing; what it reserved is given back.
func TestRawPartReadsBudget(t *testing.T) {
	g, _, _ := rawArray(t, Config{})
	budget := membudget.New(1000, 0)
	g.cfg.Budget = budget
	sel := []zarr.Range{{Start: 1, Stop: 3, Step: 1}, {Start: 2, Stop: 5, Step: 1}, {Start: 0, Stop: 6, Step: 1}} // span 2×20×6×4 = 960 bytes, block 144
	err := g.ReadSlab(ctx, "r", sel, func(SlabInfo) error { return nil }, func(Block) error { return nil })
	if errs.CodeOf(err) != errs.CodeResourceExhausted {
		t.Fatalf("read needing 1104 bytes of a budget of 1000: %v, want ResourceExhausted", err)
	}
	if budget.InUse() != 0 || budget.Peak() != 0 {
		t.Errorf("budget in use %d, peak %d after a refused read, want 0", budget.InUse(), budget.Peak())
	}
	// One row fits: the elements of its 3 columns (72 bytes) and the block
	// (72).
	sel[0].Stop = 2
	if err := g.ReadSlab(ctx, "r", sel, func(SlabInfo) error { return nil }, func(Block) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if budget.InUse() != 0 || budget.Peak() != 144 {
		t.Errorf("budget in use %d, peak %d after a read of one row, want 0 and 144", budget.InUse(), budget.Peak())
	}
}
