package gateway

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/bufpool"
	"github.com/zarrgate/zarrgate/internal/retrybudget"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/memory"
	"github.com/zarrgate/zarrgate/zarr"
)

// dirtyUnits makes WriteSlab's pooled unit buffers arrive full of 0xAB,
// as a recycled buffer may, and counts them; restored when the test ends.
func dirtyUnits(t *testing.T) *int {
	bufpool.CheckDoublePuts()
	n := new(int)
	old := unitBuffer
	unitBuffer = func(size int) []byte {
		*n++
		b := bufpool.Get(size)
		for i := range b {
			b[i] = 0xAB
		}
		return b
	}
	t.Cleanup(func() { unitBuffer = old })
	return n
}

// Units the selection covers whole are written from pooled buffers that
// are neither zeroed nor filled; every other unit (at the array's edge, or
// partly selected) still starts as fill value: the elements of a stored
// chunk outside the array are the fill value, never a recycled buffer's
// bytes, and a partial write keeps the stored neighbours.
func TestWriteSlabPooledUnitsKeepFill(t *testing.T) {
	const fillV = 7
	raw := json.RawMessage(`[{"name":"bytes","configuration":{"endian":"little"}}]`)
	plain := ArraySpec{Shape: []int64{10, 13}, DataType: "uint32", ChunkShape: []int64{4, 4}, FillValue: json.RawMessage(fmt.Sprint(fillV)), Codecs: raw}
	sharded := plain
	sharded.ShardShape = []int64{8, 8}
	val := func(r, c int64) uint32 { return uint32(1000 + r*100 + c) }
	for _, tc := range []struct {
		name string
		spec ArraySpec
	}{{"chunks", plain}, {"shards", sharded}} {
		t.Run(tc.name, func(t *testing.T) {
			pooled := dirtyUnits(t)
			store := memory.New()
			g := New(store, codecsvc.NewLocal(), Config{})
			if _, err := g.CreateArray(ctx, "a", tc.spec); err != nil {
				t.Fatal(err)
			}
			// Row strips of 3: every unit takes pieces of two blocks.
			blocks := strips(10, 13, 3, 13, 4, func(r, c int64) []byte { return u32(val(r, c)) })
			if _, err := g.WriteSlab(ctx, "a", nil, nextFrom(blocks)); err != nil {
				t.Fatal(err)
			}
			// 2 × 3 units lie inside the array whole.
			if *pooled != 6 {
				t.Errorf("%d units written from pooled buffers, want the 6 inside the array", *pooled)
			}
			data, _ := readAll(t, g, "a", nil, 4)
			for r := range int64(10) {
				for c := range int64(13) {
					if got := binary.LittleEndian.Uint32(data[4*(r*13+c):]); got != val(r, c) {
						t.Fatalf("element [%d %d] = %d, want %d", r, c, got, val(r, c))
					}
				}
			}
			checkStoredUnits(t, g, store, tc.spec, func(r, c int64) uint32 {
				if r >= 10 || c >= 13 {
					return fillV
				}
				return val(r, c)
			})

			// A partial write (rows 1–8, columns 2–12): only the unit at
			// rows 4–7, columns 4–7 and the one at rows 4–7, columns 8–11
			// are selected whole; the others keep their stored elements.
			*pooled = 0
			sel := []zarr.Range{{Start: 1, Stop: 9, Step: 1}, {Start: 2, Stop: 13, Step: 1}}
			part := strips(8, 11, 8, 11, 4, func(r, c int64) []byte { return u32(uint32(r*100 + c + 5)) })
			if _, err := g.WriteSlab(ctx, "a", sel, nextFrom(part)); err != nil {
				t.Fatal(err)
			}
			if *pooled != 2 {
				t.Errorf("%d units written from pooled buffers, want 2", *pooled)
			}
			checkStoredUnits(t, g, store, tc.spec, func(r, c int64) uint32 {
				switch {
				case r >= 10 || c >= 13:
					return fillV
				case r >= 1 && r < 9 && c >= 2:
					return uint32((r-1)*100 + (c - 2) + 5)
				}
				return val(r, c)
			})
		})
	}
}

