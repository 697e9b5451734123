package e2e

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/zarrgate/zarrgate/client"
)

// Worker-fetch through the real binaries: `zarrgate codec-worker --store`
// reads the chunks the gateway names (`gateway --codec-fetch worker`), and
// reads, strided, boxed, whole and over missing chunks, return what was
// written; with --codec-choice auto too, where the cost model sends some
// batches as keys and has the gateway read and decode the others (whole
// chunks stored raw: no decode to spare, and as many bytes either way),
// for both codec chains.
func TestWorkerFetch(t *testing.T) {
	root := t.TempDir()
	store := startCommand(t, "store-worker", "--root", root)
	cw := startCommand(t, "codec-worker", "--store", store.addr)
	ctx := context.Background()
	const rows, cols = 300, 200
	value := func(i int64) float32 { return float32(math.Sin(float64(i)*1e-3) * 100) }
	want := func(r, q int64) float32 {
		if r >= 200 {
			return 0
		}
		return value(r*cols + q)
	}
	arrays := []struct{ name, codecs string }{
		{"t", ""}, // bytes + zstd
		{"raw", `[{"name":"bytes","configuration":{"endian":"little"}}]`},
	}
	for _, choice := range []string{"offload", "auto"} {
		gw := startCommand(t, "gateway", "--store", store.addr, "--codec", cw.addr, "--codec-fetch", "worker", "--codec-choice", choice, "--admin-listen", "127.0.0.1:0")
		c, err := client.Dial(ctx, gw.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for _, arr := range arrays {
			var a *client.Array
			if choice == "offload" {
				a, err = c.CreateArray(ctx, arr.name, client.ArraySpec{Shape: []int64{rows, cols}, DataType: "float32", ChunkShape: []int64{64, 48}, Codecs: arr.codecs})
				if err != nil {
					t.Fatal(err)
				}
				// The first 200 rows only: the chunks below are missing (fill, 0).
				data := make([]float32, 200*cols)
				for i := range data {
					data[i] = value(int64(i))
				}
				if _, err := client.Write(ctx, a, client.Selection{{Start: 0, Stop: 200, Step: 1}, {Start: 0, Stop: cols, Step: 1}}, data); err != nil {
					t.Fatal(err)
				}
			} else if a, err = c.OpenArray(ctx, arr.name); err != nil {
				t.Fatal(err)
			}
			for _, sel := range []client.Selection{
				{{Start: 0, Stop: rows, Step: 3}, {Start: 1, Stop: cols, Step: 5}},
				{{Start: 17, Stop: 250, Step: 1}, {Start: 5, Stop: 190, Step: 1}},
				{{Start: 0, Stop: rows, Step: 1}, {Start: 0, Stop: cols, Step: 1}},
			} {
				got, _, err := client.Read[float32](ctx, a, sel)
				if err != nil {
					t.Fatalf("%s %s %v: %v", choice, arr.name, sel, err)
				}
				k := 0
				for r := sel[0].Start; r < sel[0].Stop; r += sel[0].Step {
					for q := sel[1].Start; q < sel[1].Stop; q += sel[1].Step {
						if got[k] != want(r, q) {
							t.Fatalf("%s %s %v: element (%d, %d) = %v, want %v", choice, arr.name, sel, r, q, got[k], want(r, q))
						}
						k++
					}
				}
			}
		}
	}
	// A gateway asking a worker without --store for keys gets a clear
	// refusal, not a wrong answer (and, its admin endpoint on, shows that
	// the measured engine still sends keys).
	plain := startCommand(t, "codec-worker")
	gw2 := startCommand(t, "gateway", "--store", store.addr, "--codec", plain.addr, "--codec-fetch", "worker", "--admin-listen", "127.0.0.1:0")
	c2, err := client.Dial(ctx, gw2.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	a2, err := c2.OpenArray(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := client.Read[float32](ctx, a2, nil); err == nil || !strings.Contains(err.Error(), "--store") {
		t.Fatalf("worker without a store tier: %v", err)
	}
}
