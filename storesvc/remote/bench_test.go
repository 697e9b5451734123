package remote_test

import (
	"bytes"
	"context"
	"io"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/file"
)

// benchTargets returns the file store directly and the same directory served
// over loopback gRPC, side by side.
func benchTargets(b *testing.B) []struct {
	name string
	s    storesvc.Store
} {
	fs, err := file.New(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { fs.Close() })
	return []struct {
		name string
		s    storesvc.Store
	}{{"file", storesvc.Wrap(fs)}, {"remote", serve(b, fs)}}
}

var sizes = []struct {
	name string
	n    int
}{{"1MiB", 1 << 20}, {"64MiB", 64 << 20}}

func BenchmarkGet(b *testing.B) {
	ctx := context.Background()
	for _, tgt := range benchTargets(b) {
		for _, sz := range sizes {
			key := "v/" + sz.name
			if _, err := tgt.s.Set(ctx, key, bytes.NewReader(make([]byte, sz.n)), storesvc.Condition{}); err != nil {
				b.Fatal(err)
			}
			b.Run(tgt.name+"/"+sz.name, func(b *testing.B) {
				buf := make([]byte, 1<<20)
				b.SetBytes(int64(sz.n))
				for b.Loop() {
					obj, err := tgt.s.Get(ctx, key, storesvc.ByteRange{})
					if err != nil {
						b.Fatal(err)
					}
					if _, err := io.CopyBuffer(io.Discard, onlyReader{obj}, buf); err != nil {
						b.Fatal(err)
					}
					obj.Close()
				}
			})
		}
	}
}

// onlyReader hides WriterTo/ReaderFrom so CopyBuffer uses our buffer.
type onlyReader struct{ io.Reader }

func BenchmarkSet(b *testing.B) {
	ctx := context.Background()
	for _, tgt := range benchTargets(b) {
		for _, sz := range sizes {
			data := make([]byte, sz.n)
			b.Run(tgt.name+"/"+sz.name, func(b *testing.B) {
				b.SetBytes(int64(sz.n))
				for b.Loop() {
					if _, err := tgt.s.Set(ctx, "v/set", bytes.NewReader(data), storesvc.Condition{}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkGetPartialValues reads 1000 × 4 KiB ranges of one 8 MiB value
// (a shard) in one call.
func BenchmarkGetPartialValues(b *testing.B) {
	ctx := context.Background()
	reqs := make([]storesvc.KeyRange, 1000)
	for i := range reqs {
		reqs[i] = storesvc.KeyRange{Key: "shard", Range: storesvc.Bounded(int64(i)*8192, 4096)}
	}
	for _, tgt := range benchTargets(b) {
		if _, err := tgt.s.Set(ctx, "shard", bytes.NewReader(make([]byte, 8<<20)), storesvc.Condition{}); err != nil {
			b.Fatal(err)
		}
		b.Run(tgt.name+"/1000x4KiB", func(b *testing.B) {
			b.SetBytes(1000 * 4096)
			for b.Loop() {
				if _, err := tgt.s.(storesvc.PartialReader).GetPartialValues(ctx, reqs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkStream256MiB streams one 256 MiB value out of each target and
// reports the peak growth of the Go heap (server and client together, as
// both run in this process) while it streams: the bound for the
// server is 32 MiB.
func BenchmarkStream256MiB(b *testing.B) {
	const size = 256 << 20
	ctx := context.Background()
	for _, tgt := range benchTargets(b) {
		if _, err := tgt.s.Set(ctx, "big", io.LimitReader(zeros{}, size), storesvc.Condition{}); err != nil {
			b.Fatal(err)
		}
		b.Run(tgt.name, func(b *testing.B) {
			buf := make([]byte, 1<<20)
			b.SetBytes(size)
			var peak atomic.Uint64
			runtime.GC()
			base := heapBytes()
			stop := sampleHeap(&peak)
			for b.Loop() {
				obj, err := tgt.s.Get(ctx, "big", storesvc.ByteRange{})
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.CopyBuffer(io.Discard, onlyReader{obj}, buf)
				if err != nil || n != size {
					b.Fatalf("read %d bytes: %v", n, err)
				}
				obj.Close()
			}
			stop()
			growth := float64(0)
			if p := peak.Load(); p > base {
				growth = float64(p-base) / (1 << 20)
			}
			b.ReportMetric(growth, "peak-heap-growth-MiB")
		})
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func heapBytes() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func sampleHeap(peak *atomic.Uint64) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if h := heapBytes(); h > peak.Load() {
					peak.Store(h)
				}
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}