// checkStoredUnits reads every stored chunk (or every inner chunk of every
// shard) of a 2-D uint32 array stored raw, and checks each element, those
// past the array's edge included, against want (array coordinates).
func checkStoredUnits(t *testing.T, g *Gateway, store storesvc.Store, spec ArraySpec, want func(r, c int64) uint32) {
	t.Helper()
	unit := spec.ChunkShape
	obj := unit
	if spec.ShardShape != nil {
		obj = spec.ShardShape
	}
	l := g.mustLayout(t, "a")
	for i := int64(0); i*obj[0] < spec.Shape[0]; i++ {
		for j := int64(0); j*obj[1] < spec.Shape[1]; j++ {
			key := l.key([]int64{i, j})
			o, err := store.Get(ctx, key, storesvc.ByteRange{})
			if err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			b, err := io.ReadAll(o)
			o.Close()
			if err != nil {
				t.Fatal(err)
			}
			units := map[[2]int64][]byte{{0, 0}: b}
			if spec.ShardShape != nil {
				inner, err := codec.Split(l.shard.index, b)
				if err != nil {
					t.Fatalf("%s: %v", key, err)
				}
				units = map[[2]int64][]byte{}
				per := obj[1] / unit[1]
				for k, u := range inner {
					if u != nil {
						units[[2]int64{int64(k) / per, int64(k) % per}] = u
					}
				}
			}
			for at, u := range units {
				if int64(len(u)) != unit[0]*unit[1]*4 {
					t.Fatalf("%s unit %v: %d bytes", key, at, len(u))
				}
				for r := range unit[0] {
					for c := range unit[1] {
						ar, ac := i*obj[0]+at[0]*unit[0]+r, j*obj[1]+at[1]*unit[1]+c
						if got := binary.LittleEndian.Uint32(u[4*(r*unit[1]+c):]); got != want(ar, ac) {
							t.Fatalf("%s unit %v: element [%d %d] (array [%d %d]) = %#x, want %d", key, at, r, c, ar, ac, got, want(ar, ac))
						}
					}
				}
			}
		}
	}
}

// WriteSlab releases a fixed-size block's buffer once its elements are
// copied out, before it asks for the next block; never a variable-length
// block's (its values stay in the block's memory), nor a refused block's.
func TestWriteSlabReleasesBlocks(t *testing.T) {
	g := New(memory.New(), codecsvc.NewLocal(), Config{})
	raw := json.RawMessage(`[{"name":"bytes","configuration":{"endian":"little"}}]`)
	if _, err := g.CreateArray(ctx, "u", ArraySpec{Shape: []int64{10, 13}, DataType: "uint32", ChunkShape: []int64{4, 4}, Codecs: raw}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.CreateArray(ctx, "s", ArraySpec{Shape: []int64{6, 4}, DataType: "string", ChunkShape: []int64{4, 4}, FillValue: json.RawMessage(`""`), Codecs: json.RawMessage(`[{"name":"vlen-utf8"}]`)}); err != nil {
		t.Fatal(err)
	}
	// released[i] is set by block i's release; each next checks that the
	// block before it was released already (fixed size) or not (strings).
	run := func(path string, blocks []Block, wantReleased bool) []bool {
		released := make([]bool, len(blocks))
		for i := range blocks {
			blocks[i] = blocks[i].WithRelease(func() {
				if released[i] {
					t.Errorf("%s: block %d released twice", path, i)
				}
				released[i] = true
			})
		}
		k := 0
		_, err := g.WriteSlab(ctx, path, nil, func() (Block, error) {
			if k > 0 && released[k-1] != wantReleased {
				t.Errorf("%s: block %d released %v when the next was asked for, want %v", path, k-1, released[k-1], wantReleased)
			}
			if k == len(blocks) {
				return Block{}, io.EOF
			}
			k++
			return blocks[k-1], nil
		})
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return released
	}
	rel := run("u", strips(10, 13, 3, 13, 4, func(r, c int64) []byte { return u32(uint32(r*13 + c)) }), true)
	for i, r := range rel {
		if !r {
			t.Errorf("uint32 block %d never released", i)
		}
	}
	var sblocks []Block
	for r0 := int64(0); r0 < 6; r0 += 2 {
		b := Block{Origin: []int64{r0, 0}, Shape: []int64{2, 4}, Offsets: []int64{0}}
		for i := range 8 {
			b.Data = append(b.Data, fmt.Sprint("v", r0, i)...)
			b.Offsets = append(b.Offsets, int64(len(b.Data)))
		}
		sblocks = append(sblocks, b)
	}
	for i, r := range run("s", sblocks, false) {
		if r {
			t.Errorf("string block %d released", i)
		}
	}
	// A refused block (one byte short) is not released.
	bad := strips(10, 13, 10, 13, 4, func(r, c int64) []byte { return u32(1) })
	bad[0].Data = bad[0].Data[:len(bad[0].Data)-1]
	released := false
	bad[0] = bad[0].WithRelease(func() { released = true })
	if _, err := g.WriteSlab(ctx, "u", nil, nextFrom(bad)); err == nil {
		t.Fatal("a block one byte short was accepted")
	}
	if released {
		t.Error("a refused block was released")
	}
}

// TestWriteSlabRecyclesEncoded writes through the in-process engine, whose
// encoded results WriteSlab hands back to the pool once stored, with chains
// whose result is a new buffer (zstd), the input itself (bytes alone) or
// the input with a checksum appended in its spare capacity (crc32c), for
// chunks and shards, four writers at once on arrays of their own, twice
// over (the second time into recycled buffers): every array reads back as
// its writer wrote it, and no buffer goes back to the pool twice.
func TestWriteSlabRecyclesEncoded(t *testing.T) {
	bufpool.CheckDoublePuts()
	// Units of 64 KiB, the smallest the pool keeps; some at the edges.
	const rows, cols = 384, 320
	chains := map[string]string{
		"zstd":   `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":1}}]`,
		"bytes":  `[{"name":"bytes","configuration":{"endian":"little"}}]`,
		"crc32c": `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}]`,
	}
	g := New(memory.New(), codecsvc.NewLocal(), Config{})
	if !g.mustLayoutOf(t, "zstd", chains["zstd"]).codec.ownsEncodes() {
		t.Fatal("the local engine's results are not recycled: the test tests nothing")
	}
	type job struct {
		path string
		seed uint32
	}
	var jobs []job
	for name, chain := range chains {
		for _, sharded := range []bool{false, true} {
			spec := ArraySpec{Shape: []int64{rows, cols}, DataType: "uint32", ChunkShape: []int64{128, 128}, Codecs: json.RawMessage(chain)}
			path := name + "-chunks"
			if sharded {
				spec.ShardShape, path = []int64{256, 256}, name+"-shards"
			}
			if _, err := g.CreateArray(ctx, path, spec); err != nil {
				t.Fatal(err)
			}
			jobs = append(jobs, job{path, uint32(len(jobs)) << 24})
		}
	}
	val := func(j job, round, r, c int64) uint32 { return j.seed + uint32(round<<20) + uint32(r*cols+c) + 1 }
	for round := range int64(2) {
		errc := make(chan error, len(jobs))
		sem := make(chan struct{}, 4)
		for _, j := range jobs {
			go func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				blocks := strips(rows, cols, 37, cols, 4, func(r, c int64) []byte { return u32(val(j, round, r, c)) })
				_, err := g.WriteSlab(ctx, j.path, nil, nextFrom(blocks))
				errc <- err
			}()
		}
		for range jobs {
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
		}
		for _, j := range jobs {
			data, _ := readAll(t, g, j.path, nil, 4)
			for r := range int64(rows) {
				for c := range int64(cols) {
					if got := binary.LittleEndian.Uint32(data[4*(r*cols+c):]); got != val(j, round, r, c) {
						t.Fatalf("round %d, %s: element [%d %d] = %#x, want %#x", round, j.path, r, c, got, val(j, round, r, c))
					}
				}
			}
		}
	}
}

