package e2e

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/client"
)

// Worker-fetch of sharded arrays and of arrays of strings through the real
// binaries: `codec-worker --store` reads the inner chunks' ranges (and the
// string chunks) the gateway names (`gateway --codec-fetch worker`), and
// full, strided and boxed reads return what `serve` reads from the same
// files. The gateway itself reads no chunk: its store tier bytes during the
// reads are the shard indexes' at most, while the store worker serves the
// chunks' bytes (to the codec worker).
func TestWorkerFetchShardedAndStrings(t *testing.T) {
	root := t.TempDir()
	sw := startWithAdmin(t, "store-worker", true, "--root", root)
	cw := startCommand(t, "codec-worker", "--store", sw.addr)
	gw := startWithAdmin(t, "gateway", true, "--store", sw.addr, "--codec", cw.addr, "--codec-fetch", "worker", "--metadata-ttl", "10m")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, gw.addr, client.WithSharedMemory(false))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// A sharded float32 array: shards of 4×4 inner chunks of 16×16, the
	// first 200 rows written (shards below are missing, inner chunks of
	// the shards across row 200 partly empty: fill).
	const rows, cols = 256, 192
	a, err := c.CreateArray(ctx, "sharded", client.ArraySpec{Shape: []int64{rows, cols}, DataType: "float32", ChunkShape: []int64{16, 16}, ShardShape: []int64{64, 64}, FillValue: "-1"})
	if err != nil {
		t.Fatal(err)
	}
	data := make([]float32, 200*cols)
	for i := range data {
		data[i] = float32(math.Sin(float64(i)*1e-3) * 100)
	}
	if _, err := client.Write(ctx, a, client.Selection{{Start: 0, Stop: 200, Step: 1}, {Start: 0, Stop: cols, Step: 1}}, data); err != nil {
		t.Fatal(err)
	}
	// A sharded and an unsharded array of strings.
	const srows, scols = 40, 30
	words := make([]string, srows*scols)
	for i := range words {
		words[i] = fmt.Sprintf("w%d-%s", i, string(rune('a'+i%26)))
	}
	strCodecs := `[{"name":"vlen-utf8"},{"name":"zstd","configuration":{"level":1,"checksum":false}}]`
	for _, s := range []struct {
		path  string
		shard []int64
	}{{"strings", nil}, {"sharded-strings", []int64{16, 16}}} {
		sa, err := c.CreateArray(ctx, s.path, client.ArraySpec{Shape: []int64{srows, scols}, DataType: "string", ChunkShape: []int64{8, 8}, ShardShape: s.shard, Codecs: strCodecs, FillValue: `"-"`})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := client.WriteStrings(ctx, sa, client.Selection{{Start: 0, Stop: 30, Step: 1}, {Start: 0, Stop: scols, Step: 1}}, words[:30*scols]); err != nil {
			t.Fatal(err)
		}
	}

	// The embedded reader over the same files, started after the writes.
	emb := startServer(t, "--root", root)
	ec, err := client.Dial(ctx, emb.addr, client.WithSharedMemory(false))
	if err != nil {
		t.Fatal(err)
	}
	defer ec.Close()
	open := func(c *client.Client, path string) *client.Array {
		a, err := c.OpenArray(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}

	gwBefore, swBefore := gw.scrape(t), sw.scrape(t)
	floatSels := []client.Selection{
		{{Start: 0, Stop: rows, Step: 1}, {Start: 0, Stop: cols, Step: 1}},
		{{Start: 0, Stop: rows, Step: 3}, {Start: 1, Stop: cols, Step: 5}},
		{{Start: 17, Stop: 250, Step: 1}, {Start: 5, Stop: 190, Step: 1}},
		{{Start: 63, Stop: 65, Step: 1}, {Start: 0, Stop: cols, Step: 47}},
	}
	for _, sel := range floatSels {
		got, _, err := client.Read[float32](ctx, open(c, "sharded"), sel)
		if err != nil {
			t.Fatalf("sharded %v through worker-fetch: %v", sel, err)
		}
		want, _, err := client.Read[float32](ctx, open(ec, "sharded"), sel)
		if err != nil {
			t.Fatalf("sharded %v embedded: %v", sel, err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("sharded %v: worker-fetch read differs from the embedded read", sel)
		}
		// And both are what was written.
		k := 0
		for r := sel[0].Start; r < sel[0].Stop; r += sel[0].Step {
			for q := sel[1].Start; q < sel[1].Stop; q += sel[1].Step {
				w := float32(-1)
				if r < 200 {
					w = data[r*cols+q]
				}
				if got[k] != w {
					t.Fatalf("sharded %v: element (%d, %d) = %v, want %v", sel, r, q, got[k], w)
				}
				k++
			}
		}
	}
	strSels := []client.Selection{
		{{Start: 0, Stop: srows, Step: 1}, {Start: 0, Stop: scols, Step: 1}},
		{{Start: 1, Stop: srows, Step: 3}, {Start: 0, Stop: scols, Step: 7}},
		{{Start: 5, Stop: 35, Step: 1}, {Start: 9, Stop: 10, Step: 1}},
	}
	for _, path := range []string{"strings", "sharded-strings"} {
		for _, sel := range strSels {
			got, _, err := client.ReadStrings(ctx, open(c, path), sel)
			if err != nil {
				t.Fatalf("%s %v through worker-fetch: %v", path, sel, err)
			}
			want, _, err := client.ReadStrings(ctx, open(ec, path), sel)
			if err != nil {
				t.Fatalf("%s %v embedded: %v", path, sel, err)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("%s %v: worker-fetch read %q, embedded %q", path, sel, got, want)
			}
			k := 0
			for r := sel[0].Start; r < sel[0].Stop; r += sel[0].Step {
				for q := sel[1].Start; q < sel[1].Stop; q += sel[1].Step {
					w := "-"
					if r < 30 {
						w = words[r*scols+q]
					}
					if got[k] != w {
						t.Fatalf("%s %v: element (%d, %d) = %q, want %q", path, sel, r, q, got[k], w)
					}
					k++
				}
			}
		}
	}
	gwAfter, swAfter := gw.scrape(t), sw.scrape(t)
	// What the gateway may have read from the store tier: every shard's
	// index (16 bytes an inner chunk, and a crc32c) once per read, and the
	// metadata documents (a few hundred bytes each, cached after the
	// first).
	indexes := float64(len(floatSels)*(4*3)*(16*16+4) + len(strSels)*(3*2)*(4*16+4))
	gwRead := delta(gwBefore, gwAfter, `zarrgate_store_read_bytes_total{backend="remote"}`)
	swRead := delta(swBefore, swAfter, `zarrgate_store_read_bytes_total{backend="file"}`)
	if gwRead > indexes+4096 {
		t.Errorf("the gateway read %v bytes from the store tier, more than the shard indexes' %v (and metadata): it fetched chunks itself", gwRead, indexes)
	}
	if workers := swRead - gwRead; workers < 4*gwRead || workers < 100_000 {
		t.Errorf("the store worker served %v bytes, the gateway read %v of them: the codec worker fetched too few (%v)", swRead, gwRead, workers)
	}
	t.Logf("gateway read %v bytes of the store tier, the codec worker %v", gwRead, swRead-gwRead)

	// The shards rewritten behind the gateway's back (by serve, on the same
	// files: the gateway caches indexes for --metadata-ttl, 10m here)
	// with data that compresses otherwise, so that the inner chunks move:
	// the gateway's cached indexes are stale, the codec worker finds the
	// shards' generations changed, and the gateway reads the indexes
	// again: the reads see the new data, never a mix. (The same rows as
	// before: which inner chunks are empty does not change, and an empty
	// one is read from the cached index without any fetch, as without
	// worker-fetch, for up to --metadata-ttl.)
	for round := range 2 {
		next := make([]float32, rows*cols)
		for i := range next {
			if i < 200*cols {
				next[i] = float32(i%(7+round*50)) * 0.5
			} else {
				next[i] = -1
			}
		}
		if _, err := client.Write(ctx, open(ec, "sharded"), client.Selection{{Start: 0, Stop: 200, Step: 1}, {Start: 0, Stop: cols, Step: 1}}, next[:200*cols]); err != nil {
			t.Fatal(err)
		}
		for _, sel := range floatSels {
			got, _, err := client.Read[float32](ctx, open(c, "sharded"), sel)
			if err != nil {
				t.Fatalf("round %d: sharded %v through worker-fetch after a rewrite: %v", round, sel, err)
			}
			k := 0
			for r := sel[0].Start; r < sel[0].Stop; r += sel[0].Step {
				for q := sel[1].Start; q < sel[1].Stop; q += sel[1].Step {
					if got[k] != next[r*cols+q] {
						t.Fatalf("round %d: sharded %v after a rewrite: element (%d, %d) = %v, want %v", round, sel, r, q, got[k], next[r*cols+q])
					}
					k++
				}
			}
		}
	}
}
