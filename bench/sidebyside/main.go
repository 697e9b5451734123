// Command sidebyside is the Go side of the side-by-side benchmark of issue
// 20 (bench/side_by_side.py, scripts/bench-side-by-side.sh): each run is one
// measurement in a process of its own, printed as one JSON object.
//
//	sidebyside read   -addr A -path P [-shared=false] [-buffer=false] [-reads 2]
//	sidebyside random -addr A -path P [-n 1000]
//	sidebyside write  -addr A -path P -codecs JSON [-shard 4096] [-values F] [-shared=false] [-buffer=false]
//	sidebyside raw    -dir D [-threads 2] [-reads 2]
//	sidebyside ratio  -dir D [-chunks 64]
//
// read: the zarrgate client's full read of the array into one slice (one
// untimed warm-up, then -reads timed; the best), through shared memory (the
// default on loopback: into a client.SharedBuffer the gateway writes
// itself, or with -buffer=false into a slice, copied out of the gateway's
// segment) or the socket. random: -n reads of a 64×64 window at
// random places (the same seed each run), p50 and p99. write: CreateArray at
// P, then one timed write of the whole benchmark array (the raw float32 of
// -values, or benchValue computed as in e2e/slab_bench_test.go): from a
// client.SharedBuffer the gateway reads itself (WriteShared; the default
// on loopback), or with -shared=false or -buffer=false from a slice sent
// over the socket (Write). raw: the
// chunk files under D read by -threads goroutines (a shared cursor over the
// file list), the best of -reads after a warm-up. ratio: -chunks chunk
// files of D (an uncompressed array of 256×256 float32), spread over the
// array, encoded by zarrgate's codecs at each level; the ratio is raw bytes
// over encoded bytes.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/zarrgate/zarrgate/client"
	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/zarr"
)

const (
	rows, cols = 16384, 8192
	chunk      = 256
)