// mustLayoutOf creates array path with the given codecs and returns its
// layout.
func (g *Gateway) mustLayoutOf(t *testing.T, path, codecs string) *layout {
	t.Helper()
	if _, err := g.CreateArray(ctx, "layout-of-"+path, ArraySpec{Shape: []int64{4}, DataType: "uint32", ChunkShape: []int64{4}, Codecs: json.RawMessage(codecs)}); err != nil {
		t.Fatal(err)
	}
	return g.mustLayout(t, "layout-of-"+path)
}

// A block that is exactly one whole chunk (or inner chunk of a shard) and
// comes in a transport's buffer (WithRelease) is kept as that chunk's
// buffer: encoded from where it lies, released once the chunk is stored,
// not when the next block is asked for. Release here poisons the buffer,
// as its reuse would: a chunk released before it is stored would read
// back poisoned. Blocks at the array's edge (smaller than a chunk) are
// copied and released at once.
func TestWriteSlabKeepsWholeChunkBlocks(t *testing.T) {
	bufpool.CheckDoublePuts()
	zstd := json.RawMessage(`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":1}}]`)
	raw := json.RawMessage(`[{"name":"bytes","configuration":{"endian":"little"}}]`)
	for _, tc := range []struct {
		name   string
		codecs json.RawMessage
		shard  []int64
	}{{"zstd/chunks", zstd, nil}, {"bytes/chunks", raw, nil}, {"zstd/shards", zstd, []int64{8, 8}}, {"bytes/shards", raw, []int64{8, 8}}} {
		t.Run(tc.name, func(t *testing.T) {
			g := New(memory.New(), codecsvc.NewLocal(), Config{})
			spec := ArraySpec{Shape: []int64{10, 13}, DataType: "uint32", ChunkShape: []int64{4, 4}, ShardShape: tc.shard, Codecs: tc.codecs}
			if _, err := g.CreateArray(ctx, "a", spec); err != nil {
				t.Fatal(err)
			}
			val := func(r, c int64) uint32 { return uint32(r*13 + c + 1) }
			blocks := strips(10, 13, 4, 4, 4, func(r, c int64) []byte { return u32(val(r, c)) })
			released := make([]int, len(blocks))
			for i := range blocks {
				data := blocks[i].Data
				blocks[i] = blocks[i].WithRelease(func() {
					released[i]++
					for k := range data {
						data[k] = 0xEE
					}
				})
			}
			k := 0
			_, err := g.WriteSlab(ctx, "a", nil, func() (Block, error) {
				if k > 0 {
					whole := blocks[k-1].Shape[0] == 4 && blocks[k-1].Shape[1] == 4
					if got := released[k-1] > 0; got == whole {
						t.Errorf("block %d (shape %v) released %v when the next was asked for", k-1, blocks[k-1].Shape, got)
					}
				}
				if k == len(blocks) {
					return Block{}, io.EOF
				}
				k++
				return blocks[k-1], nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for i, n := range released {
				if n != 1 {
					t.Errorf("block %d (shape %v) released %d times, want once", i, blocks[i].Shape, n)
				}
			}
			data, _ := readAll(t, g, "a", nil, 4)
			for r := range int64(10) {
				for c := range int64(13) {
					if got := binary.LittleEndian.Uint32(data[4*(r*13+c):]); got != val(r, c) {
						t.Fatalf("element [%d %d] = %#x, want %d", r, c, got, val(r, c))
					}
				}
			}
		})
	}
}

// failFirstSet fails the first Set of every chunk key with Unavailable,
// keeping the value's reader, as an HTTP transport abandoned on its
// context may go on reading the body after the call returned.
type failFirstSet struct {
	storesvc.Store
	mu   sync.Mutex
	seen map[string]bool
}

func (f *failFirstSet) Set(ctx context.Context, key string, v io.Reader, c storesvc.Condition) (string, error) {
	f.mu.Lock()
	first := !f.seen[key] && !strings.HasSuffix(key, "zarr.json")
	f.seen[key] = true
	f.mu.Unlock()
	if first {
		return "", errs.New(errs.Unavailable, "injected: the answer was lost")
	}
	return f.Store.Set(ctx, key, v, c)
}

// After a store call of an object's flush failed, none of the buffers it
// may still be reading is recycled, although the retry succeeds: not the
// chunk's pooled buffer (which is the value itself when the chain does not
// compress), nor the encoded value of the failed attempt.
func TestWriteSlabRecyclesNothingAfterAFailedSet(t *testing.T) {
	handedOut := dirtyUnits(t)
	var mu sync.Mutex
	var back [][]byte
	old := recycleBuffer
	recycleBuffer = func(b []byte) {
		mu.Lock()
		back = append(back, b)
		mu.Unlock()
	}
	t.Cleanup(func() { recycleBuffer = old })
	for _, chain := range []string{
		`[{"name":"bytes","configuration":{"endian":"little"}}]`,
		`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":1}}]`,
	} {
		*handedOut, back = 0, nil
		f := &failFirstSet{Store: memory.New(), seen: map[string]bool{}}
		g := New(f, codecsvc.NewLocal(), Config{StoreRetries: retrybudget.New("store tier", 0.9, 1000, 1000)})
		if _, err := g.CreateArray(ctx, "a", ArraySpec{Shape: []int64{256, 256}, DataType: "uint32", ChunkShape: []int64{128, 128}, Codecs: json.RawMessage(chain)}); err != nil {
			t.Fatal(err)
		}
		val := func(r, c int64) uint32 { return uint32(r*256 + c + 1) }
		if _, err := g.WriteSlab(ctx, "a", nil, nextFrom(strips(256, 256, 50, 256, 4, func(r, c int64) []byte { return u32(val(r, c)) }))); err != nil {
			t.Fatal(err)
		}
		if *handedOut != 4 {
			t.Fatalf("%d pooled chunk buffers, want 4: the test tests nothing", *handedOut)
		}
		// Only the second attempts' encoded values (zstd) may go back.
		for _, b := range back {
			if !strings.Contains(chain, "zstd") || len(b) == 128*128*4 {
				t.Errorf("chain %s: a buffer of %d bytes was recycled after a failed Set", chain, len(b))
			}
		}
		data, _ := readAll(t, g, "a", nil, 4)
		for r := range int64(256) {
			for c := range int64(256) {
				if got := binary.LittleEndian.Uint32(data[4*(r*256+c):]); got != val(r, c) {
					t.Fatalf("element [%d %d] = %d, want %d", r, c, got, val(r, c))
				}
			}
		}
	}
}
