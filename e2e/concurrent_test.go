package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/zarrgate/zarrgate/client"
)

// Two gateway processes on one directory, eight clients writing
// interleaved, disjoint strided columns of the same chunks and shards, in
// several rounds: every element written is there afterwards (zarr-python
// loses 30-50% of such writes, zarr-python issues 3682 and 3514).
func TestTwoGatewaysEightClients(t *testing.T) {
	root := t.TempDir()
	gws := []*server{startServer(t, "--root", root), startServer(t, "--root", root)}
	ctx := context.Background()
	const n, writers, rounds = 64, 8, 3
	for _, layout := range []struct {
		name   string
		chunks []int64
		shards []int64
	}{{"chunks", []int64{16, 16}, nil}, {"shards", []int64{8, 8}, []int64{32, 32}}} {
		t.Run(layout.name, func(t *testing.T) {
			setup, err := client.Dial(ctx, gws[0].addr)
			if err != nil {
				t.Fatal(err)
			}
			defer setup.Close()
			if _, err := setup.CreateArray(ctx, layout.name, client.ArraySpec{Shape: []int64{n, n}, DataType: "int32",
				ChunkShape: layout.chunks, ShardShape: layout.shards, FillValue: "-1"}); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			errc := make(chan error, writers)
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, err := client.Dial(ctx, gws[w%2].addr)
					if err != nil {
						errc <- err
						return
					}
					defer c.Close()
					a, err := c.OpenArray(ctx, layout.name)
					if err != nil {
						errc <- err
						return
					}
					// Writer w owns columns w, w+8, w+16, ...
					for r := range rounds {
						vals := make([]int32, n*n/writers)
						for i := range vals {
							row, k := i/(n/writers), i%(n/writers)
							vals[i] = int32(r*100000 + row*n + w + k*writers)
						}
						sel := client.Selection{{Start: 0, Stop: n, Step: 1}, {Start: int64(w), Stop: n, Step: writers}}
						if _, err := client.Write(ctx, a, sel, vals); err != nil {
							errc <- fmt.Errorf("writer %d round %d: %w", w, r, err)
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errc)
			for err := range errc {
				t.Fatal(err)
			}
			a, err := setup.OpenArray(ctx, layout.name)
			if err != nil {
				t.Fatal(err)
			}
			got, _, err := client.Read[int32](ctx, a, nil)
			if err != nil {
				t.Fatal(err)
			}
			lost := 0
			for i, v := range got {
				if v != int32((rounds-1)*100000+i) {
					lost++
				}
			}
			if lost > 0 {
				t.Fatalf("%d of %d elements lost or stale after concurrent writes", lost, n*n)
			}
		})
	}
}
