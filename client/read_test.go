package client_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sync/errgroup"

	"github.com/zarrgate/zarrgate/client"
)

// TestReadPathsAgree reads random slabs of an array whose blocks are large
// enough to travel by reference (and arrive split over many receive
// buffers) through every read path, against values computed from what was
// written.
func TestReadPathsAgree(t *testing.T) {
	ctx := context.Background()
	c := dial(t)
	shape := []int64{30, 200, 300}
	a, err := c.CreateArray(ctx, "paths", client.ArraySpec{Shape: shape, DataType: "float32", ChunkShape: []int64{7, 64, 100}})
	if err != nil {
		t.Fatal(err)
	}
	at := func(i, j, k int64) float32 { return float32(i*1000000 + j*1000 + k) }
	all := make([]float32, 30*200*300)
	for i := range int64(30) {
		for j := range int64(200) {
			for k := range int64(300) {
				all[(i*200+j)*300+k] = at(i, j, k)
			}
		}
	}
	if _, err := client.Write(ctx, a, nil, all); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(7, 8))
	for n := range 40 {
		sel := make(client.Selection, 3)
		for d, s := range shape {
			lo := r.Int64N(s)
			hi := lo + 1 + r.Int64N(s-lo)
			step := int64(1)
			if n%3 == 2 {
				step = 1 + r.Int64N(4)
			}
			if n == 0 {
				lo, hi = 0, s
			}
			sel[d] = client.Slice{Start: lo, Stop: hi, Step: step}
		}
		var want []float32
		for i := sel[0].Start; i < sel[0].Stop; i += sel[0].Step {
			for j := sel[1].Start; j < sel[1].Stop; j += sel[1].Step {
				for k := sel[2].Start; k < sel[2].Stop; k += sel[2].Step {
					want = append(want, at(i, j, k))
				}
			}
		}
		got := make([]float32, len(want))
		if err := client.ReadInto(ctx, a, sel, got); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("ReadInto %v differs", sel)
		}
		_, raw, err := client.ReadBytes(ctx, a, sel)
		if err != nil {
			t.Fatal(err)
		}
		if string(raw) != string(asBytes(want)) {
			t.Fatalf("ReadBytes %v differs", sel)
		}
		// Blocks owns its data: keep every block, check them at the end.
		hdr, blocks, err := a.Blocks(ctx, sel)
		if err != nil {
			t.Fatal(err)
		}
		var kept []client.Block
		for b, err := range blocks {
			if err != nil {
				t.Fatal(err)
			}
			kept = append(kept, b)
		}
		for _, b := range kept {
			for e := range len(b.Data) / 4 {
				// The element's position in the slab, from the block's.
				rem := int64(e)
				var off int64
				for d := 2; d >= 0; d-- {
					idx := rem % b.Shape[d]
					rem /= b.Shape[d]
					mul := int64(1)
					for dd := d + 1; dd < 3; dd++ {
						mul *= hdr.Shape[dd]
					}
					off += (b.Origin[d] + idx) * mul
				}
				if string(b.Data[4*e:4*e+4]) != string(asBytes(want[off:off+1])) {
					t.Fatalf("Blocks %v: block at %v element %d differs", sel, b.Origin, e)
				}
			}
		}
	}
}

// TestReadStringsLarge reads strings whose blocks exceed the by-reference
// threshold.
func TestReadStringsLarge(t *testing.T) {
	ctx := context.Background()
	c := dial(t)
	s, err := c.CreateArray(ctx, "long-names", client.ArraySpec{Shape: []int64{400}, DataType: "string", ChunkShape: []int64{150}})
	if err != nil {
		t.Fatal(err)
	}
	want := make([]string, 400)
	for i := range want {
		want[i] = fmt.Sprintf("%d:%s", i, strings.Repeat("ü", i*3))
	}
	if _, err := client.WriteStrings(ctx, s, nil, want); err != nil {
		t.Fatal(err)
	}
	got, _, err := client.ReadStrings(ctx, s, nil)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("ReadStrings differs (%v)", err)
	}
}

