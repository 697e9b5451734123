package codecsvc_test

import (
	"bytes"
	"context"
	"math"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/codecsvc"
	codecv1 "github.com/zarrgate/zarrgate/gen/zarrgate/codec/v1"
	"github.com/zarrgate/zarrgate/internal/membudget"
)

// A decode batch with selections answers each chunk with the selected
// elements alone, packed in C order, on both decode paths of the worker
// (with and without a memory budget).
func TestDecodeSelections(t *testing.T) {
	ctx := context.Background()
	spec := protoSpec(t, zstdChain, "uint16", 6, 5)
	raw := make([]byte, 6*5*2)
	for i := range 30 {
		raw[2*i], raw[2*i+1] = byte(i), byte(100+i)
	}
	enc, err := codecsvc.NewLocal().Encode(ctx, mustSpec(t, spec), []codec.Chunk{{Data: raw}})
	if err != nil {
		t.Fatal(err)
	}
	elem := func(r, c int) []byte { i := r*5 + c; return raw[2*i : 2*i+2] }
	cases := []struct {
		dims []*codecv1.DimSelection
		want [][2]int // (row, col) in order
	}{
		{dims: []*codecv1.DimSelection{{Start: 1, Stop: 6, Step: 2}, {Start: 0, Stop: 5, Step: 3}}, want: [][2]int{{1, 0}, {1, 3}, {3, 0}, {3, 3}, {5, 0}, {5, 3}}},
		{dims: []*codecv1.DimSelection{{Start: 2, Stop: 3, Step: 1}, {Start: 1, Stop: 4, Step: 1}}, want: [][2]int{{2, 1}, {2, 2}, {2, 3}}},
		// A step past the extent selects start alone.
		{dims: []*codecv1.DimSelection{{Start: 4, Stop: 5, Step: math.MaxUint64}, {Start: 4, Stop: 5, Step: 7}}, want: [][2]int{{4, 4}}},
	}
	for _, budget := range []bool{false, true} {
		s := codecsvc.NewServer(codecsvc.NewLocal())
		if budget {
			s = codecsvc.NewBudgetServer(codecsvc.NewLocal(), membudget.New(64<<20, time.Second))
		}
		for i, c := range cases {
			resp, err := s.Decode(ctx, &codecv1.DecodeRequest{Spec: spec, Encoded: enc, Selections: []*codecv1.Selection{{Dims: c.dims, ElementSize: 2}}})
			if err != nil {
				t.Fatalf("budget %v case %d: %v", budget, i, err)
			}
			var want []byte
			for _, rc := range c.want {
				want = append(want, elem(rc[0], rc[1])...)
			}
			if got := resp.GetChunks()[0].GetData(); !bytes.Equal(got, want) {
				t.Errorf("budget %v case %d: got %v, want %v", budget, i, got, want)
			}
		}
		// An entry without dims is the whole chunk.
		resp, err := s.Decode(ctx, &codecv1.DecodeRequest{Spec: spec, Encoded: enc, Selections: []*codecv1.Selection{{}}})
		if err != nil || !bytes.Equal(resp.GetChunks()[0].GetData(), raw) {
			t.Fatalf("budget %v: whole selection: %v", budget, err)
		}
	}
}

