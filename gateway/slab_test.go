package gateway

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/memory"
	"github.com/zarrgate/zarrgate/zarr"
)

// testCodecs is a small codec engine for the gateway's own tests: bytes
// (either endian), crc32c and vlen-utf8/vlen-bytes, enough to exercise
// every path of the engine against real stores. Its layouts (chunk size
// checks, the shard index chain) are codecsvc's, as a remote engine's are.
type testCodecs struct{ codecsvc.Layouts }

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func (testCodecs) Decode(_ context.Context, spec *ChunkSpec, encoded [][]byte) ([]Chunk, error) {
	out := make([]Chunk, len(encoded))
	for i, e := range encoded {
		c, err := testDecode(spec, e)
		if err != nil {
			return nil, NewItemError(i, err)
		}
		out[i] = c
	}
	return out, nil
}

func testDecode(spec *ChunkSpec, e []byte) (Chunk, error) {
	for i := len(spec.Codecs) - 1; i >= 0; i-- {
		c := spec.Codecs[i]
		switch c.Name {
		case "crc32c":
			if len(e) < 4 || crc32.Checksum(e[:len(e)-4], castagnoli) != binary.LittleEndian.Uint32(e[len(e)-4:]) {
				return Chunk{}, errs.New(errs.DataLoss, "crc32c mismatch")
			}
			e = e[:len(e)-4]
		case "bytes":
			d := slicesClone(e)
			if bytes.Contains(c.Configuration, []byte("big")) {
				swap(d, spec.DataType.SwapUnit())
			}
			if int64(len(d)) != product(spec.Shape)*int64(spec.DataType.Size) {
				return Chunk{}, errs.New(errs.DataLoss, "chunk has %d bytes", len(d))
			}
			return Chunk{Data: d}, nil
		case "vlen-utf8", "vlen-bytes":
			n := int64(binary.LittleEndian.Uint32(e))
			offs := make([]int64, 1, n+1)
			var data []byte
			p := 4
			for range n {
				l := int(binary.LittleEndian.Uint32(e[p:]))
				data = append(data, e[p+4:p+4+l]...)
				offs = append(offs, int64(len(data)))
				p += 4 + l
			}
			return Chunk{Data: data, Offsets: offs}, nil
		default:
			return Chunk{}, errs.New(errs.Unimplemented, "test codec %q", c.Name)
		}
	}
	return Chunk{}, errs.New(errs.InvalidArgument, "no array-to-bytes codec")
}

func (testCodecs) Encode(_ context.Context, spec *ChunkSpec, chunks []Chunk) ([][]byte, error) {
	out := make([][]byte, len(chunks))
	for i, ch := range chunks {
		var e []byte
		for _, c := range spec.Codecs {
			switch c.Name {
			case "bytes":
				e = slicesClone(ch.Data)
				if bytes.Contains(c.Configuration, []byte("big")) {
					swap(e, spec.DataType.SwapUnit())
				}
			case "vlen-utf8", "vlen-bytes":
				n := len(ch.Offsets) - 1
				e = binary.LittleEndian.AppendUint32(nil, uint32(n))
				for k := range n {
					v := ch.Data[ch.Offsets[k]:ch.Offsets[k+1]]
					e = binary.LittleEndian.AppendUint32(e, uint32(len(v)))
					e = append(e, v...)
				}
			case "crc32c":
				e = binary.LittleEndian.AppendUint32(e, crc32.Checksum(e, castagnoli))
			default:
				return nil, errs.New(errs.Unimplemented, "test codec %q", c.Name)
			}
		}
		out[i] = e
	}
	return out, nil
}

func slicesClone(b []byte) []byte { return append([]byte(nil), b...) }

func swap(b []byte, unit int) {
	for i := 0; i+unit <= len(b); i += unit {
		for a, z := i, i+unit-1; a < z; a, z = a+1, z-1 {
			b[a], b[z] = b[z], b[a]
		}
	}
}

// refArray is the naive reference: every element, C order.
type refArray struct {
	shape []int64
	elem  int
	data  []byte   // fixed size
	vals  []string // variable length
}

func (r *refArray) index(coords []int64) int64 {
	var i int64
	for d, c := range coords {
		i = i*r.shape[d] + c
	}
	return i
}

