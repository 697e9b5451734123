package client_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"github.com/zarrgate/zarrgate/client"
	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/gateway"
	"github.com/zarrgate/zarrgate/gateway/arrayserver"
	"github.com/zarrgate/zarrgate/internal/grpcerr"
	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/internal/shm"
	"github.com/zarrgate/zarrgate/storesvc/file"
)

// serveFiles serves a gateway over a file store in a temporary directory
// (the store whose objects read into several buffers at once) and returns
// its address.
func serveFiles(t testing.TB, cfg gateway.Config) string {
	t.Helper()
	st, err := file.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	arrayserver.NewServer(gateway.New(st, codecsvc.NewLocal(), cfg)).Register(srv)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// TestReadSharedAgrees reads slabs of arrays of every layout into a
// SharedBuffer, which the gateway writes itself, and checks them against
// the socket's ReadInto: whole chunks (read straight into their rows when
// stored raw), partial edge chunks, chunks never written (the fill value),
// strided selections, one element.
func TestReadSharedAgrees(t *testing.T) {
	ctx := context.Background()
	addr := serveFiles(t, gateway.Config{SharedMemory: true})
	c, err := client.Dial(ctx, addr, client.WithSharedMemory(true))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sock, err := client.Dial(ctx, addr, client.WithSharedMemory(false))
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	const raw = `[{"name":"bytes","configuration":{"endian":"little"}}]`
	layouts := []struct {
		name string
		spec client.ArraySpec
	}{
		{"uncompressed", client.ArraySpec{Codecs: raw}},
		{"zstd", client.ArraySpec{}},
		{"sharded", client.ArraySpec{ShardShape: []int64{128, 256}}},
		{"sharded uncompressed", client.ArraySpec{ShardShape: []int64{128, 256}, Codecs: raw}},
	}
	shape := []int64{300, 500} // edge chunks of 44 rows, 116 columns
	all := make([]int32, 300*500)
	for i := range all {
		all[i] = int32(i)
	}
	sels := []client.Selection{
		nil,
		{{Start: 0, Stop: 256, Step: 1}, {Start: 0, Stop: 500, Step: 1}},    // whole chunks, whole rows
		{{Start: 64, Stop: 192, Step: 1}, {Start: 128, Stop: 384, Step: 1}}, // whole chunks, row runs
		{{Start: 13, Stop: 290, Step: 1}, {Start: 7, Stop: 499, Step: 1}},
		{{Start: 250, Stop: 300, Step: 1}, {Start: 380, Stop: 500, Step: 1}}, // edge chunks only
		{{Start: 1, Stop: 300, Step: 3}, {Start: 0, Stop: 500, Step: 7}},
		{{Start: 299, Stop: 300, Step: 1}, {Start: 499, Stop: 500, Step: 1}},
	}
	buf, err := client.NewSharedBuffer(300 * 500 * 4)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Close()
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			spec := l.spec
			spec.Shape, spec.DataType, spec.ChunkShape, spec.FillValue = shape, "int32", []int64{64, 128}, "-7"
			path := strings.ReplaceAll(l.name, " ", "-")
			a, err := c.CreateArray(ctx, path, spec)
			if err != nil {
				t.Fatal(err)
			}
			// Rows 0..191 and 256..299 written; 192..255 are missing
			// chunks (sharded: inner chunks of a shard that exists).
			if _, err := client.Write(ctx, a, client.Selection{{Start: 0, Stop: 192, Step: 1}, {Start: 0, Stop: 500, Step: 1}}, all[:192*500]); err != nil {
				t.Fatal(err)
			}
			if _, err := client.Write(ctx, a, client.Selection{{Start: 256, Stop: 300, Step: 1}, {Start: 0, Stop: 500, Step: 1}}, all[256*500:]); err != nil {
				t.Fatal(err)
			}
			as, err := sock.OpenArray(ctx, path)
			if err != nil {
				t.Fatal(err)
			}
			for _, sel := range sels {
				want := make([]int32, product(sel.Shape(shape)))
				if err := client.ReadInto(ctx, as, sel, want); err != nil {
					t.Fatal(err)
				}
				if sel == nil && (want[0] != 0 || want[200*500] != -7 || want[299*500+499] != 299*500+499) {
					t.Fatalf("the socket's read is not what was written: %d %d %d", want[0], want[200*500], want[299*500+499])
				}
				clear(buf.Bytes())
				got, err := client.ReadShared[int32](ctx, a, sel, buf)
				if err != nil {
					t.Fatalf("%v: %v", sel, err)
				}
				if ok, why := buf.InPlace(); !ok {
					t.Fatalf("%v: not written in place: %s", sel, why)
				}
				if !slices.Equal(got, want) {
					t.Fatalf("%v: ReadShared differs from ReadInto", sel)
				}
			}
		})
	}
}

func product(s []int64) int64 {
	n := int64(1)
	for _, v := range s {
		n *= v
	}
	return n
}

