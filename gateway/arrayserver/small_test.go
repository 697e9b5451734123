package arrayserver

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/gateway"
	"github.com/zarrgate/zarrgate/internal/membudget"
	"github.com/zarrgate/zarrgate/storesvc/memory"
	"github.com/zarrgate/zarrgate/zarr"
)

// slabOf assembles a slab from its header and blocks: dense bytes for
// fixed-size elements, one string per element for variable-length ones,
// checking that the blocks tile it exactly.
func slabOf(t *testing.T, h *gatewayv1.SlabHeader, blocks []*gatewayv1.Block) ([]byte, []string) {
	t.Helper()
	shape := make([]int64, len(h.GetShape()))
	n := int64(1)
	for d, s := range h.GetShape() {
		shape[d] = int64(s)
		n *= int64(s)
	}
	elem := int64(h.GetElementSize())
	dense := make([]byte, n*elem)
	strs := make([]string, n)
	seen := make([]bool, n)
	for _, b := range blocks {
		k := int64(0)
		bsel := make([]zarr.Range, len(shape))
		for d := range shape {
			bsel[d] = zarr.Range{Start: int64(b.GetOrigin()[d]), Stop: int64(b.GetOrigin()[d] + b.GetShape()[d]), Step: 1}
		}
		each(bsel, func(at []int64) {
			var i int64
			for d, c := range at {
				i = i*shape[d] + c
			}
			if seen[i] {
				t.Fatalf("element %v twice", at)
			}
			seen[i] = true
			if elem > 0 {
				copy(dense[i*elem:(i+1)*elem], b.GetData()[k*elem:])
			} else {
				strs[i] = string(b.GetData()[b.GetOffsets()[k]:b.GetOffsets()[k+1]])
			}
			k++
		})
	}
	for i, s := range seen {
		if !s {
			t.Fatalf("element %d missing", i)
		}
	}
	return dense, strs
}

// each calls fn with the coordinates of every element of the box sel
// (unit steps), in C order.
func each(sel []zarr.Range, fn func([]int64)) {
	at := make([]int64, len(sel))
	for d, r := range sel {
		if r.Stop <= r.Start {
			return
		}
		at[d] = r.Start
	}
	for {
		fn(at)
		d := len(sel) - 1
		for ; d >= 0; d-- {
			if at[d]++; at[d] < sel[d].Stop {
				break
			}
			at[d] = sel[d].Start
		}
		if d < 0 {
			return
		}
	}
}

// readStream reads sel of path with ReadSlab.
func readStream(t *testing.T, c gatewayv1.ArrayServiceClient, path string, sel []*gatewayv1.Slice) ([]byte, []string) {
	t.Helper()
	rs, err := c.ReadSlab(ctx, &gatewayv1.ReadSlabRequest{Path: path, Selection: sel})
	if err != nil {
		t.Fatal(err)
	}
	var h *gatewayv1.SlabHeader
	var blocks []*gatewayv1.Block
	for {
		m, err := rs.Recv()
		if err != nil {
			if status.Code(err) != codes.OK && err.Error() != "EOF" {
				t.Fatalf("ReadSlab(%s, %v): %v", path, sel, err)
			}
			break
		}
		if m.GetHeader() != nil {
			h = m.GetHeader()
		} else {
			blocks = append(blocks, m.GetBlock())
		}
	}
	return slabOf(t, h, blocks)
}