// eachSelected calls fn with the array coordinates and output coordinates
// of every element of sel, in C order.
func eachSelected(sel []zarr.Range, fn func(arr, out []int64)) {
	nd := len(sel)
	count := make([]int64, nd)
	for d, r := range sel {
		count[d] = r.Count()
		if count[d] == 0 {
			return
		}
	}
	out := make([]int64, nd)
	arr := make([]int64, nd)
	for {
		for d := range nd {
			arr[d] = sel[d].Start + out[d]*sel[d].Step
		}
		fn(arr, out)
		d := nd - 1
		for ; d >= 0; d-- {
			out[d]++
			if out[d] < count[d] {
				break
			}
			out[d] = 0
		}
		if d < 0 {
			return
		}
	}
}

func randSel(r *rand.Rand, shape []int64) []zarr.Range {
	sel := make([]zarr.Range, len(shape))
	for d, n := range shape {
		a, b := r.Int64N(n+1), r.Int64N(n+1)
		if a > b {
			a, b = b, a
		}
		sel[d] = zarr.Range{Start: a, Stop: b, Step: 1 + r.Int64N(3)}
		if r.IntN(3) == 0 {
			sel[d] = zarr.Range{Start: 0, Stop: n, Step: 1}
		}
	}
	return sel
}

// tile cuts a box of the given shape into random sub-boxes.
func tile(r *rand.Rand, origin, shape []int64, out *[][2][]int64) {
	for d, s := range shape {
		if s == 0 {
			return
		}
		_ = d
	}
	if r.IntN(3) == 0 || product(shape) <= 4 {
		*out = append(*out, [2][]int64{clone(origin), clone(shape)})
		return
	}
	d := r.IntN(len(shape))
	if shape[d] < 2 {
		*out = append(*out, [2][]int64{clone(origin), clone(shape)})
		return
	}
	cut := 1 + r.Int64N(shape[d]-1)
	a, b := clone(shape), clone(shape)
	a[d], b[d] = cut, shape[d]-cut
	o2 := clone(origin)
	o2[d] += cut
	tile(r, origin, a, out)
	tile(r, o2, b, out)
}

// blocksFor builds write blocks tiling sel from values.
func (ref *refArray) blocksFor(r *rand.Rand, sel []zarr.Range, value func(arr []int64) any) ([]Block, *refArray) {
	nd := len(sel)
	outShape := make([]int64, nd)
	for d, s := range sel {
		outShape[d] = s.Count()
	}
	var boxes [][2][]int64
	if nd == 0 {
		boxes = [][2][]int64{{{}, {}}}
	} else {
		tile(r, make([]int64, nd), outShape, &boxes)
	}
	r.Shuffle(len(boxes), func(i, j int) { boxes[i], boxes[j] = boxes[j], boxes[i] })
	var blocks []Block
	for _, bx := range boxes {
		b := Block{Origin: bx[0], Shape: bx[1]}
		sub := make([]zarr.Range, nd)
		for d := range nd {
			st := sel[d].Start + bx[0][d]*sel[d].Step
			sub[d] = zarr.Range{Start: st, Stop: st + bx[1][d]*sel[d].Step, Step: sel[d].Step}
		}
		if ref.elem == 0 {
			b.Offsets = []int64{0}
		}
		eachSelected(sub, func(arr, _ []int64) {
			v := value(arr)
			i := ref.index(arr)
			if ref.elem > 0 {
				bs := v.([]byte)
				b.Data = append(b.Data, bs...)
				copy(ref.data[i*int64(ref.elem):], bs)
			} else {
				s := v.(string)
				b.Data = append(b.Data, s...)
				b.Offsets = append(b.Offsets, int64(len(b.Data)))
				ref.vals[i] = s
			}
		})
		blocks = append(blocks, b)
	}
	return blocks, ref
}

func nextFrom(blocks []Block) func() (Block, error) {
	i := 0
	return func() (Block, error) {
		if i == len(blocks) {
			return Block{}, io.EOF
		}
		i++
		return blocks[i-1], nil
	}
}

// readAll reads sel and assembles the blocks into a dense result,
// checking that they tile the output exactly.
func readAll(t *testing.T, g *Gateway, path string, sel []zarr.Range, elem int) ([]byte, []string) {
	t.Helper()
	var info SlabInfo
	var data []byte
	var vals []string
	var seen []bool
	err := g.ReadSlab(ctx, path, sel, func(i SlabInfo) error {
		info = i
		n := product(i.Shape)
		seen = make([]bool, n)
		if elem > 0 {
			data = make([]byte, n*int64(elem))
		} else {
			vals = make([]string, n)
		}
		return nil
	}, func(b Block) error {
		k := int64(0)
		bsel := make([]zarr.Range, len(b.Shape))
		for d := range b.Shape {
			bsel[d] = zarr.Range{Start: b.Origin[d], Stop: b.Origin[d] + b.Shape[d], Step: 1}
		}
		eachSelected(bsel, func(out, _ []int64) {
			var i int64
			for d, c := range out {
				i = i*info.Shape[d] + c
			}
			if seen[i] {
				t.Errorf("element %v delivered twice", out)
			}
			seen[i] = true
			if elem > 0 {
				copy(data[i*int64(elem):(i+1)*int64(elem)], b.Data[k*int64(elem):])
			} else {
				vals[i] = string(b.Data[b.Offsets[k]:b.Offsets[k+1]])
			}
			k++
		})
		return nil
	})
	if err != nil {
		t.Fatalf("ReadSlab(%s, %v): %v", path, sel, err)
	}
	for i, s := range seen {
		if !s {
			t.Fatalf("ReadSlab(%s, %v): element %d never delivered", path, sel, i)
		}
	}
	return data, vals
}

