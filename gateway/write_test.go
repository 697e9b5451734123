package gateway

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/membudget"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/memory"
	"github.com/zarrgate/zarrgate/zarr"
)

// recordingStore records every Set and Erase of a chunk key (zarr.json
// aside), with the bytes set.
type recordingStore struct {
	*memory.Store
	mu     sync.Mutex
	writes map[string][]string // key -> "set:<bytes>" or "erase"
}

func newRecordingStore() *recordingStore {
	return &recordingStore{Store: memory.New(), writes: make(map[string][]string)}
}

func (s *recordingStore) Set(ctx context.Context, key string, v io.Reader, c storesvc.Condition) (string, error) {
	b, err := io.ReadAll(v)
	if err != nil {
		return "", err
	}
	gen, err := s.Store.Set(ctx, key, bytes.NewReader(b), c)
	if err == nil && !strings.HasSuffix(key, "zarr.json") {
		s.mu.Lock()
		s.writes[key] = append(s.writes[key], "set:"+string(b))
		s.mu.Unlock()
	}
	return gen, err
}

func (s *recordingStore) Erase(ctx context.Context, key string, c storesvc.Condition) error {
	err := s.Store.Erase(ctx, key, c)
	if err == nil && !strings.HasSuffix(key, "zarr.json") {
		s.mu.Lock()
		s.writes[key] = append(s.writes[key], "erase")
		s.mu.Unlock()
	}
	return err
}

func (s *recordingStore) reset() {
	s.mu.Lock()
	s.writes = make(map[string][]string)
	s.mu.Unlock()
}

