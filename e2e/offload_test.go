package e2e

import (
	"context"
	"math"
	"testing"

	"github.com/zarrgate/zarrgate/client"
)

// Strided, boxed and full reads through `zarrgate gateway --codec` (with
// its admin endpoint on, whose metrics wrap the codec engine) return what
// was written: the codec worker answers partial chunks with their
// selections only, and the gateway places them; with --codec-choice auto
// (the default bytes + zstd here, whose batches go either way by their selections' size) too.
func TestOffloadedPartialReads(t *testing.T) {
	root := t.TempDir()
	store := startCommand(t, "store-worker", "--root", root)
	cw := startCommand(t, "codec-worker")
	for _, choice := range []string{"offload", "auto"} {
		t.Run(choice, func(t *testing.T) {
			gw := startCommand(t, "gateway", "--store", store.addr, "--codec", cw.addr, "--admin-listen", "127.0.0.1:0", "--codec-choice", choice)
			testOffloadedPartialReads(t, gw.addr, choice)
		})
	}
}

func testOffloadedPartialReads(t *testing.T, addr, name string) {
	ctx := context.Background()
	c, err := client.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const rows, cols = 300, 200
	a, err := c.CreateArray(ctx, name, client.ArraySpec{Shape: []int64{rows, cols}, DataType: "float32", ChunkShape: []int64{64, 48}})
	if err != nil {
		t.Fatal(err)
	}
	value := func(i int64) float32 { return float32(math.Sin(float64(i)*1e-3) * 100) }
	data := make([]float32, rows*cols)
	for i := range data {
		data[i] = value(int64(i))
	}
	if _, err := client.Write(ctx, a, nil, data); err != nil {
		t.Fatal(err)
	}
	for _, sel := range []client.Selection{
		{{Start: 0, Stop: rows, Step: 3}, {Start: 1, Stop: cols, Step: 5}},
		{{Start: 17, Stop: 250, Step: 1}, {Start: 5, Stop: 190, Step: 1}},
		{{Start: 63, Stop: 65, Step: 1}, {Start: 0, Stop: cols, Step: 47}},
		{{Start: 0, Stop: rows, Step: 1}, {Start: 0, Stop: cols, Step: 1}},
	} {
		got, shape, err := client.Read[float32](ctx, a, sel)
		if err != nil {
			t.Fatalf("%v: %v", sel, err)
		}
		k := 0
		for r := sel[0].Start; r < sel[0].Stop; r += sel[0].Step {
			for q := sel[1].Start; q < sel[1].Stop; q += sel[1].Step {
				if want := value(r*cols + q); got[k] != want {
					t.Fatalf("%v (shape %v): element (%d, %d) = %v, want %v", sel, shape, r, q, got[k], want)
				}
				k++
			}
		}
		if k != len(got) {
			t.Fatalf("%v: %d elements, want %d", sel, len(got), k)
		}
	}
}
