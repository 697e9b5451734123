package codecsvc

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/zarr"
)

// benchData is 4 MiB of float32 that bench/numcodecs_bench.py reproduces
// exactly: x[i] = float32(sin(i*0.001)*1000 + i%7).
func benchData() []byte {
	const n = 1 << 20
	b := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(math.Sin(float64(i)*0.001)*1000+float64(i%7))))
	}
	return b
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var r syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &r)
	return time.Duration(r.Utime.Nano() + r.Stime.Nano())
}

// loopCPU runs f in b.Loop and reports MB/s per CPU second ("cpuMB/s"),
// which a shared machine disturbs less than wall time.
func loopCPU(b *testing.B, bytes int, f func()) {
	b.SetBytes(int64(bytes))
	t0, n := cpuTime(), 0
	for b.Loop() {
		f()
		n++
	}
	if d := cpuTime() - t0; d > 0 {
		b.ReportMetric(float64(bytes)*float64(n)/d.Seconds()/1e6, "cpuMB/s")
	}
}

// benchChains are the chains bench/numcodecs_bench.py runs in numcodecs.
var benchChains = []struct{ name, codecs string }{
	{"zstd", `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":3}}]`},
	{"gzip", `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"gzip","configuration":{"level":5}}]`},
	{"blosc-lz4", `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"blosc","configuration":{"cname":"lz4","clevel":5,"shuffle":"shuffle","typesize":4,"blocksize":0}}]`},
	{"chain", `[{"name":"bytes","configuration":{"endian":"big"}},{"name":"zstd","configuration":{"level":3}},{"name":"crc32c"}]`},
}

// BenchmarkCodecs measures MB/s (decoded bytes) per core: run it with
// -cpu 1 to compare with numcodecs at one thread.
//
//	go test -run '^$' -bench Codecs -cpu 1 ./codecsvc/
func BenchmarkCodecs(b *testing.B) {
	data := benchData()
	spec := ChunkSpec{Shape: []int{1 << 20}, DataType: zarr.MustDataType("float32")}
	for _, c := range benchChains {
		ch := chain(b, c.codecs, spec)
		enc, err := ch.Encode(Chunk{Data: data})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name+"/encode", func(b *testing.B) {
			loopCPU(b, len(data), func() {
				if _, err := ch.Encode(Chunk{Data: data}); err != nil {
					b.Fatal(err)
				}
			})
		})
		b.Run(c.name+"/decode", func(b *testing.B) {
			loopCPU(b, len(data), func() {
				out, err := ch.Decode(enc)
				if err != nil {
					b.Fatal(err)
				}
				out.Release() // as the servers do once the chunk is sent
			})
			b.ReportMetric(float64(len(data))/float64(len(enc)), "ratio")
		})
	}
}

// BenchmarkDecodeNumcodecsFrames decodes the bytes numcodecs encoded
// (bench/numcodecs_bench.py FRAMES_DIR), so both sides decode identical
// input. It needs $ZARRGATE_NUMCODECS_FRAMES.
//
//	python bench/numcodecs_bench.py /tmp/frames
//	ZARRGATE_NUMCODECS_FRAMES=/tmp/frames go test -run '^$' -bench NumcodecsFrames -cpu 1 ./codecsvc/
func BenchmarkDecodeNumcodecsFrames(b *testing.B) {
	dir := os.Getenv("ZARRGATE_NUMCODECS_FRAMES")
	if dir == "" {
		b.Skip("set ZARRGATE_NUMCODECS_FRAMES (see bench/numcodecs_bench.py)")
	}
	data := benchData()
	spec := ChunkSpec{Shape: []int{1 << 20}, DataType: zarr.MustDataType("float32")}
	for _, c := range benchChains {
		enc, err := os.ReadFile(filepath.Join(dir, c.name+".bin"))
		if err != nil {
			b.Fatal(err)
		}
		ch := chain(b, c.codecs, spec)
		out, err := ch.Decode(enc)
		if err != nil || !bytes.Equal(out.Data, data) {
			b.Fatalf("%s: numcodecs' frame does not decode to the data: %v", c.name, err)
		}
		b.Run(c.name, func(b *testing.B) {
			loopCPU(b, len(data), func() {
				out, err := ch.Decode(enc)
				if err != nil {
					b.Fatal(err)
				}
				out.Release() // as the servers do once the chunk is sent
			})
		})
	}
}

