package client_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/client"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/bulk"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/memory"
)

// smallArray writes a 300 × 300 float32 array (100 × 100 chunks) holding
// 0, 1, 2, … through c and returns it and its values.
func smallArray(t *testing.T, c *client.Client, path string) (*client.Array, []float32) {
	t.Helper()
	ctx := context.Background()
	a, err := c.CreateArray(ctx, path, client.ArraySpec{Shape: []int64{300, 300}, DataType: "float32", ChunkShape: []int64{100, 100}})
	if err != nil {
		t.Fatal(err)
	}
	v := make([]float32, 300*300)
	for i := range v {
		v[i] = float32(i)
	}
	if _, err := client.Write(ctx, a, nil, v); err != nil {
		t.Fatal(err)
	}
	return a, v
}

// readWindows reads n random windows of up to 40 × 40 of a into place and
// checks each against want.
func readWindows(t *testing.T, a *client.Array, want []float32, seed uint64, n int) {
	r := rand.New(rand.NewPCG(seed, 1))
	for range n {
		y, x := r.Int64N(260), r.Int64N(260)
		h, w := 1+r.Int64N(40), 1+r.Int64N(40)
		sel := client.Selection{{Start: y, Stop: y + h, Step: 1}, {Start: x, Stop: x + w, Step: 1}}
		got := make([]float32, h*w)
		if err := client.ReadInto(context.Background(), a, sel, got); err != nil {
			t.Error(err)
			return
		}
		for i := range h {
			row := want[(y+i)*300+x : (y+i)*300+x+w]
			if !slices.Equal(got[i*w:(i+1)*w], row) {
				t.Errorf("window %v row %d: %v…, want %v…", sel, i, got[i*w], row[0])
				return
			}
		}
	}
}

// TestSmallReadsConnection: small reads, one after another and from
// several goroutines at once, go over small-reads connections (no
// ReadSlabSmall gRPC call), kept and reused: as many as reads ran at
// once, not one per read. Their values are right, and a failed read's
// status comes through as the call's would, the connection kept.
func TestSmallReadsConnection(t *testing.T) {
	s := newBulkServer(t, nil, bulk.Config{}, nil)
	c := dialT(t, s.addr, client.WithSharedMemory(false))
	a, want := smallArray(t, c, "s")
	readWindows(t, a, want, 1, 200)
	if n := s.opened.Load(); n != 1 {
		t.Errorf("%d small-reads connections opened for 200 reads one after another, want 1", n)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() { readWindows(t, a, want, uint64(10+g), 100) })
	}
	wg.Wait()
	if n := s.opened.Load(); n < 1 || n > 5 {
		t.Errorf("%d small-reads connections opened for 4 goroutines' reads, want 1 to 5", n)
	}
	if n := s.calls.Load(); n != 0 {
		t.Errorf("%d ReadSlabSmall gRPC calls, want none (all over small-reads connections)", n)
	}
	opened := s.opened.Load()
	// A read that fails: its status, over the same connection.
	gone, err := c.OpenArray(context.Background(), "s")
	if err != nil {
		t.Fatal(err)
	}
	gone.Path = "nothing/here"
	err = client.ReadInto(context.Background(), gone, client.MustParseSelection("0:2,0:2"), make([]float32, 4))
	if !errors.Is(err, errs.NotFound) {
		t.Errorf("read of a missing array: %v, want NotFound", err)
	}
	// A deadline already past.
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	time.Sleep(time.Millisecond)
	if err := client.ReadInto(ctx, a, client.MustParseSelection("0:2,0:2"), make([]float32, 4)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("read past its deadline: %v, want DeadlineExceeded", err)
	}
	readWindows(t, a, want, 2, 10)
	if s.opened.Load() != opened || s.calls.Load() != 0 {
		t.Errorf("after failed reads: %d more connections opened, %d gRPC calls; want the connection reused", s.opened.Load()-opened, s.calls.Load())
	}
}

// TestSmallReadsDrain: a server that begins to shut down closes its idle
// small-reads connections and opens no more; the client's reads go on,
// right, as ReadSlabSmall calls.
func TestSmallReadsDrain(t *testing.T) {
	s := newBulkServer(t, nil, bulk.Config{}, nil)
	c := dialT(t, s.addr, client.WithSharedMemory(false))
	a, want := smallArray(t, c, "d")
	readWindows(t, a, want, 1, 20)
	if s.opened.Load() != 1 || s.calls.Load() != 0 {
		t.Fatalf("%d connections opened, %d gRPC calls; want 1 and 0", s.opened.Load(), s.calls.Load())
	}
	done := make(chan bool)
	go func() { done <- s.srv.Shutdown(3*time.Second, 5*time.Second, nil) }()
	s.idle(t) // the drain closed the idle connection
	readWindows(t, a, want, 2, 20)
	if n := s.calls.Load(); n != 20 {
		t.Errorf("%d ReadSlabSmall gRPC calls while the server drains, want 20", n)
	}
	if n := s.bulk.Open(); n != 0 {
		t.Errorf("%d bulk connections open while the server drains", n)
	}
	<-done
}

