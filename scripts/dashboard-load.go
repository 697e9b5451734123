//go:build ignore

// dashboard-load drives a zarrgate gateway with slab writes and reads
// through the Go client, so that every panel of deploy/grafana/zarrgate.json
// has something to show: arrays of three codec chains (zstd, gzip,
// uncompressed), concurrent writers of overlapping slabs (write conflicts),
// plain and shared-memory reads, and a few calls that fail on purpose
// (an array that does not exist, a selection out of bounds, a chunk that
// is not what its codecs say).
//
//	go run scripts/dashboard-load.go --addr 127.0.0.1:50051 --duration 4m
//
// With --once it writes one slab of each array, reads it back, checks
// that the bytes match and exits: deploy/validate runs it so (its
// TestDashboardAgainstScrape) before it scrapes /metrics.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zarrgate/zarrgate/client"
	"github.com/zarrgate/zarrgate/storesvc"
)

var arrays = []struct {
	path   string
	codecs string
}{
	{"load/zstd", ""}, // the default: bytes + zstd
	{"load/gzip", `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"gzip","configuration":{"level":5}}]`},
	{"load/raw", `[{"name":"bytes","configuration":{"endian":"little"}}]`},
}

const side = 1024 // arrays are side × side float32, in 128 × 128 chunks

func main() {
	addr := flag.String("addr", "127.0.0.1:50051", "gateway address")
	duration := flag.Duration("duration", 4*time.Minute, "how long to run")
	workers := flag.Int("workers", 4, "concurrent callers")
	once := flag.Bool("once", false, "write and read back one slab per array, check it, and exit")
	flag.Parse()
	ctx := context.Background()

	c, err := client.Dial(ctx, *addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	shm, err := client.Dial(ctx, *addr, client.WithSharedMemory(true))
	if err != nil {
		log.Fatal(err)
	}
	defer shm.Close()

	var as, shared []*client.Array
	for _, spec := range arrays {
		a, err := c.OpenArray(ctx, spec.path)
		if err != nil {
			a, err = c.CreateArray(ctx, spec.path, client.ArraySpec{
				Shape: []int64{side, side}, DataType: "float32", ChunkShape: []int64{128, 128}, Codecs: spec.codecs,
			})
		}
		if err != nil {
			log.Fatalf("%s: %v", spec.path, err)
		}
		as = append(as, a)
		sa, err := shm.OpenArray(ctx, spec.path)
		if err != nil {
			log.Fatalf("%s: %v", spec.path, err)
		}
		shared = append(shared, sa)
	}

	// An array whose first chunk is not zstd: reading it fails with
	// DataLoss (zarrgate_codec_failed_batches_total).
	corrupt, err := c.CreateArray(ctx, "load/corrupt-"+fmt.Sprint(time.Now().UnixNano()), client.ArraySpec{
		Shape: []int64{128, 128}, DataType: "float32", ChunkShape: []int64{128, 128}})
	if err != nil {
		log.Fatal(err)
	}
	st, err := c.Store(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := st.Set(ctx, corrupt.Path+"/c/0/0", strings.NewReader("not a zstd frame"), storesvc.Condition{}); err != nil {
		log.Fatal(err)
	}

	if *once {
		for i, a := range as {
			sel := client.MustParseSelection("100:400,200:600")
			src := make([]float32, 300*400)
			for j := range src {
				src[j] = float32(i*1000 + j%997)
			}
			if _, err := client.Write(ctx, a, sel, src); err != nil {
				log.Fatalf("%s: write: %v", arrays[i].path, err)
			}
			got, _, err := client.Read[float32](ctx, a, sel)
			if err != nil {
				log.Fatalf("%s: read: %v", arrays[i].path, err)
			}
			if !slices.Equal(got, src) {
				log.Fatalf("%s: read back differs from what was written", arrays[i].path)
			}
		}
		if _, _, err := client.Read[float32](ctx, corrupt, nil); status.Code(err) != codes.DataLoss {
			log.Fatalf("reading a corrupt chunk: %v, want DataLoss", err)
		}
		fmt.Println("ok")
		return
	}

	deadline := time.Now().Add(*duration)
	var wg sync.WaitGroup
	var mu sync.Mutex
	counts := map[string]int{}
	for w := range *workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for time.Now().Before(deadline) {
				i := r.IntN(len(as))
				a := as[i]
				// A slab of 64 to 512 rows and columns at a random place: it
				// cuts chunks, so writes read, merge and write them back, and
				// concurrent writers of one chunk conflict.
				h, wd := 64+r.IntN(449), 64+r.IntN(449)
				y, x := r.IntN(side-h+1), r.IntN(side-wd+1)
				sel := client.MustParseSelection(fmt.Sprintf("%d:%d,%d:%d", y, y+h, x, x+wd))
				var what string
				var err error
				switch k := r.IntN(100); {
				case k < 35:
					what = "write"
					src := make([]float32, h*wd)
					for j := range src {
						src[j] = float32(j % 251)
					}
					_, err = client.Write(ctx, a, sel, src)
				case k < 65:
					what = "read"
					_, _, err = client.Read[float32](ctx, a, sel)
				case k < 93:
					// Large enough (≥ 2^18 elements) for the client to read
					// through shared memory.
					what = "read-shared"
					h, wd = 512+r.IntN(side-511), 512+r.IntN(side-511)
					y, x = r.IntN(side-h+1), r.IntN(side-wd+1)
					sel = client.MustParseSelection(fmt.Sprintf("%d:%d,%d:%d", y, y+h, x, x+wd))
					_, _, err = client.Read[float32](ctx, shared[i], sel)
				case k < 95:
					what = "corrupt"
					_, _, err = client.Read[float32](ctx, corrupt, client.MustParseSelection("0:128,0:128"))
				case k < 98:
					what = "missing"
					_, err = c.OpenArray(ctx, "load/missing")
				default:
					what = "out-of-bounds"
					_, _, err = client.Read[float32](ctx, a, client.MustParseSelection(fmt.Sprintf("0:%d,0:1", side+1)))
				}
				mu.Lock()
				if err != nil {
					what += " failed"
				}
				counts[what]++
				mu.Unlock()
				if err != nil && what != "missing failed" && what != "out-of-bounds failed" && what != "corrupt failed" {
					fmt.Fprintln(os.Stderr, what, err)
				}
				time.Sleep(time.Duration(r.IntN(40)) * time.Millisecond)
			}
		})
	}
	wg.Wait()
	fmt.Println(counts)
}
