package s3_test

import (
	"bytes"
	"fmt"
	"io"
	"testing"

	"golang.org/x/sync/errgroup"

	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/file"
	"github.com/zarrgate/zarrgate/storesvc/s3/s3test"
)

// The benchmarks time one batch of 1000 GETs, 16 at a time, against the
// local versitygw and, for comparison, the file store on the same disk:
//
//	go test -run '^$' -bench . -benchtime 3x ./storesvc/s3/
//
// Values are spread over 64 keys (1 MiB each), so the batch reads 1000 MiB
// for the whole-value GETs and 4 KiB ranges at varying offsets otherwise.
const (
	benchGets     = 1000
	benchParallel = 16
	benchKeys     = 64
	benchValue    = 1 << 20
	benchRange    = 4 << 10
)

func benchStore(b *testing.B, s storesvc.Store) *storesvc.Portable {
	p := storesvc.Wrap(s)
	v := bytes.Repeat([]byte("zarrgate"), benchValue/8)
	for i := range benchKeys {
		if _, err := p.Set(ctx, fmt.Sprintf("c/%d", i), bytes.NewReader(v), storesvc.Condition{}); err != nil {
			b.Fatal(err)
		}
	}
	return p
}

func benchGet(b *testing.B, s *storesvc.Portable, ranged bool) {
	per := int64(benchValue)
	if ranged {
		per = benchRange
	}
	b.SetBytes(per * benchGets)
	b.ResetTimer()
	for b.Loop() {
		var g errgroup.Group
		g.SetLimit(benchParallel)
		for i := range benchGets {
			g.Go(func() error {
				r := storesvc.ByteRange{}
				if ranged {
					r = storesvc.Bounded(int64(i*4099)%(benchValue-benchRange), benchRange)
				}
				obj, err := s.Get(ctx, fmt.Sprintf("c/%d", i%benchKeys), r)
				if err != nil {
					return err
				}
				defer obj.Close()
				n, err := io.Copy(io.Discard, obj)
				if err == nil && n != per {
					err = fmt.Errorf("read %d bytes", n)
				}
				return err
			})
		}
		if err := g.Wait(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*benchGets), "µs/get")
}

func s3Bench(b *testing.B) *storesvc.Portable { return benchStore(b, s3test.NewStore(b, "bench")) }

func fileBench(b *testing.B) *storesvc.Portable {
	s, err := file.New(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	return benchStore(b, s)
}

func BenchmarkS3Get1MiB(b *testing.B)        { benchGet(b, s3Bench(b), false) }
func BenchmarkFileGet1MiB(b *testing.B)      { benchGet(b, fileBench(b), false) }
func BenchmarkS3GetRange4KiB(b *testing.B)   { benchGet(b, s3Bench(b), true) }
func BenchmarkFileGetRange4KiB(b *testing.B) { benchGet(b, fileBench(b), true) }

// GetPartialValues: the same 1000 ranges in one call (the store's bounded
// parallel ranged GETs).
func BenchmarkS3GetPartialValues4KiB(b *testing.B) {
	s := s3Bench(b)
	reqs := make([]storesvc.KeyRange, benchGets)
	for i := range reqs {
		reqs[i] = storesvc.KeyRange{Key: fmt.Sprintf("c/%d", i%benchKeys), Range: storesvc.Bounded(int64(i*4099)%(benchValue-benchRange), benchRange)}
	}
	b.SetBytes(benchRange * benchGets)
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.GetPartialValues(ctx, reqs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*benchGets), "µs/get")
}
