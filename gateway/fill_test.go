package gateway

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/zarrgate/zarrgate/zarr"
)

// Fill blocks tile their box exactly, never exceed the pattern, and hold
// the fill value, for fixed-size and variable-length types, with patterns
// small enough that every box is cut.
func TestFillBlocksTile(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for iter := range 500 {
		nd := 1 + rng.IntN(3)
		shape, origin := make([]int64, nd), make([]int64, nd)
		for d := range nd {
			shape[d], origin[d] = 1+rng.Int64N(9), rng.Int64N(4)
		}
		cap := 1 + rng.Int64N(20)
		var f *fill
		if rng.IntN(2) == 0 {
			f = &fill{elem: 2, value: []byte{7, 9}}
			f.pattern = bytes.Repeat(f.value, int(cap))
		} else {
			f = &fill{value: []byte("ab")}
			f.pattern = bytes.Repeat(f.value, int(cap))
			f.varOffsets = make([]int64, cap+1)
			for i := range cap {
				f.varOffsets[i+1] = f.varOffsets[i] + 2
			}
		}
		seen := map[[3]int64]int{}
		err := f.blocks(origin, shape, func(b Block) error {
			n := zarr.SaturatingProduct(b.Shape)
			if n > cap {
				t.Fatalf("%d: block of %d elements over a pattern of %d", iter, n, cap)
			}
			if f.elem > 0 && (int64(len(b.Data)) != n*2 || !bytes.Equal(b.Data, bytes.Repeat(f.value, int(n)))) {
				t.Fatalf("%d: block data %v", iter, b.Data)
			}
			if f.elem == 0 && (int64(len(b.Offsets)) != n+1 || b.Offsets[n] != int64(len(b.Data)) || !bytes.Equal(b.Data, bytes.Repeat(f.value, int(n)))) {
				t.Fatalf("%d: variable-length block %v %v", iter, b.Data, b.Offsets)
			}
			var idx [3]int64
			var walk func(d int)
			walk = func(d int) {
				if d == nd {
					seen[idx]++
					return
				}
				for i := range b.Shape[d] {
					idx[d] = b.Origin[d] + i
					walk(d + 1)
				}
			}
			walk(0)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		total := zarr.SaturatingProduct(shape)
		if int64(len(seen)) != total {
			t.Fatalf("%d: shape %v pattern %d: blocks cover %d of %d elements", iter, shape, cap, len(seen), total)
		}
		for k, c := range seen {
			if c != 1 {
				t.Fatalf("%d: element %v covered %d times", iter, k, c)
			}
			for d := range nd {
				if k[d] < origin[d] || k[d] >= origin[d]+shape[d] {
					t.Fatalf("%d: element %v outside the box", iter, k)
				}
			}
		}
	}
}

// A fill region of a terabyte streams: the first blocks come at once,
// from a pattern of at most fillPatternBytes, and nothing is allocated
// per block beyond its origin and shape.
func TestFillHugeStreams(t *testing.T) {
	a := &zarr.Array{DataType: zarr.DataType{Name: "float32", Size: 4}, FillValue: []byte{0, 0, 0x80, 0x7f}}
	unit := []int64{1 << 20, 1 << 18}
	f := newFill(a, unit)
	if len(f.pattern) > fillPatternBytes {
		t.Fatalf("pattern of %d bytes", len(f.pattern))
	}
	stop := errors.New("enough")
	n := 0
	err := f.blocks([]int64{0, 0}, unit, func(b Block) error {
		if len(b.Data) > fillPatternBytes || !bytes.Equal(b.Data[:4], a.FillValue) {
			t.Fatalf("block %v: %d bytes", b.Shape, len(b.Data))
		}
		if n++; n == 1000 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) {
		t.Fatal(err)
	}
}