func (ref *refArray) expect(sel []zarr.Range) ([]byte, []string) {
	var data []byte
	var vals []string
	eachSelected(sel, func(arr, _ []int64) {
		i := ref.index(arr)
		if ref.elem > 0 {
			data = append(data, ref.data[i*int64(ref.elem):(i+1)*int64(ref.elem)]...)
		} else {
			vals = append(vals, ref.vals[i])
		}
	})
	return data, vals
}

type slabCase struct {
	dtype      string
	shape      []int64
	chunks     []int64
	shards     []int64
	codecs     string
	shardIndex string // "start" or "end"
}

// realChains are codec chains for the real engine (codecsvc.Local).
var realChains = []string{
	`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":3,"checksum":true}}]`,
	`[{"name":"transpose","configuration":{"order":ORDER}},{"name":"bytes","configuration":{"endian":"big"}},{"name":"gzip","configuration":{"level":1}},{"name":"crc32c"}]`,
	`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"blosc","configuration":{"cname":"lz4","clevel":5,"shuffle":"shuffle","typesize":4,"blocksize":0}}]`,
	`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"blosc","configuration":{"cname":"zstd","clevel":3,"shuffle":"bitshuffle","typesize":2,"blocksize":0}}]`,
	`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"numcodecs.zlib","configuration":{"level":1}}]`,
	`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"numcodecs.shuffle","configuration":{"elementsize":4}},{"name":"numcodecs.lz4","configuration":{"acceleration":1}}]`,
}

func randCase(r *rand.Rand) slabCase { return randCaseFor(r, false) }

func randCaseFor(r *rand.Rand, real bool) slabCase {
	nd := r.IntN(4)
	c := slabCase{shape: make([]int64, nd), chunks: make([]int64, nd)}
	for d := range nd {
		c.shape[d] = r.Int64N(13)
		c.chunks[d] = 1 + r.Int64N(5)
	}
	c.dtype = []string{"int8", "uint16", "float32", "float64", "complex64", "string"}[r.IntN(6)]
	switch {
	case c.dtype == "string" && real:
		c.codecs = []string{`[{"name":"vlen-utf8"},{"name":"zstd","configuration":{"level":1,"checksum":false}}]`,
			`[{"name":"transpose","configuration":{"order":ORDER}},{"name":"vlen-utf8"},{"name":"crc32c"}]`}[r.IntN(2)]
	case c.dtype == "string":
		c.codecs = `[{"name":"vlen-utf8"}]`
	case real:
		c.codecs = realChains[r.IntN(len(realChains))]
	case r.IntN(2) == 0:
		c.codecs = `[{"name":"bytes","configuration":{"endian":"big"}},{"name":"crc32c"}]`
	default:
		c.codecs = `[{"name":"bytes","configuration":{"endian":"little"}}]`
	}
	order := make([]string, nd)
	for i, p := range r.Perm(nd) {
		order[i] = fmt.Sprint(p)
	}
	c.codecs = strings.ReplaceAll(c.codecs, "ORDER", "["+strings.Join(order, ",")+"]")
	if nd > 0 && r.IntN(2) == 0 {
		c.shards = make([]int64, nd)
		for d := range nd {
			c.shards[d] = c.chunks[d] * (1 + r.Int64N(3))
		}
		c.shardIndex = []string{"start", "end"}[r.IntN(2)]
	}
	return c
}

