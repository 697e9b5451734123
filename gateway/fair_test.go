package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/memory"
	"github.com/zarrgate/zarrgate/zarr"
)

// TestSchedulerShares checks the shares: a call alone has Parallelism
// slots; beside other calls, the calls with workers split all processors
// but one, at least one slot each; a call that ended after a call began
// keeps sharing for fairCooldown, one that ended before does not.
func TestSchedulerShares(t *testing.T) {
	s := &scheduler{procs: 4, parallelism: 16}
	lim := func(c *call, now time.Time) int {
		s.mu.Lock()
		defer s.mu.Unlock()
		n, _ := c.limit(now)
		return n
	}
	small := s.begin(false)
	small.end() // ended before big began: big is alone
	big := s.begin(true)
	now := time.Now()
	if n := lim(big, now); n != 16 {
		t.Errorf("alone: %d slots, want 16", n)
	}
	small = s.begin(false)
	if n := lim(big, time.Now()); n != 3 {
		t.Errorf("beside a small call: %d slots, want 3 (4 processors but one)", n)
	}
	small.end()
	ended := time.Now()
	if n := lim(big, ended); n != 3 {
		t.Errorf("just after a small call: %d slots, want 3", n)
	}
	if n := lim(big, ended.Add(fairCooldown)); n != 16 {
		t.Errorf("%v after the small call: %d slots, want 16", fairCooldown, n)
	}
	other := s.begin(true)
	if a, b := lim(big, time.Now()), lim(other, time.Now()); a != 1 || b != 1 {
		t.Errorf("two calls with workers: %d and %d slots, want 1 each", a, b)
	}
	three := s.begin(true)
	four := s.begin(true)
	if n := lim(four, time.Now()); n != 1 {
		t.Errorf("four calls with workers on 4 processors: %d slots, want at least 1", n)
	}
	for _, c := range []*call{other, three, four, big} {
		c.end()
	}
	if s.active != 0 || s.workers != 0 {
		t.Errorf("after every call ended: %d active, %d with workers", s.active, s.workers)
	}
	// One processor: still one slot.
	s1 := &scheduler{procs: 1, parallelism: 4}
	a, b := s1.begin(true), s1.begin(false)
	if n := lim2(s1, a); n != 1 {
		t.Errorf("one processor, shared: %d slots, want 1", n)
	}
	a.end()
	b.end()
}

func lim2(s *scheduler, c *call) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, _ := c.limit(time.Now())
	return n
}

// TestSchedulerWaits checks that a call past its share waits for one of its
// slots to be given back, and that cancelling its context ends the wait.
func TestSchedulerWaits(t *testing.T) {
	s := &scheduler{procs: 2, parallelism: 8}
	big := s.begin(true)
	small := s.begin(false)
	defer small.end()
	defer big.end()
	done, err := big.acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		d, err := big.acquire(ctx)
		if err == nil {
			d()
		}
		got <- err
	}()
	done() // the waiter takes the slot given back
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	done, err = big.acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	cctx, cancel := context.WithCancel(ctx)
	go func() { _, err := big.acquire(cctx); got <- err }()
	cancel()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v, want context.Canceled", err)
	}
	// Calls without workers, and work outside any call, never wait.
	for _, c := range []*call{small, nil} {
		d, err := c.acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		d()
	}
}

// TestSchedulerSmallCallsFirst: a batch of a call with workers does not
// start while a call without workers is in progress (for up to
// fairYield, an hour here), and starts when that call ends.
func TestSchedulerSmallCallsFirst(t *testing.T) {
	defer func(y time.Duration) { fairYield = y }(fairYield)
	fairYield = time.Hour
	s := &scheduler{procs: 4, parallelism: 8}
	big := s.begin(true)
	defer big.end()
	small := s.begin(false)
	got := make(chan error, 1)
	go func() {
		d, err := big.acquire(ctx)
		if err == nil {
			d()
		}
		got <- err
	}()
	for waiting := 0; waiting == 0; runtime.Gosched() {
		select {
		case <-got:
			t.Fatal("a batch started while a small call was in progress")
		default:
		}
		s.mu.Lock()
		waiting = s.waiting
		s.mu.Unlock()
	}
	small.end()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if !big.shared() {
		t.Error("just after a small call ended, the big call does not count as sharing")
	}
}

// peakEngine is the in-process codec engine, counting the batches running
// at once.
type peakEngine struct {
	codec.Engine
	now, peak atomic.Int64
}