// BenchmarkSharding measures a 1024x1024 float32 shard (4 MiB) of 16
// zstd inner chunks, whole, and one inner chunk through the partial path
// (MB/s of that inner chunk).
//
//	go test -run '^$' -bench Sharding -cpu 1 ./codecsvc/
func BenchmarkSharding(b *testing.B) {
	data := benchData()
	spec := ChunkSpec{Shape: []int{1024, 1024}, DataType: zarr.MustDataType("float32")}
	ch := chain(b, `[{"name":"sharding_indexed","configuration":{"chunk_shape":[256,256],
		"codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":3}}],
		"index_codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}]}}]`, spec)
	enc, err := ch.Encode(Chunk{Data: data})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("encode", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if _, err := ch.Encode(Chunk{Data: data}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if _, err := ch.Decode(enc); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(data))/float64(len(enc)), "ratio")
	})
	s := ch.Shard()
	b.Run("decode-one-inner", func(b *testing.B) {
		b.SetBytes(s.InnerSpec().Bytes())
		for b.Loop() {
			x, err := s.DecodeIndex(fetch(enc, codec.IndexRange(s)))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.DecodeInner(x[5], fetch(enc, x[5].Range())); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkLevels encodes benchData at each zstd and gzip level: cpuMB/s
// and ratio per level, for the level table of docs/benchmarks.md
// (bench/numcodecs_levels.py measures numcodecs the same way).
//
//	go test -run '^$' -bench Levels -cpu 1 -benchtime 3x ./codecsvc/
func BenchmarkLevels(b *testing.B) {
	data := benchData()
	spec := ChunkSpec{Shape: []int{1 << 20}, DataType: zarr.MustDataType("float32")}
	run := func(name string, level int) {
		ch := chain(b, fmt.Sprintf(`[{"name":"bytes","configuration":{"endian":"little"}},{"name":%q,"configuration":{"level":%d}}]`, name, level), spec)
		b.Run(fmt.Sprintf("%s/%d", name, level), func(b *testing.B) {
			var n int
			loopCPU(b, len(data), func() {
				enc, err := ch.Encode(Chunk{Data: data})
				if err != nil {
					b.Fatal(err)
				}
				n = len(enc)
			})
			b.ReportMetric(float64(len(data))/float64(n), "ratio")
		})
	}
	for _, l := range []int{-1, 1, 2, 3, 4, 5, 6, 7, 9, 12, 15, 16, 19, 22} {
		run("zstd", l)
	}
	for l := 1; l <= 9; l++ {
		run("gzip", l)
	}
}

// costChains are the codecs of remote.DefaultCosts, each after a
// little-endian bytes codec (which decodes by aliasing: free), on
// benchData as a 1024 × 1024 chunk.
var costChains = []struct{ name, codecs string }{
	{"bytes", `[{"name":"bytes","configuration":{"endian":"little"}}]`},
	{"bytes-big", `[{"name":"bytes","configuration":{"endian":"big"}}]`},
	{"transpose", `[{"name":"transpose","configuration":{"order":[1,0]}},{"name":"bytes","configuration":{"endian":"little"}}]`},
	{"crc32c", `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}]`},
	{"numcodecs.crc32", `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"numcodecs.crc32"}]`},
	{"zstd", `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":3}}]`},
	{"numcodecs.zstd", `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"numcodecs.zstd","configuration":{"level":3}}]`},
	{"gzip", `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"gzip","configuration":{"level":5}}]`},
	{"numcodecs.zlib", `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"numcodecs.zlib","configuration":{"level":5}}]`},
	{"blosc", `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"blosc","configuration":{"cname":"lz4","clevel":5,"shuffle":"shuffle","typesize":4,"blocksize":0}}]`},
	{"numcodecs.lz4", `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"numcodecs.lz4","configuration":{"acceleration":1}}]`},
	{"numcodecs.shuffle", `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"numcodecs.shuffle","configuration":{"elementsize":4}}]`},
}

// BenchmarkDecodeCosts measures what each codec of the offloading cost
// model (remote.DefaultCosts) costs to decode, in CPU nanoseconds per
// decoded byte ("cpu-ns/B"), one core:
//
//	go test -run '^$' -bench DecodeCosts -cpu 1 -count 3 ./codecsvc/
func BenchmarkDecodeCosts(b *testing.B) {
	data := benchData()
	spec := ChunkSpec{Shape: []int{1024, 1024}, DataType: zarr.MustDataType("float32")}
	for _, c := range costChains {
		ch := chain(b, c.codecs, spec)
		enc, err := ch.Encode(Chunk{Data: data})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			t0, n := cpuTime(), 0
			for b.Loop() {
				out, err := ch.Decode(enc)
				if err != nil {
					b.Fatal(err)
				}
				out.Release()
				n++
			}
			b.ReportMetric(float64(cpuTime()-t0)/float64(n)/float64(len(data)), "cpu-ns/B")
		})
	}
}