func main() {
	if len(os.Args) < 2 {
		fatal("usage: sidebyside read|random|write|raw|ratio [flags]")
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	addr := fs.String("addr", "", "the gateway's address")
	path := fs.String("path", "", "the array")
	shared := fs.Bool("shared", true, "block data through shared memory (else the socket)")
	bulk := fs.Bool("bulk", true, "without -shared: ask for the blocks over the gateway's bulk connection (else the gRPC stream)")
	buffer := fs.Bool("buffer", true, "with -shared: read into a client.SharedBuffer the gateway writes itself (else ReadInto a slice)")
	reads := fs.Int("reads", 2, "timed reads after one warm-up")
	n := fs.Int("n", 1000, "random reads")
	codecs := fs.String("codecs", "", "the codecs of the array to write (JSON)")
	shard := fs.Int64("shard", 0, "shard shape (both dimensions), 0 for none")
	values := fs.String("values", "", "write: the array's values as raw little-endian float32 (default: computed)")
	dir := fs.String("dir", "", "an array's directory (its chunk files under c/)")
	threads := fs.Int("threads", 2, "reader goroutines")
	nchunks := fs.Int("chunks", 64, "chunks to encode")
	fs.Parse(os.Args[2:])
	ctx := context.Background()
	switch os.Args[1] {
	case "read":
		a := open(ctx, *addr, *path, *shared, *bulk)
		got := make([]float32, rows*cols)
		read := func() { check(client.ReadInto(ctx, a, nil, got)) }
		res := map[string]any{}
		if *shared && *buffer {
			// Into a SharedBuffer, which the gateway writes itself.
			buf, err := client.NewSharedBuffer(rows * cols * 4)
			check(err)
			defer buf.Close()
			read = func() {
				got, err = client.ReadShared[float32](ctx, a, nil, buf)
				check(err)
			}
			read()
			ok, why := buf.InPlace()
			res["in_place"] = ok
			if !ok {
				res["refused"] = why
			}
		} else {
			read()
		}
		best, cpu := math.Inf(1), math.Inf(1)
		for range *reads {
			t0, c0 := time.Now(), cpuTime()
			read()
			best, cpu = min(best, time.Since(t0).Seconds()), min(cpu, cpuTime()-c0)
		}
		res["mb_per_s"], res["cpu_ms"], res["crc32"] = round1(float64(len(got)*4)/best/1e6), round1(cpu*1e3), crc32.ChecksumIEEE(bytesOf(got))
		emit(res)
	case "random":
		a := open(ctx, *addr, *path, *shared, *bulk)
		buf := make([]float32, 64*64)
		check(client.ReadInto(ctx, a, sel(0, 0), buf)) // warm-up
		r := rand.New(rand.NewPCG(1, 2))
		lat := make([]float64, 0, *n)
		byClass := map[string][]float64{}
		for range *n {
			y, x := r.Int64N(rows-64), r.Int64N(cols-64)
			t0 := time.Now()
			check(client.ReadInto(ctx, a, sel(y, x), buf))
			d := time.Since(t0).Seconds()
			lat = append(lat, d)
			byClass[windowClass(y, x)] = append(byClass[windowClass(y, x)], d)
			// The data is zarr-python's: numpy's sin may differ from Go's
			// in the last bit.
			if want := benchValue(int(y), int(x)); math.Abs(float64(buf[0]-want)) > 1e-3 {
				fatal("random read at (%d, %d) differs from the benchmark data", y, x)
			}
		}
		sort.Float64s(lat)
		classes := map[string]any{}
		for k, v := range byClass {
			sort.Float64s(v)
			classes[k] = map[string]any{"n": len(v), "p50_us": math.Round(v[len(v)/2] * 1e6)}
		}
		emit(map[string]any{"p50_us": math.Round(lat[len(lat)/2] * 1e6), "p99_us": math.Round(lat[len(lat)*99/100] * 1e6), "classes": classes})
	case "write":
		c, err := client.Dial(ctx, *addr, client.WithSharedMemory(*shared))
		check(err)
		defer c.Close()
		spec := client.ArraySpec{Shape: []int64{rows, cols}, DataType: "float32", ChunkShape: []int64{chunk, chunk}, Codecs: *codecs}
		if *shard > 0 {
			spec.ShardShape = []int64{*shard, *shard}
		}
		a, err := c.CreateArray(ctx, *path, spec)
		check(err)
		// With -shared and -buffer, the values are in a SharedBuffer the
		// gateway reads them from itself (WriteShared); else in a slice
		// sent over the socket (Write).
		var buf *client.SharedBuffer
		var data []float32
		if *shared && *buffer {
			buf, err = client.NewSharedBuffer(rows * cols * 4)
			check(err)
			defer buf.Close()
			data = unsafe.Slice((*float32)(unsafe.Pointer(&buf.Bytes()[0])), rows*cols)
		} else {
			data = make([]float32, rows*cols)
		}
		if *values != "" {
			f, err := os.Open(*values)
			check(err)
			_, err = io.ReadFull(f, bytesOf(data))
			check(err)
			f.Close()
		} else {
			for i := range rows {
				for j := range cols {
					data[i*cols+j] = benchValue(i, j)
				}
			}
		}
		t0, c0 := time.Now(), cpuTime()
		if buf != nil {
			_, err = client.WriteShared[float32](ctx, a, nil, buf)
		} else {
			_, err = client.Write(ctx, a, nil, data)
		}
		check(err)
		res := map[string]any{"mb_per_s": round1(float64(len(data)*4) / time.Since(t0).Seconds() / 1e6), "cpu_ms": round1((cpuTime() - c0) * 1e3)}
		if buf != nil {
			ok, why := buf.InPlace()
			res["in_place"] = ok
			if !ok {
				res["refused"] = why
			}
		}
		emit(res)
	case "raw":
		files := chunkFiles(*dir)
		best, total := math.Inf(1), int64(0)
		for range *reads + 1 { // the first is the warm-up
			t0 := time.Now()
			total = rawRead(files, *threads)
			best = min(best, time.Since(t0).Seconds())
		}
		emit(map[string]any{"mb_per_s": round1(float64(total) / best / 1e6), "files": len(files)})
	case "ratio":
		ratios(*dir, *nchunks)
	default:
		fatal("unknown mode %q", os.Args[1])
	}
}

// benchValue is e2e/slab_bench_test.go's: the benchmark array's content.
func benchValue(i, j int) float32 {
	return float32(math.Sin(float64(i)*0.001)*1000 + math.Cos(float64(j)*0.002)*100 + float64((i*131+j*71)%17))
}

// windowClass names what a 64 × 64 window at (y, x) costs a reader of
// 256 × 256 chunks: the chunks it touches, and for one chunk whether its
// rows end in the chunk's first 128 rows (a float32 chunk's first zstd
// block, all that zarrgate decodes of it then; bench/side_by_side_worker.py
// names them the same way).
func windowClass(y, x int64) string {
	n := 1
	if y%256 > 192 {
		n *= 2
	}
	if x%256 > 192 {
		n *= 2
	}
	switch {
	case n == 1 && y%256 <= 64:
		return "1 chunk, first block"
	case n == 1:
		return "1 chunk, both blocks"
	}
	return fmt.Sprintf("%d chunks", n)
}

func sel(y, x int64) client.Selection {
	return client.Selection{{Start: y, Stop: y + 64, Step: 1}, {Start: x, Stop: x + 64, Step: 1}}
}

func open(ctx context.Context, addr, path string, shared, bulk bool) *client.Array {
	c, err := client.Dial(ctx, addr, client.WithSharedMemory(shared), client.WithBulk(bulk))
	check(err)
	a, err := c.OpenArray(ctx, path)
	check(err)
	return a
}

// chunkFiles lists the chunk files under dir/c.
func chunkFiles(dir string) []string {
	var files []string
	check(filepath.WalkDir(filepath.Join(dir, "c"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, p)
		}
		return err
	}))
	if len(files) == 0 {
		fatal("no chunk files under %s/c", dir)
	}
	return files
}