// checkWrittenOnce asserts that every chunk key was written (or erased)
// exactly once, and that what was written is what is stored now.
func (s *recordingStore) checkWrittenOnce(t *testing.T, wantKeys int) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.writes) != wantKeys {
		t.Errorf("%d chunk keys written, want %d", len(s.writes), wantKeys)
	}
	for k, ws := range s.writes {
		if len(ws) != 1 {
			t.Errorf("%s written %d times, want once (a chunk written before it was complete): %.40q", k, len(ws), ws)
			continue
		}
		obj, err := s.Store.Get(ctx, k, storesvc.ByteRange{})
		if ws[0] == "erase" {
			if !errors.Is(err, storesvc.ErrNotFound) {
				t.Errorf("%s erased but present", k)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(obj)
		obj.Close()
		if "set:"+string(got) != ws[0] {
			t.Errorf("%s: stored bytes differ from the one write", k)
		}
	}
}

// strips tiles an [rows, cols] selection in blocks of h rows × w
// columns, in row-major order of the blocks, with values from val.
func strips(rows, cols, h, w int64, elem int, val func(r, c int64) []byte) []Block {
	var out []Block
	for r0 := int64(0); r0 < rows; r0 += h {
		for c0 := int64(0); c0 < cols; c0 += w {
			b := Block{Origin: []int64{r0, c0}, Shape: []int64{min(h, rows-r0), min(w, cols-c0)}}
			b.Data = make([]byte, 0, b.Shape[0]*b.Shape[1]*int64(elem))
			for r := r0; r < r0+b.Shape[0]; r++ {
				for c := c0; c < c0+b.Shape[1]; c++ {
					b.Data = append(b.Data, val(r, c)...)
				}
			}
			out = append(out, b)
		}
	}
	return out
}

func u32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

// spillWatcher wraps next: it reports whether the spill directory held a
// call's spill log while the blocks were read, and can fail or cancel at
// block k.
type spillWatcher struct {
	dir     string
	spilled bool
}

func (s *spillWatcher) wrap(next func() (Block, error)) func() (Block, error) {
	return func() (Block, error) {
		if ents, _ := os.ReadDir(s.dir); len(ents) > 0 {
			s.spilled = true
		}
		return next()
	}
}

func emptyDir(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 0 {
		t.Fatalf("spill directory %s not removed: %v", dir, ents)
	}
}

type writeOnceCase struct {
	name   string
	spec   ArraySpec
	sel    []zarr.Range
	blocks func(r *rand.Rand, rows, cols int64, val func(r, c int64) []byte) []Block
}

// TestWriteSlabWritesEachChunkOnce writes slabs several times larger than
// the write buffer, tiled against the chunks (16-row strips over tall
// chunks, column strips, random small tiles in random order), over
// unsharded and sharded arrays, whole and partly covered: every chunk or
// shard must be written exactly once, with its final content (never
// merged early), the result must read back right, the spill directory must
// be empty afterwards and the budget all given back.
func TestWriteSlabWritesEachChunkOnce(t *testing.T) {
	codecs := json.RawMessage(`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}]`)
	plain := ArraySpec{Shape: []int64{128, 64}, DataType: "uint32", ChunkShape: []int64{64, 16}, FillValue: json.RawMessage("0"), Codecs: codecs}
	sharded := plain
	sharded.ChunkShape, sharded.ShardShape = []int64{16, 8}, []int64{64, 32}
	rowStrips := func(_ *rand.Rand, rows, cols int64, val func(r, c int64) []byte) []Block {
		return strips(rows, cols, 16, cols, 4, val)
	}
	colStrips := func(_ *rand.Rand, rows, cols int64, val func(r, c int64) []byte) []Block {
		return strips(rows, cols, rows, 3, 4, val)
	}
	tiles := func(r *rand.Rand, rows, cols int64, val func(r, c int64) []byte) []Block {
		bs := strips(rows, cols, 1+r.Int64N(7), 1+r.Int64N(7), 4, val)
		r.Shuffle(len(bs), func(i, j int) { bs[i], bs[j] = bs[j], bs[i] })
		return bs
	}
	partial := []zarr.Range{{Start: 3, Stop: 125, Step: 2}, {Start: 1, Stop: 64, Step: 3}}
	var cases []writeOnceCase
	for _, spec := range []struct {
		name string
		s    ArraySpec
	}{{"chunks", plain}, {"shards", sharded}} {
		for _, tl := range []struct {
			name string
			f    func(*rand.Rand, int64, int64, func(r, c int64) []byte) []Block
		}{{"row-strips", rowStrips}, {"column-strips", colStrips}, {"random-tiles", tiles}} {
			cases = append(cases, writeOnceCase{spec.name + "/" + tl.name + "/whole", spec.s, nil, tl.f})
			cases = append(cases, writeOnceCase{spec.name + "/" + tl.name + "/partial", spec.s, partial, tl.f})
		}
	}
	for i, c := range cases {
		// 6 KiB of buffer for a 32 KiB slab, 4 KiB chunks: a unit held
		// in memory, then spilled (every tiling keeps two or more units
		// open at once; with 10 KiB, column strips spilled only when the
		// flushes of finished units lagged); 1 KiB: units go to the log
		// at once.
		for _, buf := range []int64{6 << 10, 1 << 10} {
			t.Run(fmt.Sprintf("%s/buffer=%d", c.name, buf), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(i), 5))
				store := newRecordingStore()
				spillDir := t.TempDir()
				budget := membudget.New(64<<20, time.Second)
				g := New(store, testCodecs{}, Config{WriteBufferBytes: buf, SpillDir: spillDir, Budget: budget, Parallelism: 1 + r.IntN(4)})
				if _, err := g.CreateArray(ctx, "a", c.spec); err != nil {
					t.Fatal(err)
				}
				sel := c.sel
				if sel == nil {
					sel = zarr.FullSelection(c.spec.Shape)
				}
				// Old content everywhere (written in memory, one block), so
				// that partial chunks are merges over something.
				old := strips(128, 64, 128, 64, 4, func(r, c int64) []byte { return u32(uint32(1e6 + r*64 + c)) })
				if _, err := g.WriteSlab(ctx, "a", nil, nextFrom(old)); err != nil {
					t.Fatal(err)
				}
				store.reset()
				rows, cols := sel[0].Count(), sel[1].Count()
				blocks := c.blocks(r, rows, cols, func(r, c int64) []byte { return u32(uint32(r*1000 + c + 1)) })
				sw := &spillWatcher{dir: spillDir}
				st, err := g.WriteSlab(ctx, "a", sel, sw.wrap(nextFrom(blocks)))
				if err != nil {
					t.Fatal(err)
				}
				if !sw.spilled {
					t.Fatal("the write never spilled: the test does not test spilling")
				}
				objs := int64(0)
				proj, _ := zarr.Project(c.spec.Shape, g.mustLayout(t, "a").objectShape(), sel)
				objs = proj.NumChunks()
				if st.Objects != objs {
					t.Errorf("stats: %d objects written, want %d", st.Objects, objs)
				}
				store.checkWrittenOnce(t, int(objs))
				emptyDir(t, spillDir)
				if n := budget.InUse(); n != 0 {
					t.Errorf("budget in use after the write: %d", n)
				}
				// The content: new where selected, old elsewhere.
				data, _ := readAll(t, g, "a", nil, 4)
				for row := int64(0); row < 128; row++ {
					for col := int64(0); col < 64; col++ {
						want := uint32(1e6 + row*64 + col)
						if (row-sel[0].Start)%sel[0].Step == 0 && row >= sel[0].Start && row < sel[0].Stop &&
							(col-sel[1].Start)%sel[1].Step == 0 && col >= sel[1].Start && col < sel[1].Stop {
							want = uint32((row-sel[0].Start)/sel[0].Step*1000 + (col-sel[1].Start)/sel[1].Step + 1)
						}
						if got := binary.LittleEndian.Uint32(data[4*(row*64+col):]); got != want {
							t.Fatalf("element [%d %d] = %d, want %d", row, col, got, want)
						}
					}
				}
			})
		}
	}
}