func (c slabCase) create(t *testing.T, g *Gateway, path string) *refArray {
	t.Helper()
	spec := ArraySpec{Shape: c.shape, DataType: c.dtype, ChunkShape: c.chunks, ShardShape: c.shards, Codecs: json.RawMessage(c.codecs)}
	if c.dtype != "string" {
		spec.FillValue = json.RawMessage("7")
		if strings.HasPrefix(c.dtype, "complex") {
			spec.FillValue = json.RawMessage("[7, -1]")
		}
	} else {
		spec.FillValue = json.RawMessage(`"fill"`)
	}
	if _, err := g.CreateArray(ctx, path, spec); err != nil {
		t.Fatalf("create %+v: %v", c, err)
	}
	if c.shardIndex == "start" {
		// Rewrite the index location: CreateArray always puts it at the end.
		if _, err := g.update(ctx, path, func(n *node) error {
			var cfg map[string]any
			json.Unmarshal(n.array.Codecs[0].Configuration, &cfg)
			cfg["index_location"] = "start"
			n.array.Codecs[0].Configuration, _ = json.Marshal(cfg)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	n, err := g.node(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	a := n.array
	ref := &refArray{shape: c.shape, elem: a.DataType.Size}
	total := product(c.shape)
	if ref.elem > 0 {
		ref.data = make([]byte, total*int64(ref.elem))
		for i := int64(0); i < total; i++ {
			copy(ref.data[i*int64(ref.elem):], a.FillValue)
		}
	} else {
		ref.vals = make([]string, total)
		for i := range ref.vals {
			ref.vals[i] = string(a.FillValue)
		}
	}
	return ref
}

func randValue(r *rand.Rand, elem int) func([]int64) any {
	return func([]int64) any {
		if elem == 0 {
			return strings.Repeat("é", r.IntN(4)) + fmt.Sprint(r.IntN(1000))
		}
		b := make([]byte, elem)
		for i := range b {
			b[i] = byte(r.IntN(4)) // small alphabet: many chunks come out all fill
		}
		return b
	}
}

// TestSlabsMatchReference writes random selections of random arrays in
// random tilings and reads random strided selections back, comparing with
// the naive reference element by element.
func TestSlabsMatchReference(t *testing.T) {
	t.Run("test-engine", func(t *testing.T) { testSlabsMatchReference(t, testCodecs{}, false) })
	t.Run("codecsvc", func(t *testing.T) { testSlabsMatchReference(t, codecsvc.NewLocal(), true) })
}

func testSlabsMatchReference(t *testing.T, engine Codecs, real bool) {
	r := rand.New(rand.NewPCG(7, 11))
	iters := 150
	if n := os.Getenv("ZARRGATE_SLAB_ITERS"); n != "" {
		iters, _ = strconv.Atoi(n)
	}
	if testing.Short() {
		iters = 40
	}
	for it := range iters {
		c := randCaseFor(r, real)
		store := memory.New()
		g := New(store, engine, Config{Parallelism: 1 + r.IntN(4), WriteBufferBytes: []int64{64, 1 << 20}[r.IntN(2)]})
		path := fmt.Sprintf("a%d", it)
		ref := c.create(t, g, path)
		for step := range 4 {
			sel := randSel(r, c.shape)
			if step == 0 {
				sel = zarr.FullSelection(c.shape)
			}
			blocks, _ := ref.blocksFor(r, sel, randValue(r, ref.elem))
			if _, err := g.WriteSlab(ctx, path, sel, nextFrom(blocks)); err != nil {
				t.Fatalf("case %d %+v: WriteSlab(%v): %v", it, c, sel, err)
			}
			rsel := randSel(r, c.shape)
			gotData, gotVals := readAll(t, g, path, rsel, ref.elem)
			wantData, wantVals := ref.expect(rsel)
			if !bytes.Equal(gotData, wantData) || fmt.Sprint(gotVals) != fmt.Sprint(wantVals) {
				t.Fatalf("case %d %+v step %d: ReadSlab(%v) differs from the reference\n got %v %q\nwant %v %q", it, c, step, rsel, gotData, gotVals, wantData, wantVals)
			}
		}
	}
}

func TestWriteSlabRejectsBadBlocks(t *testing.T) {
	g := New(memory.New(), testCodecs{}, Config{})
	if _, err := g.CreateArray(ctx, "a", ArraySpec{Shape: []int64{4, 4}, DataType: "int16", ChunkShape: []int64{2, 2}, Codecs: json.RawMessage(`[{"name":"bytes","configuration":{"endian":"little"}}]`)}); err != nil {
		t.Fatal(err)
	}
	good := Block{Origin: []int64{0, 0}, Shape: []int64{2, 4}, Data: make([]byte, 16)}
	cases := map[string][]Block{
		"wrong byte length": {good, {Origin: []int64{2, 0}, Shape: []int64{2, 4}, Data: make([]byte, 15)}},
		"outside":           {good, {Origin: []int64{2, 1}, Shape: []int64{2, 4}, Data: make([]byte, 16)}},
		"overlap":           {good, {Origin: []int64{1, 0}, Shape: []int64{3, 4}, Data: make([]byte, 24)}},
		"incomplete":        {good},
		"wrong rank":        {{Origin: []int64{0}, Shape: []int64{16}, Data: make([]byte, 32)}},
	}
	for name, blocks := range cases {
		_, err := g.WriteSlab(ctx, "a", nil, nextFrom(blocks))
		if !errors.Is(err, errs.InvalidArgument) {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
		var keys []string
		for k := range g.store.ListPrefix(ctx, "a/c/") {
			keys = append(keys, k)
		}
		if len(keys) != 0 {
			t.Fatalf("%s: chunks written by a rejected write: %v", name, keys)
		}
	}
	_, err := g.WriteSlab(ctx, "a", []zarr.Range{{Start: 0, Stop: 5, Step: 1}, {Start: 0, Stop: 4, Step: 1}}, nextFrom(nil))
	wantCode(t, "selection out of bounds", err, errs.OutOfRange)
	_, err = g.WriteSlab(ctx, "a", []zarr.Range{{Start: 0, Stop: 4, Step: 0}, {Start: 0, Stop: 4, Step: 1}}, nextFrom(nil))
	wantCode(t, "step 0", err, errs.InvalidArgument)
	small := New(g.store.Unwrap(), testCodecs{}, Config{MaxSlabBytes: 16})
	err = small.ReadSlab(ctx, "a", nil, func(SlabInfo) error { return nil }, func(Block) error { return nil })
	wantCode(t, "slab above the limit", err, errs.ResourceExhausted)
}

// TestConcurrentDisjointWrites has writers on two gateways write
// interleaved single elements of the same chunks and shards: every element
// must survive.
func TestConcurrentDisjointWrites(t *testing.T) {
	for _, sharded := range []bool{false, true} {
		t.Run(fmt.Sprint("sharded=", sharded), func(t *testing.T) {
			store := storesvc.Wrap(memory.New())
			g1 := New(store, testCodecs{}, Config{})
			g2 := New(store, testCodecs{}, Config{})
			spec := ArraySpec{Shape: []int64{8, 8}, DataType: "int32", ChunkShape: []int64{4, 4}, FillValue: json.RawMessage("-1"),
				Codecs: json.RawMessage(`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}]`)}
			if sharded {
				spec.ChunkShape, spec.ShardShape = []int64{2, 2}, []int64{8, 8}
			}
			if _, err := g1.CreateArray(ctx, "a", spec); err != nil {
				t.Fatal(err)
			}
			const writers = 8
			var wg sync.WaitGroup
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					g := g1
					if w%2 == 1 {
						g = g2
					}
					// Writer w owns the elements whose linear index is w mod 8.
					for i := w; i < 64; i += writers {
						y, x := int64(i/8), int64(i%8)
						b := Block{Origin: []int64{0, 0}, Shape: []int64{1, 1}, Data: binary.LittleEndian.AppendUint32(nil, uint32(i))}
						if _, err := g.WriteSlab(ctx, "a", []zarr.Range{{Start: y, Stop: y + 1, Step: 1}, {Start: x, Stop: x + 1, Step: 1}}, nextFrom([]Block{b})); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			fresh := New(store, testCodecs{}, Config{MetadataTTL: -1})
			data, _ := readAll(t, fresh, "a", nil, 4)
			for i := range 64 {
				if v := binary.LittleEndian.Uint32(data[4*i:]); v != uint32(i) {
					t.Fatalf("element %d = %d after concurrent writes: an update was lost", i, int32(v))
				}
			}
		})
	}
}

func TestReadSlabCancel(t *testing.T) {
	g := New(memory.New(), testCodecs{}, Config{Parallelism: 2})
	if _, err := g.CreateArray(ctx, "a", ArraySpec{Shape: []int64{64, 64}, DataType: "uint8", ChunkShape: []int64{4, 4}, Codecs: json.RawMessage(`[{"name":"bytes"}]`)}); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	n := 0
	err := g.ReadSlab(cctx, "a", nil, func(SlabInfo) error { return nil }, func(Block) error {
		n++
		if n == 3 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled read: %v after %d blocks", err, n)
	}
	stop := errors.New("client went away")
	err = g.ReadSlab(ctx, "a", nil, func(SlabInfo) error { return nil }, func(Block) error { return stop })
	if !errors.Is(err, stop) {
		t.Fatalf("emit error not returned: %v", err)
	}
}
