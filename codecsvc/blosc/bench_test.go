package blosc

import (
	"fmt"
	"testing"
)

// Benchmarks run on 4 MiB of a smooth float32 signal:
//
//	go test -run '^$' -bench . -benchtime 2s ./codecsvc/blosc/

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
			for b.Loop() {
				var err error
				if frame, err = Compress(in, o); err != nil {
					b.Fatal(err)
				}
			}
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
			for b.Loop() {
				if _, err := DecompressInto(dst, frame); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
