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
// written.
func TestWorkerFetch(t *testing.T) {
	root := t.TempDir()
	store := startCommand(t, "store-worker", "--root", root)
	cw := startCommand(t, "codec-worker", "--store", store.addr)
	gw := startCommand(t, "gateway", "--store", store.addr, "--codec", cw.addr, "--codec-fetch", "worker", "--admin-listen", "127.0.0.1:0")
	ctx := context.Background()
	c, err := client.Dial(ctx, gw.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const rows, cols = 300, 200
	a, err := c.CreateArray(ctx, "t", client.ArraySpec{Shape: []int64{rows, cols}, DataType: "float32", ChunkShape: []int64{64, 48}})
	if err != nil {
		t.Fatal(err)
	}
	value := func(i int64) float32 { return float32(math.Sin(float64(i)*1e-3) * 100) }
	// The first 200 rows only: the chunks below are missing (fill, 0).
	data := make([]float32, 200*cols)
	for i := range data {
		data[i] = value(int64(i))
	}
	if _, err := client.Write(ctx, a, client.Selection{{Start: 0, Stop: 200, Step: 1}, {Start: 0, Stop: cols, Step: 1}}, data); err != nil {
		t.Fatal(err)
	}
	want := func(r, q int64) float32 {
		if r >= 200 {
			return 0
		}
		return value(r*cols + q)
	}
	for _, sel := range []client.Selection{
		{{Start: 0, Stop: rows, Step: 3}, {Start: 1, Stop: cols, Step: 5}},
		{{Start: 17, Stop: 250, Step: 1}, {Start: 5, Stop: 190, Step: 1}},
		{{Start: 0, Stop: rows, Step: 1}, {Start: 0, Stop: cols, Step: 1}},
	} {
		got, _, err := client.Read[float32](ctx, a, sel)
		if err != nil {
			t.Fatalf("%v: %v", sel, err)
		}
		k := 0
		for r := sel[0].Start; r < sel[0].Stop; r += sel[0].Step {
			for q := sel[1].Start; q < sel[1].Stop; q += sel[1].Step {
				if got[k] != want(r, q) {
					t.Fatalf("%v: element (%d, %d) = %v, want %v", sel, r, q, got[k], want(r, q))
				}
				k++
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