func (e *peakEngine) enter() func() {
	n := e.now.Add(1)
	for p := e.peak.Load(); n > p && !e.peak.CompareAndSwap(p, n); p = e.peak.Load() {
	}
	time.Sleep(time.Millisecond) // long enough for the workers' batches to overlap
	return func() { e.now.Add(-1) }
}

func (e *peakEngine) Decode(ctx context.Context, spec *codec.BatchSpec, encoded [][]byte) ([]codec.Chunk, error) {
	defer e.enter()()
	return e.Engine.Decode(ctx, spec, encoded)
}

func (e *peakEngine) Encode(ctx context.Context, spec *codec.BatchSpec, chunks []codec.Chunk) ([][]byte, error) {
	defer e.enter()()
	return e.Engine.Encode(ctx, spec, chunks)
}

// TestReadSharesProcessors reads a 64-chunk slab with 8 workers while
// another call is in progress (a small read whose client is slow to take
// its block): the slab's decode batches run one at a time on a gateway of
// two processors, leaving one to the other call, and the slab reads whole
// and right; then writes it whole beside that call, one encode at a time;
// and a corrupt chunk, decoded alone while shared, is still the one named.
func TestReadSharesProcessors(t *testing.T) {
	e := &peakEngine{Engine: codecsvc.NewLocal()}
	g := New(memory.New(), e, Config{Parallelism: 8})
	g.sched.procs = 2
	if _, err := g.CreateArray(ctx, "a", ArraySpec{Shape: []int64{256, 256}, DataType: "uint8", ChunkShape: []int64{4, 256}, Codecs: json.RawMessage(zstdBytes)}); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 256*256)
	for i := range data {
		data[i] = byte(i * 7 / 5)
	}
	if _, err := g.WriteSlab(ctx, "a", nil, nextFrom([]Block{{Origin: []int64{0, 0}, Shape: []int64{256, 256}, Data: data}})); err != nil {
		t.Fatal(err)
	}
	read := func() []byte {
		got := make([]byte, len(data))
		err := g.ReadSlab(ctx, "a", nil, func(SlabInfo) error { return nil }, func(b Block) error {
			for r := range b.Shape[0] {
				copy(got[(b.Origin[0]+r)*256+b.Origin[1]:], b.Data[r*b.Shape[1]:(r+1)*b.Shape[1]])
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}

	// The other call: a one-chunk read held in its emit until the slab
	// is read.
	inEmit, release := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		err := g.ReadSlab(ctx, "a", []zarr.Range{{Start: 0, Stop: 1, Step: 1}, {Start: 0, Stop: 1, Step: 1}}, func(SlabInfo) error { return nil }, func(Block) error {
			close(inEmit)
			<-release
			return nil
		})
		if err != nil {
			t.Error(err)
		}
	})
	<-inEmit
	e.peak.Store(0)
	if string(read()) != string(data) {
		t.Fatal("the slab read beside another call differs from what was written")
	}
	if p := e.peak.Load(); p != 1 {
		t.Errorf("beside another call, %d decode batches ran at once on 2 processors, want 1", p)
	}
	// A write beside it encodes one chunk at a time too.
	for i := range data {
		data[i] = byte(i * 3)
	}
	e.peak.Store(0)
	if _, err := g.WriteSlab(ctx, "a", nil, nextFrom([]Block{{Origin: []int64{0, 0}, Shape: []int64{256, 256}, Data: data}})); err != nil {
		t.Fatal(err)
	}
	if p := e.peak.Load(); p != 1 {
		t.Errorf("beside another call, %d encode batches ran at once on 2 processors, want 1", p)
	}
	// A corrupt chunk read a chunk at a time is still named right.
	if _, err := g.Store().Set(ctx, "a/c/5/0", strings.NewReader("not zstd"), storesvc.Condition{}); err != nil {
		t.Fatal(err)
	}
	err := g.ReadSlab(ctx, "a", nil, func(SlabInfo) error { return nil }, func(Block) error { return nil })
	if err == nil || !strings.Contains(err.Error(), `"a/c/5/0"`) {
		t.Errorf("reading a corrupt chunk beside another call: %v, want an error naming a/c/5/0", err)
	}
	if _, err := g.WriteSlab(ctx, "a", nil, nextFrom([]Block{{Origin: []int64{0, 0}, Shape: []int64{256, 256}, Data: data}})); err != nil {
		t.Fatal(err)
	}
	close(release)
	wg.Wait()
	if string(read()) != string(data) {
		t.Fatal("the slab written beside another call reads back different")
	}
}