// rawRead reads every file to its end with threads goroutines, each taking
// the next file of the list, and returns the bytes read.
func rawRead(files []string, threads int) int64 {
	var next atomic.Int64
	var total atomic.Int64
	var wg sync.WaitGroup
	for range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 1<<20)
			for {
				i := next.Add(1) - 1
				if i >= int64(len(files)) {
					return
				}
				f, err := os.Open(files[i])
				check(err)
				m, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{f}, buf)
				check(err)
				f.Close()
				total.Add(m)
			}
		}()
	}
	wg.Wait()
	return total.Load()
}

// ratioCodecs are the codec levels whose ratios are compared with
// numcodecs' (bench/side_by_side_worker.py ratio).
var ratioCodecs = []struct{ name, codec string }{
	{"zstd-1", `{"name":"zstd","configuration":{"level":1,"checksum":false}}`},
	{"zstd-3", `{"name":"zstd","configuration":{"level":3,"checksum":false}}`},
	{"zstd-5", `{"name":"zstd","configuration":{"level":5,"checksum":false}}`},
	{"zstd-9", `{"name":"zstd","configuration":{"level":9,"checksum":false}}`},
	{"gzip-1", `{"name":"gzip","configuration":{"level":1}}`},
	{"gzip-5", `{"name":"gzip","configuration":{"level":5}}`},
	{"gzip-9", `{"name":"gzip","configuration":{"level":9}}`},
	{"blosc-lz4-5-shuffle", `{"name":"blosc","configuration":{"cname":"lz4","clevel":5,"shuffle":"shuffle","typesize":4,"blocksize":0}}`},
	{"blosc-zstd-5-shuffle", `{"name":"blosc","configuration":{"cname":"zstd","clevel":5,"shuffle":"shuffle","typesize":4,"blocksize":0}}`},
}

// RatioChunks picks k chunk files spread evenly over the sorted list.
func ratioChunks(dir string, k int) [][]byte {
	files := chunkFiles(dir)
	slices.Sort(files)
	var out [][]byte
	for i := range k {
		b, err := os.ReadFile(files[i*len(files)/k])
		check(err)
		out = append(out, b)
	}
	return out
}

func ratios(dir string, k int) {
	chunks := ratioChunks(dir, k)
	spec := codecsvc.ChunkSpec{Shape: []int{chunk, chunk}, DataType: zarr.MustDataType("float32")}
	for _, rc := range ratioCodecs {
		var cs []zarr.CodecSpec
		check(json.Unmarshal([]byte(`[{"name":"bytes","configuration":{"endian":"little"}},`+rc.codec+`]`), &cs))
		ch, err := codecsvc.NewChain(cs, spec)
		check(err)
		var raw, enc int
		for _, b := range chunks {
			e, err := ch.Encode(codecsvc.Chunk{Data: b})
			check(err)
			raw, enc = raw+len(b), enc+len(e)
		}
		emit(map[string]any{"codec": rc.name, "ratio": math.Round(float64(raw)/float64(enc)*1000) / 1000})
	}
}

func cpuTime() float64 {
	var ru syscall.Rusage
	check(syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

func bytesOf(f []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(f))), len(f)*4)
}

func round1(x float64) float64 { return math.Round(x*10) / 10 }

func emit(m map[string]any) {
	b, err := json.Marshal(m)
	check(err)
	fmt.Println(string(b))
}

func check(err error) {
	if err != nil {
		fatal("%v", err)
	}
}

func fatal(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "sidebyside: "+format+"\n", args...)
	os.Exit(1)
}
