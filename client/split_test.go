package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"github.com/zarrgate/zarrgate/client"
	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/gateway"
	"github.com/zarrgate/zarrgate/gateway/arrayserver"
	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/storesvc/memory"
)

// TestSplitReadsAgree reads random slabs (whole, contiguous, strided) of
// chunked, sharded and compressed arrays of several types through a client
// with three connections, whose large socket reads are split into bands
// (checked: SplitCuts), against the same reads through one connection and
// against the values written.
func TestSplitReadsAgree(t *testing.T) {
	ctx := context.Background()
	client.SetSplitMin(t, 1000)
	one := dial(t, client.WithSharedMemory(false))
	three := dial(t, client.WithSharedMemory(false), client.WithConnections(3))
	zstd := `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":1}}]`
	layouts := []struct {
		name, dtype, codecs string
		chunks, shards      []int64
	}{
		{"chunked", "float32", "", []int64{7, 16, 50}, nil},
		{"zstd", "int16", zstd, []int64{10, 32, 64}, nil},
		{"sharded", "float64", "", []int64{5, 16, 25}, []int64{10, 32, 50}},
		{"bool", "bool", "", []int64{4, 64, 100}, nil},
	}
	shape := []int64{40, 64, 100}
	r := rand.New(rand.NewPCG(3, 4))
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			a, err := one.CreateArray(ctx, "split-"+l.name, client.ArraySpec{Shape: shape, DataType: l.dtype, ChunkShape: l.chunks, ShardShape: l.shards, Codecs: l.codecs})
			if err != nil {
				t.Fatal(err)
			}
			all := make([]byte, 0, 40*64*100*8)
			switch l.dtype {
			case "float32":
				v := make([]float32, 40*64*100)
				for i := range v {
					v[i] = float32(i) * 0.5
				}
				_, err = client.Write(ctx, a, nil, v)
			case "int16":
				v := make([]int16, 40*64*100)
				for i := range v {
					v[i] = int16(i * 7)
				}
				_, err = client.Write(ctx, a, nil, v)
			case "float64":
				v := make([]float64, 40*64*100)
				for i := range v {
					v[i] = float64(i) / 3
				}
				_, err = client.Write(ctx, a, nil, v)
			case "bool":
				v := make([]bool, 40*64*100)
				for i := range v {
					v[i] = i%3 == 0
				}
				_, err = client.Write(ctx, a, nil, v)
			}
			if err != nil {
				t.Fatal(err)
			}
			_, all, err = client.ReadBytes(ctx, a, nil) // through one connection
			if err != nil {
				t.Fatal(err)
			}
			es := int64(len(all)) / (40 * 64 * 100)
			b, err := three.OpenArray(ctx, "split-"+l.name)
			if err != nil {
				t.Fatal(err)
			}
			splits := 0
			for n := range 30 {
				var sel client.Selection
				if n > 0 {
					sel = make(client.Selection, 3)
					for d, s := range shape {
						lo := r.Int64N(s / 2)
						hi := s - r.Int64N(s/4)
						step := int64(1)
						if n%3 == 2 {
							step = 1 + r.Int64N(3)
						}
						sel[d] = client.Slice{Start: lo, Stop: hi, Step: step}
					}
				}
				if len(client.SplitCuts(b, sel)) > 2 {
					splits++
				}
				// Expected: the elements of sel, from the whole array.
				var want []byte
				out := sel.Shape(shape)
				full := sel
				if full == nil {
					full = client.Selection{{Start: 0, Stop: 40, Step: 1}, {Start: 0, Stop: 64, Step: 1}, {Start: 0, Stop: 100, Step: 1}}
				}
				for i := range out[0] {
					for j := range out[1] {
						for k := range out[2] {
							x := full[0].Start + i*max(full[0].Step, 1)
							y := full[1].Start + j*max(full[1].Step, 1)
							z := full[2].Start + k*max(full[2].Step, 1)
							off := ((x*64+y)*100 + z) * es
							want = append(want, all[off:off+es]...)
						}
					}
				}
				_, got, err := client.ReadBytes(ctx, b, sel)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, want) {
					t.Fatalf("split ReadBytes %v differs", sel)
				}
				_, unsplit, err := client.ReadBytes(ctx, a, sel)
				if err != nil || !slices.Equal(unsplit, got) {
					t.Fatalf("ReadBytes %v through one connection differs (%v)", sel, err)
				}
				if l.dtype == "float32" {
					f := make([]float32, len(want)/4)
					if err := client.ReadInto(ctx, b, sel, f); err != nil {
						t.Fatal(err)
					}
					if string(asBytes(f)) != string(want) {
						t.Fatalf("split ReadInto %v differs", sel)
					}
				}
			}
			if splits < 20 {
				t.Fatalf("only %d of 30 reads were split", splits)
			}
		})
	}
	// Strings are not split, and read the same through either client.
	s, err := one.CreateArray(ctx, "split-strings", client.ArraySpec{Shape: []int64{3000}, DataType: "string", ChunkShape: []int64{100}})
	if err != nil {
		t.Fatal(err)
	}
	want := make([]string, 3000)
	for i := range want {
		want[i] = fmt.Sprint("s", i)
	}
	if _, err := client.WriteStrings(ctx, s, nil, want); err != nil {
		t.Fatal(err)
	}
	ss, err := three.OpenArray(ctx, "split-strings")
	if err != nil {
		t.Fatal(err)
	}
	if got, _, err := client.ReadStrings(ctx, ss, nil); err != nil || !slices.Equal(got, want) {
		t.Fatalf("ReadStrings through three connections differs (%v)", err)
	}
	if _, _, err := client.ReadBytes(ctx, ss, nil); !errors.Is(err, errs.InvalidArgument) {
		t.Fatalf("ReadBytes of strings: %v, want InvalidArgument", err)
	}
}

