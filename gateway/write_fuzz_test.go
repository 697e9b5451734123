package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/membudget"
	"github.com/zarrgate/zarrgate/storesvc/memory"
	"github.com/zarrgate/zarrgate/zarr"
)

// FuzzWriteTiling writes random selections of small random arrays
// (chunked or sharded, fixed size or strings, real codecs) tiled into
// random blocks sent in random order, through a buffer so small that units
// spill: what reads back must equal the reference; a tiling with a gap or
// an overlap must be refused with InvalidArgument. Every call must give
// back all it reserved and remove its spill directory, and neither the
// memory it reserves nor what it allocates may grow beyond the buffer and
// a constant.
func FuzzWriteTiling(f *testing.F) {
	for i := range uint64(24) {
		f.Add(i, uint8(i%6), uint16(i*37))
	}
	engine := codecsvc.NewLocal()
	f.Fuzz(func(t *testing.T, seed uint64, mode uint8, buf uint16) {
		r := rand.New(rand.NewPCG(seed, uint64(mode)<<16|uint64(buf)))
		// Real codecs, or the test engine, whose allocations are the
		// tiler's alone (gzip and zstd allocate their state per chunk).
		real := mode&4 == 0
		c := randCaseFor(r, real)
		var codecs Codecs = testCodecs{}
		if real {
			codecs = engine
		}
		spill := t.TempDir()
		budget := membudget.New(256<<20, time.Second)
		bufBytes := 16 + int64(buf)%2048
		g := New(memory.New(), codecs, Config{WriteBufferBytes: bufBytes, SpillDir: spill, Budget: budget, Parallelism: 1 + r.IntN(3)})
		ref := c.create(t, g, "a")
		for step := range 3 {
			sel := randSel(r, c.shape)
			if step == 0 {
				sel = zarr.FullSelection(c.shape)
			}
			blocks, _ := ref.blocksFor(r, sel, randValue(r, ref.elem))
			bad := ""
			switch {
			case mode%3 == 1 && len(blocks) > 1 && step == 2:
				k := r.IntN(len(blocks))
				if product(blocks[k].Shape) > 0 {
					blocks = append(blocks[:k], blocks[k+1:]...)
					bad = "gap"
				}
			case mode%3 == 2 && len(blocks) > 0 && step == 2:
				k := r.IntN(len(blocks))
				if product(blocks[k].Shape) > 0 {
					at := r.IntN(len(blocks) + 1)
					blocks = append(blocks[:at], append([]Block{blocks[k]}, blocks[at:]...)...)
					bad = "overlap"
				}
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := g.WriteSlab(ctx, "a", sel, nextFrom(blocks))
			runtime.ReadMemStats(&after)
			if bad != "" {
				if !errors.Is(err, errs.InvalidArgument) {
					t.Fatalf("case %+v: a tiling with a %s: %v, want InvalidArgument", c, bad, err)
				}
			} else if err != nil {
				t.Fatalf("case %+v: WriteSlab(%v): %v", c, sel, err)
			}
			if n := budget.InUse(); n != 0 {
				t.Fatalf("budget in use after the write: %d", n)
			}
			if ents, _ := os.ReadDir(spill); len(ents) != 0 {
				t.Fatalf("spill directory left: %v", ents)
			}
			// Reserved: the buffer, the spill log's buffers, granules and
			// one small array's worth of flush buffers.
			if p := budget.Peak(); p > bufBytes+4<<20 {
				t.Fatalf("case %+v step %d: peak reservation %d with a buffer of %d", c, step, p, bufBytes)
			}
			if a := after.TotalAlloc - before.TotalAlloc; !real && a > 8<<20 {
				t.Fatalf("case %+v: one small write allocated %d bytes", c, a)
			}
			if bad != "" {
				return // the store may hold chunks completed before the bad block
			}
			rsel := randSel(r, c.shape)
			gotData, gotVals := readAll(t, g, "a", rsel, ref.elem)
			wantData, wantVals := ref.expect(rsel)
			if !bytes.Equal(gotData, wantData) || fmt.Sprint(gotVals) != fmt.Sprint(wantVals) {
				t.Fatalf("case %+v step %d: ReadSlab(%v) differs from the reference", c, step, rsel)
			}
		}
	})
}