func mustSpec(t *testing.T, p *codecv1.ChunkSpec) *codec.BatchSpec {
	t.Helper()
	s, err := codecsvc.SpecFromProto(p)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Selections that do not fit their chunks, or the batch, are refused
// before anything is decoded, with InvalidArgument (Unimplemented for a
// variable-length data type), never a panic or Internal.
func TestDecodeSelectionsAdversarial(t *testing.T) {
	ctx := context.Background()
	spec := protoSpec(t, zstdChain, "uint16", 6, 5)
	enc, err := codecsvc.NewLocal().Encode(ctx, mustSpec(t, spec), []codec.Chunk{{Data: make([]byte, 60)}})
	if err != nil {
		t.Fatal(err)
	}
	ok := &codecv1.DimSelection{Start: 0, Stop: 5, Step: 1}
	big := uint64(math.MaxUint64)
	for name, c := range map[string]struct {
		sel  []*codecv1.Selection
		enc  [][]byte
		spec *codecv1.ChunkSpec
		code codes.Code
	}{
		"more selections than chunks":  {sel: []*codecv1.Selection{{}, {}}, code: codes.InvalidArgument},
		"fewer selections than chunks": {sel: []*codecv1.Selection{{}}, enc: [][]byte{enc[0], enc[0]}, code: codes.InvalidArgument},
		"too few dims":                 {sel: []*codecv1.Selection{{Dims: []*codecv1.DimSelection{ok}}}, code: codes.InvalidArgument},
		"too many dims":                {sel: []*codecv1.Selection{{Dims: []*codecv1.DimSelection{ok, ok, ok}}}, code: codes.InvalidArgument},
		"stop past the extent":         {sel: []*codecv1.Selection{{Dims: []*codecv1.DimSelection{{Start: 0, Stop: 7, Step: 1}, ok}}}, code: codes.InvalidArgument},
		"start at the extent":          {sel: []*codecv1.Selection{{Dims: []*codecv1.DimSelection{{Start: 6, Stop: 6, Step: 1}, ok}}}, code: codes.InvalidArgument},
		"empty":                        {sel: []*codecv1.Selection{{Dims: []*codecv1.DimSelection{{Start: 3, Stop: 3, Step: 1}, ok}}}, code: codes.InvalidArgument},
		"backwards":                    {sel: []*codecv1.Selection{{Dims: []*codecv1.DimSelection{{Start: 4, Stop: 2, Step: 1}, ok}}}, code: codes.InvalidArgument},
		"step zero":                    {sel: []*codecv1.Selection{{Dims: []*codecv1.DimSelection{{Start: 0, Stop: 6, Step: 0}, ok}}}, code: codes.InvalidArgument},
		"huge stop":                    {sel: []*codecv1.Selection{{Dims: []*codecv1.DimSelection{{Start: big - 1, Stop: big, Step: big}, ok}}}, code: codes.InvalidArgument},
		"huge start":                   {sel: []*codecv1.Selection{{Dims: []*codecv1.DimSelection{{Start: 1 << 63, Stop: 5, Step: 1}, ok}}}, code: codes.InvalidArgument},
		"wrong element size":           {sel: []*codecv1.Selection{{Dims: []*codecv1.DimSelection{ok, ok}, ElementSize: 4}}, code: codes.InvalidArgument},
		"variable length": {sel: []*codecv1.Selection{{}}, code: codes.Unimplemented,
			spec: protoSpec(t, `[{"name":"vlen-utf8"}]`, "string", 6, 5)},
	} {
		s := codecsvc.NewServer(codecsvc.NewLocal())
		e := enc
		if c.enc != nil {
			e = c.enc
		}
		sp := spec
		if c.spec != nil {
			sp = c.spec
		}
		_, err := s.Decode(ctx, &codecv1.DecodeRequest{Spec: sp, Encoded: e, Selections: c.sel})
		if st, _ := status.FromError(err); st.Code() != c.code {
			t.Errorf("%s: %v, want %v", name, err, c.code)
		}
	}
}

// CheckSelection refuses what does not fit, whatever the numbers, without
// overflowing.
func TestCheckSelection(t *testing.T) {
	shape := []int64{10, 1 << 40}
	for _, s := range []codec.Selection{
		{Start: []int64{0, 0}, Step: []int64{1, 1}, Count: []int64{11, 1}},
		{Start: []int64{-1, 0}, Step: []int64{1, 1}, Count: []int64{1, 1}},
		{Start: []int64{0, 0}, Step: []int64{math.MaxInt64, 1}, Count: []int64{2, 1}},
		{Start: []int64{9, 0}, Step: []int64{1, 1}, Count: []int64{2, 1}},
		{Start: []int64{0, 0}, Step: []int64{1, 1}, Count: []int64{math.MaxInt64, 1}},
		{Start: []int64{0, 0}, Step: []int64{1, -1}, Count: []int64{1, 1}},
		{Start: []int64{0}, Step: []int64{1}, Count: []int64{1}},
	} {
		if _, err := codec.CheckSelection(s, shape, 8); err == nil {
			t.Errorf("%+v accepted", s)
		}
	}
	n, err := codec.CheckSelection(codec.Selection{Start: []int64{9, 5}, Step: []int64{math.MaxInt64, 3}, Count: []int64{1, 4}}, shape, 8)
	if err != nil || n != 32 {
		t.Errorf("valid selection: %d bytes, %v", n, err)
	}
}