// TestSplitCuts: bands are cut at chunk (shard) boundaries, strided
// selections included, and small slabs, shared memory and one connection
// are not split.
func TestSplitCuts(t *testing.T) {
	ctx := context.Background()
	client.SetSplitMin(t, 1000)
	three := dial(t, client.WithSharedMemory(false), client.WithConnections(3))
	a, err := three.CreateArray(ctx, "cuts", client.ArraySpec{Shape: []int64{100, 100}, DataType: "uint8", ChunkShape: []int64{10, 100}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := three.CreateArray(ctx, "cuts-sharded", client.ArraySpec{Shape: []int64{100, 100}, DataType: "uint8", ChunkShape: []int64{10, 100}, ShardShape: []int64{20, 100}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		a    *client.Array
		sel  client.Selection
		want []int64
	}{
		{a, nil, []int64{0, 30, 70, 100}},
		{s, nil, []int64{0, 40, 60, 100}},
		{a, client.Selection{{Start: 5, Stop: 95, Step: 1}, {Start: 0, Stop: 100, Step: 1}}, []int64{0, 35, 65, 90}},
		{a, client.Selection{{Start: 1, Stop: 100, Step: 3}, {Start: 0, Stop: 100, Step: 1}}, []int64{0, 10, 23, 33}},
		{a, client.Selection{{Start: 0, Stop: 100, Step: 1}, {Start: 0, Stop: 5, Step: 1}}, nil}, // 500 elements
		{a, client.Selection{{Start: 0, Stop: 1, Step: 1}, {Start: 0, Stop: 100, Step: 1}}, nil}, // one row
		{a, client.Selection{{Start: 0, Stop: 100, Step: 1}}, nil},                               // another rank
	} {
		if got := client.SplitCuts(c.a, c.sel); !slices.Equal(got, c.want) {
			t.Errorf("%s %v: cuts %v, want %v", c.a.Path, c.sel, got, c.want)
		}
	}
	one := dial(t, client.WithSharedMemory(false))
	if a1, err := one.OpenArray(ctx, "cuts"); err != nil || client.SplitCuts(a1, nil) != nil {
		t.Errorf("one connection: cuts %v (%v)", client.SplitCuts(a1, nil), err)
	}
	shared := dial(t, client.WithSharedMemory(true), client.WithConnections(3))
	if a2, err := shared.OpenArray(ctx, "cuts"); err != nil || client.SplitCuts(a2, nil) != nil {
		t.Errorf("shared memory: cuts %v (%v)", client.SplitCuts(a2, nil), err)
	}
}

// TestSplitReadFaults: when one band's call fails (an error status, a
// header of another shape or type, a block outside the band), the split
// read fails with that band's error and the other bands' calls are
// cancelled: a band the gateway holds open until its call ends does not
// hang the read.
func TestSplitReadFaults(t *testing.T) {
	ctx := context.Background()
	client.SetSplitMin(t, 1000)
	hdr := func(shape []uint64, dtype string, es uint32) *gatewayv1.ReadSlabResponse {
		return &gatewayv1.ReadSlabResponse{Message: &gatewayv1.ReadSlabResponse_Header{Header: &gatewayv1.SlabHeader{
			Shape: shape, DataType: dtype, ByteOrder: gatewayv1.ByteOrder_BYTE_ORDER_LITTLE_ENDIAN, ElementSize: es}}}
	}
	bandShape := func(req *gatewayv1.ReadSlabRequest) []uint64 {
		var s []uint64
		for _, sl := range req.GetSelection() {
			s = append(s, sl.GetStop()-sl.GetStart())
		}
		return s
	}
	for _, c := range []struct {
		name  string
		code  *errs.Kind
		fault func(*gatewayv1.ReadSlabRequest, grpc.ServerStreamingServer[gatewayv1.ReadSlabResponse]) error
	}{
		{"error status", errs.ResourceExhausted, func(*gatewayv1.ReadSlabRequest, grpc.ServerStreamingServer[gatewayv1.ReadSlabResponse]) error {
			return status.Error(codes.ResourceExhausted, "over budget")
		}},
		// Headers that disagree with the band, followed by blocks that
		// fill the slab they announce.
		{"header of another shape", errs.DataLoss, func(req *gatewayv1.ReadSlabRequest, s grpc.ServerStreamingServer[gatewayv1.ReadSlabResponse]) error {
			shape := bandShape(req)
			return sendFull(s, hdr([]uint64{shape[0] - 1, shape[1]}, "float32", 4))
		}},
		{"header of another type", errs.DataLoss, func(req *gatewayv1.ReadSlabRequest, s grpc.ServerStreamingServer[gatewayv1.ReadSlabResponse]) error {
			return sendFull(s, hdr(bandShape(req), "int32", 4))
		}},
		{"block outside the band", errs.DataLoss, func(req *gatewayv1.ReadSlabRequest, s grpc.ServerStreamingServer[gatewayv1.ReadSlabResponse]) error {
			shape := bandShape(req)
			if err := s.Send(hdr(shape, "float32", 4)); err != nil {
				return err
			}
			return s.Send(&gatewayv1.ReadSlabResponse{Message: &gatewayv1.ReadSlabResponse_Block{Block: &gatewayv1.Block{
				Origin: []uint64{shape[0], 0}, Shape: []uint64{1, shape[1]}, Data: make([]byte, 4*shape[1])}}})
		}},
		{"blocks missing", errs.DataLoss, func(req *gatewayv1.ReadSlabRequest, s grpc.ServerStreamingServer[gatewayv1.ReadSlabResponse]) error {
			return s.Send(hdr(bandShape(req), "float32", 4))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			// The first band's call waits until the failing band's
			// error has reached the client and cancelled it.
			held := make(chan struct{})
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
			g := gateway.New(memory.New(), codecsvc.NewLocal(), gateway.Config{})
			gatewayv1.RegisterArrayServiceServer(srv, &faulty{Server: arrayserver.NewServer(g), fault: c.fault, held: held, start: make(chan struct{})})
			go srv.Serve(lis)
			t.Cleanup(srv.Stop)
			cl, err := client.Dial(ctx, lis.Addr().String(), client.WithSharedMemory(false), client.WithConnections(2))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cl.Close() })
			a, err := cl.CreateArray(ctx, "a", client.ArraySpec{Shape: []int64{64, 64}, DataType: "float32", ChunkShape: []int64{16, 64}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := client.Write(ctx, a, nil, make([]float32, 64*64)); err != nil {
				t.Fatal(err)
			}
			if cuts := client.SplitCuts(a, nil); len(cuts) != 3 {
				t.Fatalf("cuts %v, want two bands", cuts)
			}
			err = client.ReadInto(ctx, a, nil, make([]float32, 64*64))
			if !errors.Is(err, c.code) {
				t.Fatalf("split read: %v, want %v", err, c.code)
			}
			<-held // the held band's call ended: cancelled by the client
		})
	}
}

// sendFull sends header h and one block filling its slab.
func sendFull(s grpc.ServerStreamingServer[gatewayv1.ReadSlabResponse], h *gatewayv1.ReadSlabResponse) error {
	if err := s.Send(h); err != nil {
		return err
	}
	shape := h.GetHeader().GetShape()
	n := uint64(h.GetHeader().GetElementSize())
	for _, d := range shape {
		n *= d
	}
	return s.Send(&gatewayv1.ReadSlabResponse{Message: &gatewayv1.ReadSlabResponse_Block{Block: &gatewayv1.Block{
		Origin: make([]uint64, len(shape)), Shape: shape, Data: make([]byte, n)}}})
}

// faulty is a gateway whose ReadSlab sends the header of the band at row 0
// and holds its call open until the client cancels it (then closes held), and answers the
// other bands with fault once that call has begun.
type faulty struct {
	*arrayserver.Server
	fault func(req *gatewayv1.ReadSlabRequest, stream grpc.ServerStreamingServer[gatewayv1.ReadSlabResponse]) error
	held  chan struct{}
	once  sync.Once
	start chan struct{} // closed when the held call has begun
}

func (f *faulty) ReadSlab(req *gatewayv1.ReadSlabRequest, stream grpc.ServerStreamingServer[gatewayv1.ReadSlabResponse]) error {
	if len(req.GetSelection()) > 0 && req.GetSelection()[0].GetStart() == 0 {
		defer close(f.held)
		sel := req.GetSelection()
		if err := stream.Send(&gatewayv1.ReadSlabResponse{Message: &gatewayv1.ReadSlabResponse_Header{Header: &gatewayv1.SlabHeader{
			Shape: []uint64{sel[0].GetStop(), sel[1].GetStop()}, DataType: "float32", ByteOrder: gatewayv1.ByteOrder_BYTE_ORDER_LITTLE_ENDIAN, ElementSize: 4}}}); err != nil {
			return err
		}
		f.once.Do(func() { close(f.start) })
		<-stream.Context().Done()
		return stream.Context().Err()
	}
	<-f.start // fail only once the held call is in progress
	return f.fault(req, stream)
}