// selectHere is an in-process engine that takes selections (as
// --codec-choice auto does when it decodes here): decode whole, then pack.
// It records each selected batch's size.
type selectHere struct {
	*peakEngine
	mu    sync.Mutex
	sizes []int
}

func (s *selectHere) DecodeSelected(ctx context.Context, spec *codec.BatchSpec, encoded [][]byte, sel []codec.Selection) ([]codec.Chunk, error) {
	s.mu.Lock()
	s.sizes = append(s.sizes, len(encoded))
	s.mu.Unlock()
	out, err := s.Decode(ctx, spec, encoded)
	if err != nil {
		return nil, err
	}
	for i := range out {
		if sel[i].Whole() {
			continue
		}
		n, err := codec.CheckSelection(sel[i], spec.Shape, spec.DataType.Size)
		if err != nil {
			return nil, &codec.ItemError{Index: i, Err: err}
		}
		buf := make([]byte, n)
		codec.Pack(buf, out[i].Data, spec.Shape, spec.DataType.Size, sel[i])
		out[i].Release()
		out[i] = codec.Chunk{Data: buf}
	}
	return out, nil
}

// TestSharedSelectedReads: beside another call, a partial read decoded
// with selections takes the slots like any decode when the engine runs in
// process (a chunk per slot, one at a time on two processors), while an
// engine on codec workers (Remote) gets whole batches; both read right.
func TestSharedSelectedReads(t *testing.T) {
	here := &selectHere{peakEngine: &peakEngine{Engine: codecsvc.NewLocal()}}
	remote := &selecting{Client: codecWorker(t, false)}
	for _, c := range []struct {
		name string
		e    Codecs
	}{{"in process", here}, {"codec workers", remote}} {
		t.Run(c.name, func(t *testing.T) {
			g := New(memory.New(), c.e, Config{Parallelism: 8})
			g.sched.procs = 2
			if _, err := g.CreateArray(ctx, "a", ArraySpec{Shape: []int64{256, 256}, DataType: "uint8", ChunkShape: []int64{4, 256}, Codecs: json.RawMessage(zstdBytes)}); err != nil {
				t.Fatal(err)
			}
			data := make([]byte, 256*256)
			for i := range data {
				data[i] = byte(i * 7 / 5)
			}
			if _, err := g.WriteSlab(ctx, "a", nil, nextFrom([]Block{{Origin: []int64{0, 0}, Shape: []int64{256, 256}, Data: data}})); err != nil {
				t.Fatal(err)
			}
			// The other call, held in its emit.
			inEmit, release := make(chan struct{}), make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				err := g.ReadSlab(ctx, "a", []zarr.Range{{Start: 0, Stop: 1, Step: 1}, {Start: 0, Stop: 1, Step: 1}}, func(SlabInfo) error { return nil }, func(Block) error {
					close(inEmit)
					<-release
					return nil
				})
				if err != nil {
					t.Error(err)
				}
			})
			defer func() { close(release); wg.Wait() }()
			<-inEmit
			here.peak.Store(0)
			here.sizes = nil
			remote.batches.Store(0)
			remote.parts.Store(0)
			// Every other column: each of the 64 chunks read in part.
			got := make([]byte, 256*128)
			err := g.ReadSlab(ctx, "a", []zarr.Range{{Start: 0, Stop: 256, Step: 1}, {Start: 1, Stop: 256, Step: 2}}, func(SlabInfo) error { return nil }, func(b Block) error {
				for r := range b.Shape[0] {
					copy(got[(b.Origin[0]+r)*128+b.Origin[1]:], b.Data[r*b.Shape[1]:(r+1)*b.Shape[1]])
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for r := range 256 {
				for k := range 128 {
					if got[r*128+k] != data[r*256+1+2*k] {
						t.Fatalf("element (%d, %d): %d, want %d", r, k, got[r*128+k], data[r*256+1+2*k])
					}
				}
			}
			if c.e == here {
				if len(here.sizes) != 64 || slices.Max(here.sizes) != 1 {
					t.Errorf("in process, beside another call: selected batches of %v chunks, want 64 of 1", here.sizes)
				}
				if p := here.peak.Load(); p != 1 {
					t.Errorf("in process, beside another call: %d decode batches at once on 2 processors, want 1", p)
				}
			} else if b, p := remote.batches.Load(), remote.parts.Load(); p != 64 || b != 8 {
				t.Errorf("on codec workers, beside another call: %d chunks read in part in %d batches, want 64 in 8", p, b)
			}
		})
	}
}

// TestSchedulerNext: between two chunks a worker keeps its slot while no
// call without workers is in progress; while one is, it gives the slot
// back and waits, as acquire does, until that call ends (fairYield is an
// hour here).
func TestSchedulerNext(t *testing.T) {
	defer func(y time.Duration) { fairYield = y }(fairYield)
	fairYield = time.Hour
	s := &scheduler{procs: 2, parallelism: 8}
	big := s.begin(true)
	defer big.end()
	other := s.begin(true) // sharing: one slot each
	defer other.end()
	if _, err := big.acquire(ctx); err != nil {
		t.Fatal(err)
	}
	release, err := big.next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	running, waiting := big.running, s.waiting
	s.mu.Unlock()
	if running != 1 || waiting != 0 {
		t.Fatalf("next with no call without workers: %d slots held, %d waiting; want 1 held, none waiting", running, waiting)
	}
	small := s.begin(false)
	got := make(chan error, 1)
	go func() {
		r, err := big.next(ctx)
		if err == nil {
			release = r
		}
		got <- err
	}()
	for waiting == 0 {
		select {
		case <-got:
			t.Fatal("next kept its slot while a call without workers was in progress")
		default:
		}
		runtime.Gosched()
		s.mu.Lock()
		running, waiting = big.running, s.waiting
		s.mu.Unlock()
	}
	if running != 0 {
		t.Errorf("waiting in next, the call holds %d slots, want 0", running)
	}
	small.end()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	release()
	s.mu.Lock()
	running = big.running
	s.mu.Unlock()
	if running != 0 {
		t.Errorf("after the last release, %d slots held", running)
	}
	// A cancelled wait holds nothing.
	if _, err := big.acquire(ctx); err != nil {
		t.Fatal(err)
	}
	small = s.begin(false)
	defer small.end()
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := big.next(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("next on a cancelled context: %v", err)
	}
	s.mu.Lock()
	running = big.running
	s.mu.Unlock()
	if running != 0 {
		t.Errorf("after a cancelled next, %d slots held, want 0", running)
	}
}

// unitCounter counts the units of chunk work running at once on the
// gateway's processors: store reads (from Get to the object's Close),
// decodes and placements, and the most at once.
type unitCounter struct{ now, peak atomic.Int64 }

func (u *unitCounter) enter() func() {
	n := u.now.Add(1)
	for p := u.peak.Load(); n > p && !u.peak.CompareAndSwap(p, n); p = u.peak.Load() {
	}
	time.Sleep(200 * time.Microsecond) // long enough for units to overlap where they may
	return func() { u.now.Add(-1) }
}

// unitStore is a store read in this process (LocalReads) whose reads
// count as units.
type unitStore struct {
	storesvc.Store
	u     *unitCounter
	local bool
}

func (s *unitStore) LocalReads() bool { return s.local }

func (s *unitStore) Get(ctx context.Context, key string, r storesvc.ByteRange) (*storesvc.Object, error) {
	exit := s.u.enter()
	obj, err := s.Store.Get(ctx, key, r)
	if err != nil {
		exit()
		return nil, err
	}
	obj.ReadCloser = &unitReader{ReadCloser: obj.ReadCloser, exit: exit}
	return obj, nil
}

type unitReader struct {
	io.ReadCloser
	exit func()
	once sync.Once
}

func (r *unitReader) Close() error {
	r.once.Do(r.exit)
	return r.ReadCloser.Close()
}

// countingEngine is the in-process engine whose decodes count as units.
type countingEngine struct {
	codec.Engine
	u *unitCounter
}

func (e *countingEngine) Decode(ctx context.Context, spec *codec.BatchSpec, encoded [][]byte) ([]codec.Chunk, error) {
	defer e.u.enter()()
	return e.Engine.Decode(ctx, spec, encoded)
}

// countingSink places blocks as they are (in the caller's memory),
// counting each placement as a unit, and gives whole raw chunks buffers
// to be read into (direct reads: their store read is their unit).
type countingSink struct{ u *unitCounter }

func (s countingSink) Place(ctx context.Context, b Block, push func(Block) error) error {
	if b.Placed { // read straight into its place
		return push(b)
	}
	exit := s.u.enter()
	err := push(b)
	exit()
	return err
}

func (countingSink) Alloc(_ context.Context, n int64) ([]byte, func(*Block), error) {
	return make([]byte, n), func(b *Block) { b.Placed = true }, nil
}

// TestSharedFetchesTakeSlots: beside a call without workers, a 64-chunk
// read with 8 workers, from a store read in this process, runs one unit of
// chunk work at a time on a gateway of two processors (its share: one
// slot), its store reads as well as its decodes and placements, and reads
// right: zstd chunks, whole raw chunks read straight into the sink's
// memory, raw chunks read in part, the inner chunks (and indexes) of
// shards. A store that waits elsewhere
// (LocalReads false) is not counted as the gateway's work; its read is
// right too.
func TestSharedFetchesTakeSlots(t *testing.T) {
	u := &unitCounter{}
	for _, c := range []struct {
		name   string
		local  bool
		codecs string
		step   int64 // every step-th row read
	}{
		{"local store, zstd", true, zstdBytes, 1},
		{"local store, raw chunks read straight into place", true, `[{"name":"bytes"}]`, 1},
		{"local store, raw chunks read in part", true, `[{"name":"bytes"}]`, 4},
		{"local store, sharded (4 inner chunks of 4×64 a shard), zstd", true, `[{"name":"sharding_indexed","configuration":{"chunk_shape":[4,64],"codecs":[{"name":"bytes"},{"name":"zstd","configuration":{"level":3}}],"index_codecs":[{"name":"bytes","configuration":{"endian":"little"}}],"index_location":"end"}}]`, 1},
		{"store elsewhere, zstd", false, zstdBytes, 1},
	} {
		t.Log(c.name)
		local := c.local
		st := &unitStore{Store: memory.New(), u: u, local: local}
		g := New(st, &countingEngine{Engine: codecsvc.NewLocal(), u: u}, Config{Parallelism: 8})
		g.sched.procs = 2
		if g.localReads != local {
			t.Fatalf("a store whose LocalReads says %v: the gateway's localReads %v", local, g.localReads)
		}
		if _, err := g.CreateArray(ctx, "a", ArraySpec{Shape: []int64{256, 256}, DataType: "uint8", ChunkShape: []int64{4, 256}, Codecs: json.RawMessage(c.codecs)}); err != nil {
			t.Fatal(err)
		}
		data := make([]byte, 256*256)
		for i := range data {
			data[i] = byte(i * 7 / 5)
		}
		if _, err := g.WriteSlab(ctx, "a", nil, nextFrom([]Block{{Origin: []int64{0, 0}, Shape: []int64{256, 256}, Data: data}})); err != nil {
			t.Fatal(err)
		}
		var want []byte
		for r := int64(0); r < 256; r += c.step {
			want = append(want, data[r*256:(r+1)*256]...)
		}
		read := func() []byte {
			got := make([]byte, len(want))
			sel := []zarr.Range{{Start: 0, Stop: 256, Step: c.step}, {Start: 0, Stop: 256, Step: 1}}
			err := g.ReadSlabTo(ctx, "a", sel, func(SlabInfo) error { return nil }, countingSink{u}, func(b Block) error {
				for r := range b.Shape[0] {
					copy(got[(b.Origin[0]+r)*256+b.Origin[1]:], b.Data[r*b.Shape[1]:(r+1)*b.Shape[1]])
				}
				b.free()
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			return got
		}
		if !local {
			// Alone or not, with a store elsewhere the fetches are as
			// before: the count only shows they ran; the shares of the
			// decodes are TestReadSharesProcessors's.
			if string(read()) != string(want) {
				t.Fatal("the slab read differs from what was written")
			}
			continue
		}
		// The other call: a one-chunk read held in its emit.
		inEmit, release := make(chan struct{}), make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			err := g.ReadSlab(ctx, "a", []zarr.Range{{Start: 0, Stop: 1, Step: 1}, {Start: 0, Stop: 1, Step: 1}}, func(SlabInfo) error { return nil }, func(Block) error {
				close(inEmit)
				<-release
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		})
		<-inEmit
		u.peak.Store(0)
		if string(read()) != string(want) {
			t.Fatalf("%s: the slab read beside another call differs from what was written", c.name)
		}
		if p := u.peak.Load(); p != 1 {
			t.Errorf("%s: beside a call without workers, %d units of chunk work (store reads, decodes, placements) ran at once on 2 processors, want 1", c.name, p)
		}
		close(release)
		wg.Wait()
	}
}
