package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"os"
	"testing"

	"github.com/zarrgate/zarrgate/client"
	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/gateway"
	"github.com/zarrgate/zarrgate/gateway/arrayserver"
	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/memory"
)

// addr is a gateway the examples talk to: an in-memory store served on
// loopback by TestMain, as `zarrgate serve --root memory://` would.
var addr string

func TestMain(m *testing.M) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	// Small shared-memory segments, and few, so that large reads wrap the
	// ring and concurrent ones also take the inline path.
	arrayserver.NewServer(gateway.New(memory.New(), codecsvc.NewLocal(), gateway.Config{
		SharedMemory: true, SharedMemoryBytes: 1 << 20, MaxSharedReads: 2})).Register(srv)
	go srv.Serve(lis)
	addr = lis.Addr().String()
	code := m.Run()
	srv.Stop()
	os.Exit(code)
}

func Example() {
	ctx := context.Background()
	c, err := client.Dial(ctx, addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	a, err := c.CreateArray(ctx, "temperature", client.ArraySpec{
		Shape: []int64{4, 6}, DataType: "float32", ChunkShape: []int64{2, 3},
		DimensionNames: []string{"y", "x"}, FillValue: "-1",
	})
	if err != nil {
		log.Fatal(err)
	}
	// Write the first two rows; the rest keeps the fill value.
	row := []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	if _, err := client.Write(ctx, a, client.MustParseSelection("0:2,0:6"), row); err != nil {
		log.Fatal(err)
	}
	// Every other column of rows 1 to 3.
	vals, shape, err := client.Read[float32](ctx, a, client.MustParseSelection("1:4,0:6:2"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(shape, vals)
	// Output: [3 3] [7 9 11 -1 -1 -1 -1 -1 -1]
}

func ExampleArray_Blocks() {
	ctx := context.Background()
	c, _ := client.Dial(ctx, addr)
	defer c.Close()
	a, err := c.CreateArray(ctx, "counts", client.ArraySpec{Shape: []int64{4, 4}, DataType: "int32", ChunkShape: []int64{2, 4}})
	if err != nil {
		log.Fatal(err)
	}
	client.Write(ctx, a, nil, []int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	// Stream a slab block by block, however large: a block is a box of the
	// slab with its origin; here one per chunk.
	hdr, blocks, err := a.Blocks(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	total := 0
	for b, err := range blocks {
		if err != nil {
			log.Fatal(err)
		}
		total += len(b.Data)
	}
	fmt.Println(hdr.Shape, hdr.DataType, total, "bytes")
	// Output: [4 4] int32 64 bytes
}

func ExampleReadShared() {
	ctx := context.Background()
	c, _ := client.Dial(ctx, addr) // loopback: shared memory
	defer c.Close()
	a, err := c.CreateArray(ctx, "grid", client.ArraySpec{Shape: []int64{3, 4}, DataType: "float64", ChunkShape: []int64{2, 2}})
	if err != nil {
		log.Fatal(err)
	}
	client.Write(ctx, a, nil, []float64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11})
	// Memory the gateway on this host writes the slab into itself, saving
	// the copies through its segment; reused for read after read.
	buf, err := client.NewSharedBuffer(3 * 4 * 8)
	if err != nil {
		log.Fatal(err)
	}
	defer buf.Close() // the values read are invalid after
	v, err := client.ReadShared[float64](ctx, a, client.MustParseSelection("1:3,1:4"), buf)
	if err != nil {
		log.Fatal(err)
	}
	inPlace, _ := buf.InPlace()
	fmt.Println(v, inPlace)
	// Output: [5 6 7 9 10 11] true
}

func ExampleClient_Store() {
	ctx := context.Background()
	c, _ := client.Dial(ctx, addr)
	defer c.Close()
	s, err := c.Store(ctx) // the raw Zarr store behind the gateway
	if err != nil {
		log.Fatal(err)
	}
	gen, _ := s.Set(ctx, "notes/hello", bytes.NewReader([]byte("hello, zarr")), storesvc.Condition{})
	// Only if nobody changed it since: a conditional write.
	_, err = s.Set(ctx, "notes/hello", bytes.NewReader([]byte("hello again")), storesvc.Condition{IfGenerationMatch: gen})
	fmt.Println(err == nil)
	_, err = s.Set(ctx, "notes/hello", bytes.NewReader([]byte("stale")), storesvc.Condition{IfGenerationMatch: gen})
	fmt.Println(errors.Is(err, storesvc.ErrPrecondition))
	obj, _ := s.Get(ctx, "notes/hello", storesvc.Suffix(5))
	tail, _ := io.ReadAll(obj)
	fmt.Println(string(tail))
	_, err = c.OpenArray(ctx, "nowhere")
	fmt.Println(errors.Is(err, storesvc.ErrNotFound))
	// Output:
	// true
	// true
	// again
	// true
}

func ExampleParseSelection() {
	shape := []int64{100, 100, 30, 10}
	sel, _ := client.ParseSelection("0:10, 5:20:2, :, 7", shape)
	fmt.Println(sel, sel.Shape(shape))
	sel, _ = client.ParseSelection("-1, ..., -3:", shape)
	fmt.Println(sel, sel.Shape(shape))
	_, err := client.ParseSelection("0:10,0:a", shape)
	fmt.Println(err)
	// Output:
	// [{0 10 1} {5 20 2} {0 30 1} {7 8 1}] [10 8 30 1]
	// [{99 100 1} {0 100 1} {0 30 1} {7 10 1}] [1 100 30 3]
	// selection dimension 1 ("0:a"): stop "a" is not an integer
}

func TestTypedReadsCheckTypes(t *testing.T) {
	ctx := context.Background()
	c, _ := client.Dial(ctx, addr)
	defer c.Close()
	a, err := c.CreateArray(ctx, "typed", client.ArraySpec{Shape: []int64{3}, DataType: "int16"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := client.Read[float64](ctx, a, nil); err == nil {
		t.Fatal("reading int16 into float64 succeeded")
	}
	if err := client.ReadInto(ctx, a, nil, make([]int16, 2)); err == nil {
		t.Fatal("reading 3 elements into 2 succeeded")
	}
	if _, err := client.Write(ctx, a, nil, []int16{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	s, err := c.CreateArray(ctx, "names", client.ArraySpec{Shape: []int64{2, 2}, DataType: "string"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.WriteStrings(ctx, s, nil, []string{"a", "", "ünï", "d"}); err != nil {
		t.Fatal(err)
	}
	got, shape, err := client.ReadStrings(ctx, s, client.MustParseSelection("0:2,1:2"))
	if err != nil || fmt.Sprint(shape, got) != "[2 1] [ d]" {
		t.Fatalf("ReadStrings = %v %q, %v", shape, got, err)
	}
}
