package blosc

import (
	"fmt"
	"syscall"
	"testing"
	"time"
)

// Benchmarks run on 4 MiB of a smooth float32 signal:
//
//	go test -run '^$' -bench . -benchtime 2s -cpu 1 ./codecsvc/blosc/
//
// cpu-MB/s is bytes per second of process CPU time: with -cpu 1, the
// benchmark's own, meaningful on a shared machine.

var benchCases = []struct {
	cname string
	sh    Shuffle
}{
	{"lz4", ByteShuffle},
	{"zstd", ByteShuffle},
	{"zlib", ByteShuffle},
	{"blosclz", ByteShuffle},
	{"lz4", BitShuffle},
	{"lz4", NoShuffle},
}

func benchName(cname string, sh Shuffle) string {
	return fmt.Sprintf("%s/%s", cname, [...]string{"noshuffle", "shuffle", "bitshuffle"}[sh])
}

func BenchmarkCompress(b *testing.B) {
	in := smoothFloat32(4 << 20)
	for _, c := range benchCases {
		b.Run(benchName(c.cname, c.sh), func(b *testing.B) {
			o := Options{Cname: c.cname, Clevel: 5, Shuffle: c.sh, Typesize: 4}
			b.SetBytes(int64(len(in)))
			var frame []byte
			cpu0 := cpuTime(b)
			for b.Loop() {
				var err error
				if frame, err = Compress(in, o); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, cpu0, len(in))
			b.ReportMetric(float64(len(in))/float64(len(frame)), "ratio")
		})
	}
}

func BenchmarkDecompress(b *testing.B) {
	in := smoothFloat32(4 << 20)
	for _, c := range benchCases {
		b.Run(benchName(c.cname, c.sh), func(b *testing.B) {
			frame, err := Compress(in, Options{Cname: c.cname, Clevel: 5, Shuffle: c.sh, Typesize: 4})
			if err != nil {
				b.Fatal(err)
			}
			dst := make([]byte, len(in))
			b.SetBytes(int64(len(in)))
			cpu0 := cpuTime(b)
			for b.Loop() {
				if _, err := DecompressInto(dst, frame); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, cpu0, len(in))
		})
	}
}

func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportCPU(b *testing.B, cpu0 time.Duration, n int) {
	if d := cpuTime(b) - cpu0; d > 0 {
		b.ReportMetric(float64(n)*float64(b.N)/d.Seconds()/1e6, "cpu-MB/s")
	}
}
