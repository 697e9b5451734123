package gateway

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/zarrgate/zarrgate/zarr"
)

func TestSplitBlock(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 500 {
		nd := 1 + r.IntN(3)
		b := Block{Origin: make([]int64, nd), Shape: make([]int64, nd)}
		for d := range nd {
			b.Origin[d] = r.Int64N(5)
			b.Shape[d] = 1 + r.Int64N(6)
		}
		n := product(b.Shape)
		elem := []int{0, 1, 4}[r.IntN(3)]
		if elem > 0 {
			b.Data = make([]byte, n*int64(elem))
			for i := range b.Data {
				b.Data[i] = byte(i)
			}
		} else {
			b.Offsets = []int64{0}
			for i := range n {
				b.Data = append(b.Data, bytes.Repeat([]byte{byte(i)}, r.IntN(5))...)
				b.Offsets = append(b.Offsets, int64(len(b.Data)))
			}
		}
		limit := int64(1 + r.IntN(20))
		// Reassemble the pieces element by element.
		got := map[string][]byte{}
		err := SplitBlock(b, elem, limit, func(p Block) error {
			if int64(len(p.Data)) > limit && product(p.Shape) > 1 {
				t.Fatalf("piece of %d bytes over the limit %d", len(p.Data), limit)
			}
			k := int64(0)
			eachSelected(boxSel(p), func(c, _ []int64) {
				key := fmt.Sprint(c)
				if _, dup := got[key]; dup {
					t.Fatalf("element %v twice", c)
				}
				if elem > 0 {
					got[key] = p.Data[k*int64(elem) : (k+1)*int64(elem)]
				} else {
					got[key] = p.Data[p.Offsets[k]:p.Offsets[k+1]]
				}
				k++
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		k := int64(0)
		eachSelected(boxSel(b), func(c, _ []int64) {
			var want []byte
			if elem > 0 {
				want = b.Data[k*int64(elem) : (k+1)*int64(elem)]
			} else {
				want = b.Data[b.Offsets[k]:b.Offsets[k+1]]
			}
			if !bytes.Equal(got[fmt.Sprint(c)], want) {
				t.Fatalf("element %v: %v, want %v", c, got[fmt.Sprint(c)], want)
			}
			k++
		})
	}
}

func boxSel(b Block) []zarr.Range {
	sel := make([]zarr.Range, len(b.Shape))
	for d := range b.Shape {
		sel[d] = zarr.Range{Start: b.Origin[d], Stop: b.Origin[d] + b.Shape[d], Step: 1}
	}
	return sel
}