// TestReadSharedFallback: without shared memory on either side the slab
// is copied into the buffer (InPlace false, saying why), and reads that
// cannot be made fail with a clear code.
func TestReadSharedFallback(t *testing.T) {
	ctx := context.Background()
	on := serveFiles(t, gateway.Config{SharedMemory: true})
	off := serveFiles(t, gateway.Config{SharedMemory: false})
	want := make([]int32, 200*300)
	for i := range want {
		want[i] = int32(i * 3)
	}
	buf, err := client.NewSharedBuffer(200 * 300 * 4)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Close()
	for _, tc := range []struct {
		name   string
		addr   string
		shared bool
		why    string
	}{
		{"client without shared memory", on, false, "shared memory is off for this client"},
		{"gateway without shared memory", off, true, "shared memory is off on this gateway"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := client.Dial(ctx, tc.addr, client.WithSharedMemory(tc.shared))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			a, err := c.CreateArray(ctx, "a", client.ArraySpec{Shape: []int64{200, 300}, DataType: "int32", ChunkShape: []int64{64, 64}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := client.Write(ctx, a, nil, want); err != nil {
				t.Fatal(err)
			}
			clear(buf.Bytes())
			got, err := client.ReadShared[int32](ctx, a, nil, buf)
			if err != nil {
				t.Fatal(err)
			}
			ok, why := buf.InPlace()
			if ok || !strings.Contains(why, tc.why) {
				t.Fatalf("in place %v (%q), want a copy because %q", ok, why, tc.why)
			}
			if !slices.Equal(got, want) {
				t.Fatal("the copied slab differs")
			}
		})
	}
	c, err := client.Dial(ctx, on, client.WithSharedMemory(true))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, err := c.OpenArray(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.ReadShared[float32](ctx, a, nil, buf); grpcerr.Code(err) != codes.InvalidArgument {
		t.Fatalf("into float32: %v, want InvalidArgument", err)
	}
	small, err := client.NewSharedBuffer(200*300*4 - 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.ReadShared[int32](ctx, a, nil, small); grpcerr.Code(err) != codes.InvalidArgument {
		t.Fatalf("into a buffer too small: %v, want InvalidArgument", err)
	}
	small.Close()
	if _, err := client.ReadShared[int32](ctx, a, nil, small); grpcerr.Code(err) != codes.FailedPrecondition {
		t.Fatalf("into a closed buffer: %v, want FailedPrecondition", err)
	}
}

// TestReadSharedLies: a gateway that takes the destination and then sends
// a block, ends without saying the slab is written, or says fewer
// elements were, gets DataLoss; one that does not answer (a gateway from
// before destinations) sends the slab, which is copied in.
func TestReadSharedLies(t *testing.T) {
	if !shm.DestSupported {
		t.Skip("no shared destinations on this platform")
	}
	const n = 64
	type send = func(*gatewayv1.ReadSlabSharedResponse) error
	accepted := func() *gatewayv1.ReadSlabSharedResponse {
		h := header([]uint64{n, n}, nil)
		h.GetHeader().Destination = &gatewayv1.SharedDestinationAnswer{Accepted: true}
		return h
	}
	end := func(k uint64) *gatewayv1.ReadSlabSharedResponse {
		return &gatewayv1.ReadSlabSharedResponse{Message: &gatewayv1.ReadSlabSharedResponse_End{End: &gatewayv1.SlabEnd{DestinationElements: k}}}
	}
	inline := &gatewayv1.ReadSlabSharedResponse{Message: &gatewayv1.ReadSlabSharedResponse_Block{Block: &gatewayv1.Block{
		Origin: []uint64{0, 0}, Shape: []uint64{n, n}, Data: make([]byte, n*n*4)}}}
	for name, lie := range map[string]func(*shm.Segment, send) error{
		"a block after taking it": func(_ *shm.Segment, s send) error {
			s(accepted())
			return s(inline)
		},
		"no end":        func(_ *shm.Segment, s send) error { return s(accepted()) },
		"fewer written": func(_ *shm.Segment, s send) error { s(accepted()); return s(end(n*n - 1)) },
		"another shape": func(_ *shm.Segment, s send) error {
			h := accepted()
			h.GetHeader().Shape = []uint64{n, n + 1}
			s(h)
			return s(end(n * (n + 1)))
		},
		"no answer": func(_ *shm.Segment, s send) error { s(header([]uint64{n, n}, nil)); return s(inline) },
	} {
		t.Run(name, func(t *testing.T) {
			c := serveLiar(t, lie)
			ctx := context.Background()
			a, err := c.CreateArray(ctx, "a", client.ArraySpec{Shape: []int64{n, n}, DataType: "float32", ChunkShape: []int64{32, 32}})
			if err != nil {
				t.Fatal(err)
			}
			buf, err := client.NewSharedBuffer(n * n * 4)
			if err != nil {
				t.Fatal(err)
			}
			defer buf.Close()
			_, err = client.ReadShared[float32](ctx, a, nil, buf)
			if name == "no answer" {
				if ok, why := buf.InPlace(); err != nil || ok || !strings.Contains(why, "does not write into client memory") {
					t.Fatalf("%v; in place %v (%q)", err, ok, why)
				}
				return
			}
			if grpcerr.Code(err) != codes.DataLoss {
				t.Fatalf("%v, want DataLoss", err)
			}
		})
	}
}

// oldGateway is a gateway from before WriteSlabShared.
type oldGateway struct{ *arrayserver.Server }

func (oldGateway) WriteSlabShared(context.Context, *gatewayv1.WriteSlabSharedRequest) (*gatewayv1.WriteSlabSharedResponse, error) {
	return nil, status.Error(codes.Unimplemented, "method WriteSlabShared not implemented")
}

// TestWriteShared writes a slab from a SharedBuffer: read by the gateway
// from the buffer itself, or, from a client or gateway without shared
// memory or a gateway from before WriteSlabShared, sent as Write sends it
// (InPlace says why); the array holds the slab either way. A buffer too
// small for the slab or of another element type is InvalidArgument, a
// closed one FailedPrecondition.
func TestWriteShared(t *testing.T) {
	if !shm.DestSupported {
		t.Skip("no shared memory files on this platform")
	}
	ctx := context.Background()
	on := serveFiles(t, gateway.Config{SharedMemory: true})
	off := serveFiles(t, gateway.Config{SharedMemory: false})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	st, err := file.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	gatewayv1.RegisterArrayServiceServer(srv, oldGateway{arrayserver.NewServer(gateway.New(st, codecsvc.NewLocal(), gateway.Config{SharedMemory: true}))})
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	old := lis.Addr().String()

	buf, err := client.NewSharedBuffer(200 * 300 * 4)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Close()
	for k, tc := range []struct {
		name   string
		addr   string
		shared bool
		sel    client.Selection
		why    string // empty: in place
	}{
		{"in place", on, true, nil, ""},
		{"in place, part of the array", on, true, client.MustParseSelection("5:190,17:300:2"), ""},
		{"client without shared memory", on, false, nil, "shared memory is off for this client"},
		{"gateway without shared memory", off, true, nil, "shared memory is off on this gateway"},
		{"gateway from before", old, true, nil, "an older version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := client.Dial(ctx, tc.addr, client.WithSharedMemory(tc.shared))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			a, err := c.CreateArray(ctx, fmt.Sprintf("a%d", k), client.ArraySpec{Shape: []int64{200, 300}, DataType: "int32", ChunkShape: []int64{64, 64}})
			if err != nil {
				t.Fatal(err)
			}
			sh := tc.sel.Shape(a.Shape)
			src := unsafe.Slice((*int32)(unsafe.Pointer(&buf.Bytes()[0])), sh[0]*sh[1])
			want := make([]int32, 200*300)
			for i := range sh[0] {
				for j := range sh[1] {
					r, c := i, j
					if tc.sel != nil {
						r, c = tc.sel[0].Start+i*max(tc.sel[0].Step, 1), tc.sel[1].Start+j*max(tc.sel[1].Step, 1)
					}
					src[i*sh[1]+j] = int32(r*300+c) + 1
					want[r*300+c] = int32(r*300+c) + 1
				}
			}
			ws, err := client.WriteShared[int32](ctx, a, tc.sel, buf)
			if err != nil {
				t.Fatal(err)
			}
			if ok, why := buf.InPlace(); ok != (tc.why == "") || !strings.Contains(why, tc.why) {
				t.Fatalf("in place %v (%q), want %q", ok, why, tc.why)
			}
			if ws.Chunks == 0 || ws.Bytes == 0 {
				t.Fatalf("stats %+v", ws)
			}
			got := make([]int32, 200*300)
			if err := client.ReadInto(ctx, a, nil, got); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Fatal("the array differs from what was written")
			}
		})
	}
	c, err := client.Dial(ctx, on, client.WithSharedMemory(true))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, err := c.OpenArray(ctx, "a0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.WriteShared[float32](ctx, a, nil, buf); grpcerr.Code(err) != codes.InvalidArgument {
		t.Fatalf("from float32: %v, want InvalidArgument", err)
	}
	small, err := client.NewSharedBuffer(200*300*4 - 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.WriteShared[int32](ctx, a, nil, small); grpcerr.Code(err) != codes.InvalidArgument {
		t.Fatalf("from a buffer too small: %v, want InvalidArgument", err)
	}
	small.Close()
	if _, err := client.WriteShared[int32](ctx, a, nil, small); grpcerr.Code(err) != codes.FailedPrecondition {
		t.Fatalf("from a closed buffer: %v, want FailedPrecondition", err)
	}
}