// dial connects to the examples' gateway for the length of the test.
func dial(t *testing.T, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.Dial(context.Background(), addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func asBytes(v []float32) []byte {
	b := make([]byte, 0, 4*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

// TestConcurrentReadsRecycleBuffers reads random slabs from many
// goroutines at once: the gateway recycles chunk and block buffers as soon
// as gRPC has written them, and a buffer recycled too early would show up
// here as another read's values.
func TestConcurrentReadsRecycleBuffers(t *testing.T) {
	ctx := context.Background()
	c := dial(t)
	const n = 1000
	a, err := c.CreateArray(ctx, "recycle", client.ArraySpec{Shape: []int64{n, n}, DataType: "int32", ChunkShape: []int64{128, 128}})
	if err != nil {
		t.Fatal(err)
	}
	all := make([]int32, n*n)
	for i := range all {
		all[i] = int32(i)
	}
	if _, err := client.Write(ctx, a, nil, all); err != nil {
		t.Fatal(err)
	}
	var g errgroup.Group
	for w := range 8 {
		g.Go(func() error {
			r := rand.New(rand.NewPCG(uint64(w), 9))
			for range 25 {
				var sel client.Selection
				for range 2 {
					lo := r.Int64N(n)
					hi := lo + 1 + r.Int64N(n-lo)
					if r.IntN(2) == 0 { // whole chunks
						lo, hi = lo/128*128, min(n, (hi+127)/128*128)
					}
					sel = append(sel, client.Slice{Start: lo, Stop: hi, Step: 1 + r.Int64N(2)})
				}
				got, shape, err := client.Read[int32](ctx, a, sel)
				if err != nil {
					return err
				}
				k := 0
				for i := sel[0].Start; i < sel[0].Stop; i += sel[0].Step {
					for j := sel[1].Start; j < sel[1].Stop; j += sel[1].Step {
						if got[k] != int32(i*n+j) {
							return fmt.Errorf("read %v (shape %v): element (%d, %d) is %d", sel, shape, i, j, got[k])
						}
						k++
					}
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}

// TestSharedMemoryReads reads through the gateway's shared memory (the
// default on loopback) and through the socket, and compares; the mapping
// is kept for the next read, and reads of strings and small slabs take the
// socket.
func TestSharedMemoryReads(t *testing.T) {
	ctx := context.Background()
	c := dial(t)
	sock := dial(t, client.WithSharedMemory(false))
	const n = 1024
	a, err := c.CreateArray(ctx, "shared", client.ArraySpec{Shape: []int64{n, n}, DataType: "float64", ChunkShape: []int64{100, 300}})
	if err != nil {
		t.Fatal(err)
	}
	all := make([]float64, n*n)
	for i := range all {
		all[i] = float64(i) / 3
	}
	if _, err := client.Write(ctx, a, nil, all); err != nil {
		t.Fatal(err)
	}
	sa, err := sock.OpenArray(ctx, "shared")
	if err != nil {
		t.Fatal(err)
	}
	for _, sel := range []client.Selection{nil, client.MustParseSelection("3:1000,0:1024:2"), client.MustParseSelection("0:1024:3,1:1024")} {
		viaShm, shape, err := client.Read[float64](ctx, a, sel)
		if err != nil {
			t.Fatal(err)
		}
		viaSocket, _, err := client.Read[float64](ctx, sa, sel)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(viaShm, viaSocket) {
			t.Fatalf("selection %v (shape %v): shared-memory and socket reads differ", sel, shape)
		}
		full := client.Selection{{Start: 0, Stop: n, Step: 1}, {Start: 0, Stop: n, Step: 1}}
		if sel != nil {
			full = sel
		}
		k := 0
		for i := full[0].Start; i < full[0].Stop; i += full[0].Step {
			for j := full[1].Start; j < full[1].Stop; j += full[1].Step {
				if viaShm[k] != all[i*n+j] {
					t.Fatalf("selection %v: element (%d, %d) = %v, want %v", sel, i, j, viaShm[k], all[i*n+j])
				}
				k++
			}
		}
		if got := client.IdleMappings(c); got != 1 {
			t.Fatalf("after a shared-memory read, %d idle mappings, want 1 (the segment, kept for the next read)", got)
		}
		if got := client.IdleMappings(sock); got != 0 {
			t.Fatalf("a client with shared memory off mapped %d segments", got)
		}
	}
	// Blocks, whose data the caller keeps, copies it out of the segment
	// (a fresh client, to see it map the segment).
	bc := dial(t)
	ba, err := bc.OpenArray(ctx, "shared")
	if err != nil {
		t.Fatal(err)
	}
	_, blocks, err := ba.Blocks(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var seen int64
	for b, err := range blocks {
		if err != nil {
			t.Fatal(err)
		}
		k := 0
		for i := b.Origin[0]; i < b.Origin[0]+b.Shape[0]; i++ {
			for j := b.Origin[1]; j < b.Origin[1]+b.Shape[1]; j++ {
				if v := math.Float64frombits(binary.LittleEndian.Uint64(b.Data[8*k:])); v != all[i*n+j] {
					t.Fatalf("block at %v: element (%d, %d) = %v, want %v", b.Origin, i, j, v, all[i*n+j])
				}
				k++
			}
		}
		seen += b.Shape[0] * b.Shape[1]
	}
	if seen != n*n {
		t.Fatalf("Blocks yielded %d elements, want %d", seen, n*n)
	}
	if got := client.IdleMappings(bc); got != 1 {
		t.Fatalf("after Blocks, %d idle mappings, want 1", got)
	}
}

// TestSharedMatchesSocket reads random slabs (strides included) of random
// arrays (ranks 1–3, sharded or not, raw or zstd, fixed-size and string
// types) through the gateway's shared memory and through the socket, with
// ReadBytes and with Blocks, and requires the same elements. The test
// gateway's 1 MiB segments make large reads wrap the ring.
func TestSharedMatchesSocket(t *testing.T) {
	ctx := context.Background()
	c := dial(t)
	sock := dial(t, client.WithSharedMemory(false))
	r := rand.New(rand.NewPCG(11, 12))
	types := []struct {
		name string
		size int
	}{{"uint8", 1}, {"int16", 2}, {"float32", 4}, {"float64", 8}, {"string", 0}}
	for it := range 16 {
		typ := types[r.IntN(len(types))]
		nd := 1 + r.IntN(3)
		shape, chunks := make([]int64, nd), make([]int64, nd)
		var shards []int64
		sharded := r.IntN(3) == 0
		total := int64(1)
		for d := range nd {
			// Large enough in all (≥ 256 Ki elements) for shared memory.
			shape[d] = []int64{1 << 18, 700, 90}[nd-1] + r.Int64N(50)
			chunks[d] = 1 + r.Int64N(shape[d]/3+1)
			total *= shape[d]
		}
		if sharded {
			shards = make([]int64, nd)
			for d := range nd {
				shards[d] = chunks[d] * (1 + r.Int64N(3))
			}
		}
		codecs := `[{"name":"bytes","configuration":{"endian":"little"}}]`
		switch {
		case typ.size == 0:
			codecs = `[{"name":"vlen-utf8"}]`
		case r.IntN(2) == 0:
			codecs = ""
		}
		path := fmt.Sprintf("match/%d", it)
		a, err := sock.CreateArray(ctx, path, client.ArraySpec{Shape: shape, DataType: typ.name, ChunkShape: chunks, ShardShape: shards, Codecs: codecs})
		if err != nil {
			t.Fatalf("%s %v chunks %v shards %v: %v", typ.name, shape, chunks, shards, err)
		}
		if typ.size == 0 {
			src := make([]string, total)
			for i := range src {
				src[i] = strings.Repeat("x", int(i%5)) + fmt.Sprint(i)
			}
			if _, err := client.WriteStrings(ctx, a, nil, src); err != nil {
				t.Fatal(err)
			}
		} else {
			src := make([]byte, total*int64(typ.size))
			for i := range src {
				src[i] = byte(i*7 + i/251)
			}
			one := func(yield func(client.Block, error) bool) {
				yield(client.Block{Origin: make([]int64, nd), Shape: shape, Data: src}, nil)
			}
			if _, err := a.WriteBlocks(ctx, nil, one); err != nil {
				t.Fatal(err)
			}
		}
		sa, err := c.OpenArray(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			sel := make(client.Selection, nd)
			for d := range nd {
				lo := r.Int64N(shape[d] / 4)
				sel[d] = client.Slice{Start: lo, Stop: shape[d] - r.Int64N(shape[d]/4), Step: 1 + r.Int64N(2)}
			}
			if r.IntN(3) == 0 {
				sel = nil
			}
			what := fmt.Sprintf("%s %v chunks %v shards %v codecs %q, selection %v", typ.name, shape, chunks, shards, codecs, sel)
			if typ.size > 0 {
				_, viaShm, err := client.ReadBytes(ctx, sa, sel)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				_, viaSock, err := client.ReadBytes(ctx, a, sel)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				if !bytes.Equal(viaShm, viaSock) {
					t.Fatalf("%s: ReadBytes differs between shared memory and the socket", what)
				}
			}
			if got, want := blockElements(t, sa, sel, typ.size), blockElements(t, a, sel, typ.size); !slices.Equal(got, want) {
				t.Fatalf("%s: Blocks differ between shared memory and the socket", what)
			}
		}
	}
	if got := client.IdleMappings(c); got == 0 {
		t.Fatal("no read went through shared memory")
	}
}

// blockElements reads sel with Blocks and returns the elements (as
// strings of their bytes) in C order of the slab.
func blockElements(t *testing.T, a *client.Array, sel client.Selection, size int) []string {
	t.Helper()
	hdr, blocks, err := a.Blocks(context.Background(), sel)
	if err != nil {
		t.Fatal(err)
	}
	n := int64(1)
	for _, s := range hdr.Shape {
		n *= s
	}
	out := make([]string, n)
	for b, err := range blocks {
		if err != nil {
			t.Fatal(err)
		}
		k := 0
		idx := make([]int64, len(b.Shape))
		for {
			if len(b.Shape) > 0 && slices.Contains(b.Shape, 0) {
				break
			}
			pos := int64(0)
			for d := range idx {
				pos = pos*hdr.Shape[d] + b.Origin[d] + idx[d]
			}
			if size > 0 {
				out[pos] = string(b.Data[k*size : (k+1)*size])
			} else {
				out[pos] = string(b.Data[b.Offsets[k]:b.Offsets[k+1]])
			}
			k++
			d := len(idx) - 1
			for ; d >= 0; d-- {
				if idx[d]++; idx[d] < b.Shape[d] {
					break
				}
				idx[d] = 0
			}
			if d < 0 {
				break
			}
		}
	}
	return out
}
