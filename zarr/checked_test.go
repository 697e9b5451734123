package zarr

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestChecked(t *testing.T) {
	if n, ok := MulChecked(1<<31, 1<<31); !ok || n != 1<<62 {
		t.Fatal(n, ok)
	}
	for _, c := range [][2]int64{{1 << 32, 1 << 31}, {math.MaxInt64, 2}, {-1, 1}, {3, math.MaxInt64 / 2}} {
		if _, ok := MulChecked(c[0], c[1]); ok {
			t.Errorf("MulChecked(%d, %d) did not overflow", c[0], c[1])
		}
	}
	if _, ok := AddChecked(math.MaxInt64, 1); ok {
		t.Error("AddChecked overflowed silently")
	}
	if n, ok := ProductChecked([]int64{1 << 40, 1 << 22}); !ok || n != 1<<62 {
		t.Fatal(n, ok)
	}
	if _, ok := ProductChecked([]int64{1 << 62, 1 << 62}); ok {
		t.Error("ProductChecked did not overflow")
	}
	if SaturatingProduct([]int64{1 << 62, 4}) != math.MaxInt64 {
		t.Error("SaturatingProduct did not saturate")
	}
	if _, err := Bytes("chunk", []int64{1 << 31, 1 << 31}, 4); !errors.Is(err, ErrInvalid) {
		t.Errorf("Bytes overflow: %v", err)
	}
}

func TestMaxDims(t *testing.T) {
	shape := make([]int64, MaxDims+1)
	for i := range shape {
		shape[i] = 1
	}
	a := &Array{Shape: shape, ChunkShape: shape, DataType: MustDataType("uint8"), Codecs: []CodecSpec{{Name: "bytes"}}}
	if err := a.validate(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("%d dimensions: %v, want InvalidArgument", len(shape), err)
	}
	a.Shape, a.ChunkShape = shape[:MaxDims], shape[:MaxDims]
	if err := a.validate(); errors.Is(err, ErrInvalid) && strings.Contains(err.Error(), "dimensions") {
		t.Fatalf("%d dimensions refused: %v", MaxDims, err)
	}
}