// TestSmallReadsWithoutListener: a gateway without a bulk listener
// refuses OpenSmallReads; the client asks once, then reads with
// ReadSlabSmall calls.
func TestSmallReadsWithoutListener(t *testing.T) {
	lisless := newPlainServer(t)
	c := dialT(t, lisless.addr, client.WithSharedMemory(false))
	a, want := smallArray(t, c, "n")
	readWindows(t, a, want, 1, 10)
	if n := lisless.opened.Load(); n != 1 {
		t.Errorf("OpenSmallReads asked %d times, want once", n)
	}
	if n := lisless.calls.Load(); n != 10 {
		t.Errorf("%d ReadSlabSmall calls for 10 reads", n)
	}
}

// TestSmallReadsConnectionCap: a client reading from many goroutines at
// once keeps at most its cap of small-reads connections open (8 on up to
// 2 processors) and makes the reads beyond them as calls, all right.
func TestSmallReadsConnectionCap(t *testing.T) {
	s := newBulkServer(t, nil, bulk.Config{}, nil)
	c := dialT(t, s.addr, client.WithSharedMemory(false))
	a, want := smallArray(t, c, "c")
	limit := max(8, 4*runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for g := range 40 {
		wg.Go(func() { readWindows(t, a, want, uint64(100+g), 30) })
	}
	wg.Wait()
	// The client's own count: the gateway closes a connection the client
	// let go of a moment later, so its count may run a little ahead.
	if n := client.SmallConnsMost(c); n < 2 || n > limit {
		t.Errorf("at most %d small-reads connections open at once for 40 goroutines, want 2 to %d", n, limit)
	}
	if s.calls.Load() == 0 {
		t.Error("no read was made as a call: the reads beyond the cap waited for a connection instead")
	}
}

// BenchmarkSmallReadClient reads random 64 × 64 windows of a zstd
// float32 array (1024², 256² chunks, an in-memory store) with ReadInto,
// the gateway in this process: over a small-reads connection (conn) or
// as ReadSlabSmall calls (call, WithBulk(false)); latency and the
// process's CPU per read (client and gateway).
//
//	go test -run '^$' -bench SmallReadClient -benchtime 3000x -count 3 ./client/
func BenchmarkSmallReadClient(b *testing.B) {
	ctx := context.Background()
	s := newBulkServer(b, nil, bulk.Config{}, nil)
	setup, err := client.Dial(ctx, s.addr)
	if err != nil {
		b.Fatal(err)
	}
	defer setup.Close()
	const n = 1024
	benchArray(b, setup, "bench-small", n)
	for _, mode := range []struct {
		name string
		bulk bool
	}{{"conn", true}, {"call", false}} {
		c, err := client.Dial(ctx, s.addr, client.WithSharedMemory(false), client.WithBulk(mode.bulk))
		if err != nil {
			b.Fatal(err)
		}
		ca, err := c.OpenArray(ctx, "bench-small")
		if err != nil {
			b.Fatal(err)
		}
		b.Run(mode.name, func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 2))
			got := make([]float32, 64*64)
			cpu0 := cpuTime()
			for b.Loop() {
				y, x := r.Int64N(n-64), r.Int64N(n-64)
				if err := client.ReadInto(ctx, ca, client.Selection{{Start: y, Stop: y + 64, Step: 1}, {Start: x, Stop: x + 64, Step: 1}}, got); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
		c.Close()
	}
}

// downStore fails every read of a chunk with Unavailable while down, as a
// store tier that went away does.
type downStore struct {
	storesvc.Store
	down atomic.Bool
}

func (d *downStore) Get(ctx context.Context, key string, r storesvc.ByteRange) (*storesvc.Object, error) {
	if d.down.Load() && strings.Contains(key, "/c/") {
		return nil, errs.New(errs.Unavailable, "the store is down")
	}
	return d.Store.Get(ctx, key, r)
}

// TestSmallReadsUnavailableAsCall: a small read the gateway answers
// UNAVAILABLE over a connection is made again as a ReadSlabSmall call
// (which the client's retry policy covers), and the connection is kept
// for the next reads.
func TestSmallReadsUnavailableAsCall(t *testing.T) {
	ds := &downStore{Store: memory.New()}
	s := newCountingServer(t, nil, &bulk.Config{}, nil, ds)
	c := dialT(t, s.addr, client.WithSharedMemory(false))
	a, want := smallArray(t, c, "u")
	readWindows(t, a, want, 1, 5)
	if s.opened.Load() != 1 || s.calls.Load() != 0 {
		t.Fatalf("%d connections, %d calls; want 1 and 0", s.opened.Load(), s.calls.Load())
	}
	ds.down.Store(true)
	err := client.ReadInto(context.Background(), a, client.MustParseSelection("0:2,0:2"), make([]float32, 4))
	if !errors.Is(err, errs.Unavailable) {
		t.Errorf("a read with the store down: %v, want Unavailable", err)
	}
	if s.calls.Load() == 0 {
		t.Error("the read answered UNAVAILABLE over the connection was not made again as a call")
	}
	ds.down.Store(false)
	calls := s.calls.Load()
	readWindows(t, a, want, 2, 5)
	if s.opened.Load() != 1 || s.calls.Load() != calls {
		t.Errorf("after the store came back: %d connections opened, %d more calls; want the connection reused", s.opened.Load(), s.calls.Load()-calls)
	}
}