func (g *Gateway) mustLayout(t *testing.T, path string) *layout {
	t.Helper()
	n, err := g.array(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	l, err := g.layout(n)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// failAt returns the blocks, then err at block k (the blocks from k on are
// never seen).
func failAt(blocks []Block, k int, fail func() (Block, error)) func() (Block, error) {
	i := 0
	return func() (Block, error) {
		if i == k {
			return fail()
		}
		if i == len(blocks) {
			return Block{}, io.EOF
		}
		i++
		return blocks[i-1], nil
	}
}

// TestWriteSlabNoTornChunks: a streaming write (larger than the buffer)
// that ends badly at any point (a bad block, the client gone, a cancelled
// context) leaves every chunk entirely old or entirely new, removes its
// spill directory and gives its memory back.
func TestWriteSlabNoTornChunks(t *testing.T) {
	for _, sharded := range []bool{false, true} {
		for _, how := range []string{"bad-block", "stream-error", "cancel"} {
			t.Run(fmt.Sprintf("sharded=%v/%s", sharded, how), func(t *testing.T) {
				spec := ArraySpec{Shape: []int64{128, 64}, DataType: "uint32", ChunkShape: []int64{64, 16}, FillValue: json.RawMessage("0"),
					Codecs: json.RawMessage(`[{"name":"bytes","configuration":{"endian":"little"}}]`)}
				if sharded {
					spec.ChunkShape, spec.ShardShape = []int64{16, 8}, []int64{64, 32}
				}
				store := newRecordingStore()
				spillDir := t.TempDir()
				budget := membudget.New(64<<20, time.Second)
				g := New(store, testCodecs{}, Config{WriteBufferBytes: 10 << 10, SpillDir: spillDir, Budget: budget})
				if _, err := g.CreateArray(ctx, "a", spec); err != nil {
					t.Fatal(err)
				}
				old := strips(128, 64, 128, 64, 4, func(r, c int64) []byte { return u32(1) })
				if _, err := g.WriteSlab(ctx, "a", nil, nextFrom(old)); err != nil {
					t.Fatal(err)
				}
				for _, k := range []int{1, 20, 40, 60, 79} {
					blocks := strips(128, 64, 16, 7, 4, func(r, c int64) []byte { return u32(uint32(2 + k)) })
					cctx, cancel := context.WithCancel(ctx)
					var fail func() (Block, error)
					switch how {
					case "bad-block":
						fail = func() (Block, error) {
							b := blocks[k]
							b.Data = b.Data[1:]
							return b, nil
						}
					case "stream-error":
						fail = func() (Block, error) { return Block{}, errs.New(errs.Unavailable, "client went away") }
					case "cancel":
						fail = func() (Block, error) { cancel(); return blocks[k], nil }
					}
					store.reset()
					sw := &spillWatcher{dir: spillDir}
					_, err := g.WriteSlab(cctx, "a", nil, sw.wrap(failAt(blocks, k, fail)))
					cancel()
					if err == nil {
						t.Fatalf("block %d: a failed write succeeded", k)
					}
					if k >= 40 && !sw.spilled {
						t.Fatalf("block %d: the write never spilled", k)
					}
					emptyDir(t, spillDir)
					if n := budget.InUse(); n != 0 {
						t.Fatalf("block %d: budget in use after the write: %d", k, n)
					}
					store.checkWrittenOnce(t, len(store.writes))
					checkChunksWhole(t, g, spec, 1, uint32(2+k))
					// Back to all old for the next round.
					if _, err := g.WriteSlab(ctx, "a", nil, nextFrom(old)); err != nil {
						t.Fatal(err)
					}
				}
			})
		}
	}
}

// checkChunksWhole asserts that each chunk (unsharded) or shard holds only
// old or only new values.
func checkChunksWhole(t *testing.T, g *Gateway, spec ArraySpec, old, new uint32) {
	t.Helper()
	obj := spec.ChunkShape
	if spec.ShardShape != nil {
		obj = spec.ShardShape
	}
	data, _ := readAll(t, g, "a", nil, 4)
	cols := spec.Shape[1]
	for r0 := int64(0); r0 < spec.Shape[0]; r0 += obj[0] {
		for c0 := int64(0); c0 < cols; c0 += obj[1] {
			var nOld, nNew int
			for r := r0; r < r0+obj[0]; r++ {
				for c := c0; c < c0+obj[1]; c++ {
					switch v := binary.LittleEndian.Uint32(data[4*(r*cols+c):]); v {
					case old:
						nOld++
					case new:
						nNew++
					default:
						t.Fatalf("element [%d %d] = %d, neither old nor new", r, c, v)
					}
				}
			}
			if nOld > 0 && nNew > 0 {
				t.Fatalf("chunk at [%d %d] torn: %d old and %d new elements", r0, c0, nOld, nNew)
			}
		}
	}
}

// TestWriteSlabFitsWritesNothingOnError keeps the old guarantee: a write
// that fits the buffer writes nothing when its stream turns out bad.
func TestWriteSlabFitsWritesNothingOnError(t *testing.T) {
	store := newRecordingStore()
	g := New(store, testCodecs{}, Config{})
	spec := ArraySpec{Shape: []int64{128, 64}, DataType: "uint32", ChunkShape: []int64{64, 16}, Codecs: json.RawMessage(`[{"name":"bytes","configuration":{"endian":"little"}}]`)}
	if _, err := g.CreateArray(ctx, "a", spec); err != nil {
		t.Fatal(err)
	}
	blocks := strips(128, 64, 16, 7, 4, func(r, c int64) []byte { return u32(5) })
	_, err := g.WriteSlab(ctx, "a", nil, failAt(blocks, len(blocks)-1, func() (Block, error) { return Block{}, errs.New(errs.Unavailable, "gone") }))
	if err == nil || len(store.writes) != 0 {
		t.Fatalf("err %v, writes %v", err, store.writes)
	}
}

// TestWriteSlabInvalid covers the inputs refused before anything is
// allocated or written: overflowing blocks, non-UTF-8 strings, too many
// chunks, and overlaps with chunks already written or spilled.
func TestWriteSlabInvalid(t *testing.T) {
	budget := membudget.New(64<<20, time.Second)
	store := newRecordingStore()
	g := New(store, testCodecs{}, Config{Budget: budget, WriteBufferBytes: 1 << 10, SpillDir: t.TempDir(), MaxSlabChunks: 64})
	spec := ArraySpec{Shape: []int64{128, 64}, DataType: "uint32", ChunkShape: []int64{64, 16}, Codecs: json.RawMessage(`[{"name":"bytes","configuration":{"endian":"little"}}]`)}
	if _, err := g.CreateArray(ctx, "a", spec); err != nil {
		t.Fatal(err)
	}
	if _, err := g.CreateArray(ctx, "s", ArraySpec{Shape: []int64{4}, DataType: "string", ChunkShape: []int64{2}, Codecs: json.RawMessage(`[{"name":"vlen-utf8"}]`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.CreateArray(ctx, "big", ArraySpec{Shape: []int64{1 << 40}, DataType: "uint8", ChunkShape: []int64{1000}, Codecs: json.RawMessage(`[{"name":"bytes","configuration":{"endian":"little"}}]`)}); err != nil {
		t.Fatal(err)
	}
	check := func(what, path string, sel []zarr.Range, blocks []Block, kind *errs.Kind, contains string) {
		t.Helper()
		_, err := g.WriteSlab(ctx, path, sel, nextFrom(blocks))
		if !errors.Is(err, kind) || !strings.Contains(fmt.Sprint(err), contains) {
			t.Errorf("%s: %v, want %v containing %q", what, err, kind, contains)
		}
		if n := budget.InUse(); n != 0 {
			t.Errorf("%s: budget in use after the write: %d", what, n)
		}
	}
	check("origin+shape overflows", "a", nil, []Block{{Origin: []int64{1, 0}, Shape: []int64{math.MaxInt64, 1}}}, errs.InvalidArgument, "outside")
	check("huge block", "a", nil, []Block{{Origin: []int64{0, 0}, Shape: []int64{1 << 40, 1 << 40}}}, errs.InvalidArgument, "outside")
	bad := Block{Origin: []int64{0}, Shape: []int64{4}, Data: []byte("abc\xffde"), Offsets: []int64{0, 1, 2, 4, 6}}
	check("non-UTF-8 string", "s", nil, []Block{bad}, errs.InvalidArgument, "element 2 (slab position [2]) is not valid UTF-8")
	check("too many chunks", "big", []zarr.Range{{Start: 0, Stop: 1 << 20, Step: 1000}}, nil, errs.ResourceExhausted, "--max-slab-chunks")
	// Streaming (the buffer is 1 KiB): the first strip completes and
	// flushes chunk row 0... a block reaching back into it overlaps.
	blocks := strips(128, 64, 64, 64, 4, func(r, c int64) []byte { return u32(9) })
	blocks = append(blocks[:1], Block{Origin: []int64{63, 0}, Shape: []int64{2, 64}, Data: make([]byte, 2*64*4)})
	check("overlap with a chunk written", "a", nil, blocks, errs.InvalidArgument, "overlaps")
	// An overlap among pieces spilled (buffer too small to hold a unit):
	// found when the chunk is read back, before it is written.
	tiny := New(store, testCodecs{}, Config{Budget: budget, WriteBufferBytes: 64, SpillDir: t.TempDir()})
	store.reset()
	blocks = []Block{
		{Origin: []int64{0, 0}, Shape: []int64{32, 16}, Data: make([]byte, 32*16*4)},
		{Origin: []int64{31, 0}, Shape: []int64{33, 16}, Data: make([]byte, 33*16*4)},
	}
	_, err := tiny.WriteSlab(ctx, "a", []zarr.Range{{Start: 0, Stop: 64, Step: 1}, {Start: 0, Stop: 16, Step: 1}}, nextFrom(blocks))
	if !errors.Is(err, errs.InvalidArgument) {
		t.Errorf("overlapping spilled pieces: %v", err)
	}
	if len(store.writes) != 0 {
		t.Errorf("a chunk with overlapping blocks was written: %v", store.writes)
	}
}

// TestWriteSlabBudget: a budget smaller than one chunk is
// ResourceExhausted naming the limit, and every call gives back all it
// reserved.
func TestWriteSlabBudget(t *testing.T) {
	budget := membudget.New(32<<10, 100*time.Millisecond)
	g := New(memory.New(), testCodecs{}, Config{Budget: budget})
	spec := ArraySpec{Shape: []int64{128, 64}, DataType: "uint32", ChunkShape: []int64{128, 64}, Codecs: json.RawMessage(`[{"name":"bytes","configuration":{"endian":"little"}}]`)}
	if _, err := g.CreateArray(ctx, "a", spec); err != nil {
		t.Fatal(err)
	}
	blocks := strips(128, 64, 16, 64, 4, func(r, c int64) []byte { return u32(3) })
	_, err := g.WriteSlab(ctx, "a", nil, nextFrom(blocks))
	if !errors.Is(err, errs.ResourceExhausted) || !strings.Contains(err.Error(), "32 KiB") || !strings.Contains(err.Error(), "--memory-limit") {
		t.Fatalf("chunk of 32 KiB + bitmap with a 32 KiB budget: %v, want ResourceExhausted naming the limit", err)
	}
	if n := budget.InUse(); n != 0 {
		t.Fatalf("budget in use after a refused write: %d", n)
	}
	big := membudget.New(1<<20+64<<10, 100*time.Millisecond)
	g = New(g.store.Unwrap(), testCodecs{}, Config{Budget: big})
	if _, err := g.WriteSlab(ctx, "a", nil, nextFrom(blocks)); err != nil {
		t.Fatal(err)
	}
	if n := big.InUse(); n != 0 || big.Peak() == 0 {
		t.Fatalf("budget in use after a write: %d (peak %d)", n, big.Peak())
	}
}

// TestCleanSpill: stale spill directories (no process holds their log's
// lock, or no log and a dead pid) are removed; live ones are kept.
func TestCleanSpill(t *testing.T) {
	dir := t.TempDir()
	res := membudget.Reservation{}
	live, err := openSpill(dir, 1<<20, res)
	if err != nil {
		t.Fatal(err)
	}
	defer live.close()
	// A killed process's: its log is there, nobody holds the lock.
	stale := filepath.Join(dir, spillPrefix+"12345-777")
	os.MkdirAll(stale, 0o700)
	os.WriteFile(filepath.Join(stale, spillLog), []byte("partial"), 0o600)
	// One without a log of a pid that does not run, and one of ours (a
	// call starting).
	deadPid := filepath.Join(dir, spillPrefix+strconv.Itoa(1<<30)+"-1")
	os.MkdirAll(deadPid, 0o700)
	starting := filepath.Join(dir, spillPrefix+strconv.Itoa(os.Getpid())+"-2")
	os.MkdirAll(starting, 0o700)
	other := filepath.Join(dir, "not-ours")
	os.MkdirAll(other, 0o700)
	if err := CleanSpill(dir); err != nil {
		t.Fatal(err)
	}
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	if exists(stale) || exists(deadPid) {
		t.Error("stale spill directories kept")
	}
	if !exists(live.dir) || !exists(starting) || !exists(other) {
		t.Error("a live spill directory (or another's) removed")
	}
	// A day later, a directory without a log goes whatever its pid.
	old := time.Now().Add(-25 * time.Hour)
	os.Chtimes(starting, old, old)
	CleanSpill(dir)
	if exists(starting) {
		t.Error("day-old spill directory without a log kept")
	}
	if err := CleanSpill(filepath.Join(dir, "missing")); err != nil {
		t.Errorf("missing dir: %v", err)
	}
}

// TestWriteSlabStrings spills variable-length units too.
func TestWriteSlabStrings(t *testing.T) {
	store := newRecordingStore()
	g := New(store, testCodecs{}, Config{WriteBufferBytes: 512, SpillDir: t.TempDir()})
	spec := ArraySpec{Shape: []int64{40, 12}, DataType: "string", ChunkShape: []int64{20, 4}, FillValue: json.RawMessage(`""`), Codecs: json.RawMessage(`[{"name":"vlen-utf8"}]`)}
	if _, err := g.CreateArray(ctx, "s", spec); err != nil {
		t.Fatal(err)
	}
	val := func(r, c int64) string { return strings.Repeat("é", int(r+c)%5) + fmt.Sprint(r, ",", c) }
	var blocks []Block
	for r0 := int64(0); r0 < 40; r0 += 3 {
		b := Block{Origin: []int64{r0, 0}, Shape: []int64{min(3, 40-r0), 12}, Offsets: []int64{0}}
		for r := r0; r < r0+b.Shape[0]; r++ {
			for c := range int64(12) {
				b.Data = append(b.Data, val(r, c)...)
				b.Offsets = append(b.Offsets, int64(len(b.Data)))
			}
		}
		blocks = append(blocks, b)
	}
	if _, err := g.WriteSlab(ctx, "s", nil, nextFrom(blocks)); err != nil {
		t.Fatal(err)
	}
	store.checkWrittenOnce(t, 6)
	_, vals := readAll(t, g, "s", nil, 0)
	for i, v := range vals {
		if want := val(int64(i/12), int64(i%12)); v != want {
			t.Fatalf("element %d = %q, want %q", i, v, want)
		}
	}
}

// BenchmarkWriteSlabBigStrips measures a 1 GiB write in 16-row strips
// over tall chunks (256 MiB per row of chunks) with a 64 MiB buffer, so
// that partial chunks spill: the time, the peak reserved from the budget
// and the peak heap (go test -run '^$' -bench WriteSlabBigStrips
// -benchtime 1x ./gateway/).
func BenchmarkWriteSlabBigStrips(b *testing.B) {
	for b.Loop() {
		writeBigStrips(b)
	}
}

func writeBigStrips(t *testing.B) {
	budget := membudget.New(1<<30, time.Second)
	g := New(&discardStore{Store: memory.New()}, testCodecs{}, Config{Budget: budget, WriteBufferBytes: 64 << 20, SpillDir: t.TempDir()})
	t.SetBytes(1 << 30)
	const rows, cols = 16384, 16384
	spec := ArraySpec{Shape: []int64{rows, cols}, DataType: "float32", ChunkShape: []int64{4096, 1024}, Codecs: json.RawMessage(`[{"name":"bytes","configuration":{"endian":"little"}}]`)}
	if _, err := g.CreateArray(ctx, "a", spec); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 16*cols*4) // one strip's bytes, reused (as gRPC would hand over fresh ones)
	for i := range data {
		data[i] = byte(i)
	}
	var peakHeap uint64
	var ms runtime.MemStats
	i := int64(0)
	start := time.Now()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	_, err := g.WriteSlab(ctx, "a", nil, func() (Block, error) {
		if i%64 == 0 {
			runtime.ReadMemStats(&ms)
			peakHeap = max(peakHeap, ms.HeapInuse)
		}
		if i*16 >= rows {
			return Block{}, io.EOF
		}
		b := Block{Origin: []int64{i * 16, 0}, Shape: []int64{16, cols}, Data: slices.Clone(data)}
		i++
		return b, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.ReportMetric(float64(budget.Peak())/(1<<20), "budget-peak-MiB")
	t.ReportMetric(float64(peakHeap-base)/(1<<20), "heap-peak-MiB")
	t.Logf("1 GiB in 16-row strips, 64 MiB buffer: %v, budget peak %s, heap in use peak %s above the start",
		time.Since(start).Round(time.Millisecond), membudget.Size(budget.Peak()), membudget.Size(int64(peakHeap-base)))
	if budget.InUse() != 0 {
		t.Fatalf("budget in use after: %d", budget.InUse())
	}
}

// discardStore drops what is set (a whole-array write never reads it).
type discardStore struct{ *memory.Store }

func (d *discardStore) Set(ctx context.Context, key string, v io.Reader, c storesvc.Condition) (string, error) {
	if strings.HasSuffix(key, "zarr.json") {
		return d.Store.Set(ctx, key, v, c)
	}
	_, err := io.Copy(io.Discard, v)
	return "g", err
}