// smallArrays makes, on a memory store, the arrays ReadSlabSmall is
// checked on, each written in part (the rest, whole chunks or shards
// among it, is fill): "plain" (float32 stored raw), "zstd" (int16),
// "sharded" (uint8, zstd inner chunks) and "str" (strings).
func smallArrays(t *testing.T, g *gateway.Gateway) {
	t.Helper()
	zstd := `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":1,"checksum":false}}]`
	r := rand.New(rand.NewPCG(8, 9))
	for _, a := range []struct {
		name, dtype, codecs string
		shards              []int64
	}{
		{"plain", "float32", plainBytes, nil},
		{"zstd", "int16", zstd, nil},
		{"sharded", "uint8", zstd, []int64{32, 40}},
		{"str", "string", `[{"name":"vlen-utf8"}]`, nil},
	} {
		fill := json.RawMessage("3")
		if a.dtype == "string" {
			fill = json.RawMessage(`"fill"`)
		}
		if _, err := g.CreateArray(ctx, a.name, gateway.ArraySpec{Shape: []int64{100, 90}, DataType: a.dtype, ChunkShape: []int64{16, 20},
			ShardShape: a.shards, Codecs: json.RawMessage(a.codecs), FillValue: fill}); err != nil {
			t.Fatal(err)
		}
		// Rows 0..49, columns 0..69: chunks and shards whole and in part;
		// the rest never written.
		blk := gateway.Block{Origin: []int64{0, 0}, Shape: []int64{50, 70}}
		if a.dtype == "string" {
			blk.Offsets = []int64{0}
			for range 50 * 70 {
				blk.Data = append(blk.Data, strings.Repeat("é", r.IntN(3))+fmt.Sprint(r.IntN(1000))...)
				blk.Offsets = append(blk.Offsets, int64(len(blk.Data)))
			}
		} else {
			blk.Data = make([]byte, 50*70*map[string]int{"float32": 4, "int16": 2, "uint8": 1}[a.dtype])
			for i := range blk.Data {
				blk.Data[i] = byte(r.IntN(256))
			}
		}
		sel := []zarr.Range{{Start: 0, Stop: 50, Step: 1}, {Start: 0, Stop: 70, Step: 1}}
		if _, err := g.WriteSlab(ctx, a.name, sel, nextFrom([]gateway.Block{blk})); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReadSlabSmallMatchesReadSlab: ReadSlabSmall answers what ReadSlab
// streams, for every layout (raw, zstd, sharded, strings) and selection:
// inside one chunk, across chunks, strided, of fill and of chunks never
// written, single elements, empty and whole.
func TestReadSlabSmallMatchesReadSlab(t *testing.T) {
	g := gateway.New(memory.New(), codecsvc.NewLocal(), gateway.Config{})
	smallArrays(t, g)
	c := serveGateway(t, g)
	sels := [][]*gatewayv1.Slice{
		{{Start: 2, Stop: 9}, {Start: 3, Stop: 15}},                    // one chunk
		{{Start: 10, Stop: 40}, {Start: 15, Stop: 66}},                 // across chunks
		{{Start: 60, Stop: 90}, {Start: 75, Stop: 90}},                 // never written
		{{Start: 40, Stop: 60}, {Start: 60, Stop: 80}},                 // written and not
		{{Start: 1, Stop: 99, Step: 7}, {Start: 0, Stop: 90, Step: 4}}, // strided
		{{Start: 5, Stop: 6}, {Start: 7, Stop: 8}},                     // one element
		{{Start: 5, Stop: 5}, {Start: 0, Stop: 90}},                    // empty
		nil, // whole
	}
	r := rand.New(rand.NewPCG(1, 1))
	for range 30 {
		s := make([]*gatewayv1.Slice, 2)
		for d, n := range []uint64{100, 90} {
			a := r.Uint64N(n)
			s[d] = &gatewayv1.Slice{Start: a, Stop: a + 1 + r.Uint64N(n-a), Step: 1 + r.Uint64N(3)}
		}
		sels = append(sels, s)
	}
	for _, path := range []string{"plain", "zstd", "sharded", "str"} {
		for _, sel := range sels {
			resp, err := c.ReadSlabSmall(ctx, &gatewayv1.ReadSlabSmallRequest{Path: path, Selection: sel})
			if err != nil {
				t.Fatalf("ReadSlabSmall(%s, %v): %v", path, sel, err)
			}
			gotData, gotStrs := slabOf(t, resp.GetHeader(), resp.GetBlocks())
			wantData, wantStrs := readStream(t, c, path, sel)
			if string(gotData) != string(wantData) || fmt.Sprint(gotStrs) != fmt.Sprint(wantStrs) {
				t.Fatalf("ReadSlabSmall(%s, %v) differs from ReadSlab", path, sel)
			}
		}
	}
}

// TestReadSlabSmallRefuses: ReadSlabSmall refuses, with
// RESOURCE_EXHAUSTED, a slab over MaxSmallSlabBytes before reading it
// (however large: over the slab limit, or under it, 16 GiB), strings
// whose bytes pass it as they are read, and a slab the memory budget
// cannot hold, and gives back all it reserved; a slab of exactly
// MaxSmallSlabBytes is answered.
func TestReadSlabSmallRefuses(t *testing.T) {
	budget := membudget.Unlimited()
	g := gateway.New(memory.New(), codecsvc.NewLocal(), gateway.Config{Budget: budget})
	for name, shape := range map[string][]int64{"huge": {1 << 31, 1 << 31}, "large": {1 << 16, 1 << 16}, "edge": {512, 512}} {
		if _, err := g.CreateArray(ctx, name, gateway.ArraySpec{Shape: shape, DataType: "float32", ChunkShape: []int64{1024, 1024}, Codecs: json.RawMessage(plainBytes)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := g.CreateArray(ctx, "str", gateway.ArraySpec{Shape: []int64{300}, DataType: "string", ChunkShape: []int64{100}, Codecs: json.RawMessage(`[{"name":"vlen-utf8"}]`)}); err != nil {
		t.Fatal(err)
	}
	blk := gateway.Block{Origin: []int64{0}, Shape: []int64{300}, Offsets: []int64{0}}
	for range 300 {
		blk.Data = append(blk.Data, strings.Repeat("x", 4000)...)
		blk.Offsets = append(blk.Offsets, int64(len(blk.Data)))
	}
	if _, err := g.WriteSlab(ctx, "str", nil, nextFrom([]gateway.Block{blk})); err != nil {
		t.Fatal(err)
	}
	c := serveGateway(t, g)
	for name, req := range map[string]*gatewayv1.ReadSlabSmallRequest{
		"over the slab limit":    {Path: "huge"},
		"large slab":             {Path: "large"},
		"one row past the limit": {Path: "large", Selection: []*gatewayv1.Slice{{Start: 0, Stop: 513}, {Start: 0, Stop: 512}}},
		"large strided":          {Path: "large", Selection: []*gatewayv1.Slice{{Start: 0, Stop: 1 << 16, Step: 2}, {Start: 0, Stop: 1 << 16, Step: 3}}},
		"strings past the limit": {Path: "str"},
	} {
		_, err := c.ReadSlabSmall(ctx, req)
		if status.Code(err) != codes.ResourceExhausted {
			t.Errorf("%s: %v, want RESOURCE_EXHAUSTED", name, err)
		} else if name != "over the slab limit" && !strings.Contains(status.Convert(err).Message(), "read it with ReadSlab") {
			t.Errorf("%s: %v, want a refusal naming ReadSlab", name, err)
		}
	}
	if budget.InUse() != 0 {
		t.Errorf("%d bytes of the budget still in use", budget.InUse())
	}
	resp, err := c.ReadSlabSmall(ctx, &gatewayv1.ReadSlabSmallRequest{Path: "edge"})
	if err != nil || len(resp.GetBlocks()) != 1 || len(resp.GetBlocks()[0].GetData()) != MaxSmallSlabBytes {
		t.Fatalf("a slab of exactly the limit: %v", err)
	}
	// The response's copies are reserved: a budget smaller than twice
	// the slab refuses it.
	small := gateway.New(memory.New(), codecsvc.NewLocal(), gateway.Config{Budget: membudget.New(3*64*64*4/2, 0)})
	if _, err := small.CreateArray(ctx, "a", gateway.ArraySpec{Shape: []int64{64, 64}, DataType: "float32", ChunkShape: []int64{64, 64}, Codecs: json.RawMessage(plainBytes)}); err != nil {
		t.Fatal(err)
	}
	_, err = serveGateway(t, small).ReadSlabSmall(ctx, &gatewayv1.ReadSlabSmallRequest{Path: "a"})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), "memory budget") {
		t.Fatalf("a slab of 16 KiB under a budget of 24 KiB: %v, want RESOURCE_EXHAUSTED naming the memory budget", err)
	}
}

// TestReadSlabSmallStringsDoNotWaitHolding: the strings of a small read
// arrive while the read holds its batches' memory, so their response is
// reserved only if the memory is free at once: under a budget that holds
// the read but not its response the call is refused at once with
// RESOURCE_EXHAUSTED naming read_slab_small (the client then reads with
// ReadSlab), not after waiting for memory it holds itself.
func TestReadSlabSmallStringsDoNotWaitHolding(t *testing.T) {
	// Written by one gateway, read by others on the same store, so that
	// each reader's budget sees its read alone.
	st := memory.New()
	g := gateway.New(st, codecsvc.NewLocal(), gateway.Config{})
	{
		if _, err := g.CreateArray(ctx, "str", gateway.ArraySpec{Shape: []int64{100}, DataType: "string", ChunkShape: []int64{100}, Codecs: json.RawMessage(`[{"name":"vlen-utf8"}]`)}); err != nil {
			t.Fatal(err)
		}
		blk := gateway.Block{Origin: []int64{0}, Shape: []int64{100}, Offsets: []int64{0}}
		for range 100 {
			blk.Data = append(blk.Data, strings.Repeat("x", 1000)...)
			blk.Offsets = append(blk.Offsets, int64(len(blk.Data)))
		}
		if _, err := g.WriteSlab(ctx, "str", nil, nextFrom([]gateway.Block{blk})); err != nil {
			t.Fatal(err)
		}
	}
	// What the read and its response reserve at their peak, unhindered.
	free := membudget.New(1<<30, 0)
	resp, err := serveGateway(t, gateway.New(st, codecsvc.NewLocal(), gateway.Config{Budget: free})).ReadSlabSmall(ctx, &gatewayv1.ReadSlabSmallRequest{Path: "str"})
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, b := range resp.GetBlocks() {
		n += int64(len(b.GetData())) + 8*int64(len(b.GetOffsets()))
	}
	peak := free.Peak()
	if peak < 2*n {
		t.Fatalf("peak %d below the response's reservation %d", peak, 2*n)
	}
	// A budget one byte short of that peak: the read gets its batches'
	// memory, the response cannot have its own.
	tight := membudget.New(peak-1, 5*time.Second)
	_, err = serveGateway(t, gateway.New(st, codecsvc.NewLocal(), gateway.Config{Budget: tight})).ReadSlabSmall(ctx, &gatewayv1.ReadSlabSmallRequest{Path: "str"})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), "read_slab_small") {
		t.Fatalf("strings whose response the budget cannot hold beside the read: %v, want RESOURCE_EXHAUSTED naming read_slab_small", err)
	}
	if tight.InUse() != 0 {
		t.Errorf("%d bytes of the budget still in use", tight.InUse())
	}
}
