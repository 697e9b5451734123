package codecsvc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/zarrgate/zarrgate/zarr"
)

// naiveTranspose is the specification's definition, element by element:
// B[B_pos] = A[A_pos] with B_pos[i] = A_pos[order[i]].
func naiveTranspose(a Chunk, shape, order []int, e int) Chunk {
	nd := len(shape)
	n := 1
	for _, d := range shape {
		n *= d
	}
	bshape := permuted(shape, order)
	elems := make([][]byte, n)
	pos := make([]int, nd)
	for ai := range n {
		rem := ai
		for d := nd - 1; d >= 0; d-- {
			pos[d] = rem % shape[d]
			rem /= shape[d]
		}
		bi := 0
		for i := range nd {
			bi = bi*bshape[i] + pos[order[i]]
		}
		if a.Offsets != nil {
			elems[bi] = a.Data[a.Offsets[ai]:a.Offsets[ai+1]]
		} else {
			elems[bi] = a.Data[ai*e : (ai+1)*e]
		}
	}
	out := Chunk{Data: []byte{}}
	if a.Offsets != nil {
		out.Offsets = []int64{0}
	}
	for _, el := range elems {
		out.Data = append(out.Data, el...)
		if a.Offsets != nil {
			out.Offsets = append(out.Offsets, int64(len(out.Data)))
		}
	}
	return out
}

// Every rank up to 5, every element size, random shapes (with unit and
// large dimensions, so the tiled and merged paths run) and permutations.
func TestTransposeMatchesDefinition(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	types := []string{"uint8", "int16", "r24", "float32", "float64", "complex128", "string"}
	for iter := range 400 {
		nd := iter%5 + 1
		shape := make([]int, nd)
		for d := range shape {
			shape[d] = 1 + r.IntN(5)
			if r.IntN(4) == 0 {
				shape[d] = 1
			}
		}
		if nd == 2 && iter%3 == 0 {
			shape = []int{33 + r.IntN(70), 40 + r.IntN(90)}
		}
		order := r.Perm(nd)
		spec := ChunkSpec{Shape: shape, DataType: zarr.MustDataType(types[iter%len(types)])}
		tc, err := newTranspose(json.RawMessage(fmt.Sprintf(`{"order":%s}`, mustJSON(order))), spec)
		if err != nil {
			t.Fatal(err)
		}
		tr := tc.(transpose)
		in := sample(r, spec)
		enc, err := tr.Encode(in, spec)
		if err != nil {
			t.Fatal(err)
		}
		want := naiveTranspose(in, shape, order, spec.DataType.Size)
		if !bytes.Equal(enc.Data, want.Data) || !slices.Equal(enc.Offsets, want.Offsets) {
			t.Fatalf("%s %v order %v: transpose differs from the definition", spec.DataType, shape, order)
		}
		dec, err := tr.Decode(enc, spec)
		if err != nil || !bytes.Equal(dec.Data, in.Data) || !slices.Equal(dec.Offsets, in.Offsets) {
			t.Fatalf("%s %v order %v: decode does not invert encode: %v", spec.DataType, shape, order, err)
		}
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// BenchmarkTranspose measures the 2-D and 3-D kernels on 4 MiB of float32.
//
//	go test -run '^$' -bench Transpose -cpu 1 ./codecsvc/
func BenchmarkTranspose(b *testing.B) {
	for _, tc := range []struct {
		shape, order []int
	}{
		{[]int{1024, 1024}, []int{1, 0}},
		{[]int{64, 128, 128}, []int{2, 0, 1}},
		{[]int{64, 128, 128}, []int{0, 2, 1}},
	} {
		spec := ChunkSpec{Shape: tc.shape, DataType: zarr.MustDataType("float32")}
		tr := transpose{order: tc.order}
		in := Chunk{Data: benchData()}
		b.Run(fmt.Sprint(tc.shape, tc.order), func(b *testing.B) {
			b.SetBytes(int64(len(in.Data)))
			for b.Loop() {
				if _, err := tr.Encode(in, spec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
