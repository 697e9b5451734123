package client_test

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"github.com/zarrgate/zarrgate/client"
	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/gateway"
	"github.com/zarrgate/zarrgate/gateway/arrayserver"
	"github.com/zarrgate/zarrgate/internal/bulk"
	"github.com/zarrgate/zarrgate/internal/grpcerr"
	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/storesvc/memory"
)

// bulkLiar is a gateway whose ReadSlab offers a bulk connection, on a
// listener of its own, and writes there what frames writes: raw frames,
// lies among them.
type bulkLiar struct {
	*arrayserver.Server
	lis    net.Listener
	shape  []uint64
	frames func(w io.Writer)
}

func (l *bulkLiar) ReadSlab(req *gatewayv1.ReadSlabRequest, stream grpc.ServerStreamingServer[gatewayv1.ReadSlabResponse]) error {
	port := l.lis.Addr().(*net.TCPAddr).Port
	h := &gatewayv1.SlabHeader{Shape: l.shape, DataType: "float32", ByteOrder: gatewayv1.ByteOrder_BYTE_ORDER_LITTLE_ENDIAN, ElementSize: 4,
		Bulk: &gatewayv1.BulkOffer{Host: "127.0.0.1", Port: uint32(port), Ticket: []byte("t")}}
	if err := stream.Send(&gatewayv1.ReadSlabResponse{Message: &gatewayv1.ReadSlabResponse_Header{Header: h}}); err != nil {
		return err
	}
	c, err := l.lis.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := io.ReadFull(c, make([]byte, len(bulk.Magic)+1)); err != nil {
		return err
	}
	l.frames(c)
	return nil
}

// blockFrame is a bulk frame of a block: its ReadSlabResponse written by
// hand, data last (as the gateway sends them) unless after is set (fields
// after the data), and the frame's length at len + extra.
func blockFrame(origin, shape []uint64, data []byte, after []byte, extra int) []byte {
	packed := func(num protowire.Number, v []uint64) []byte {
		var p []byte
		for _, x := range v {
			p = protowire.AppendVarint(p, x)
		}
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), p)
	}
	blk := append(packed(1, origin), packed(2, shape)...)
	blk = protowire.AppendBytes(protowire.AppendTag(blk, 3, protowire.BytesType), data)
	blk = append(blk, after...)
	msg := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), blk)
	return append(binary.LittleEndian.AppendUint64(nil, uint64(len(msg)+extra)), msg...)
}

// TestBulkFrameLies: a gateway whose bulk frames lie about their blocks
// (data longer or shorter than the block, a block outside the slab, a
// frame longer than its message, a connection ending inside a block's
// data) makes ReadInto fail with DataLoss, and leaves the destination
// outside the blocks it sent whole (and the one it was cut in) as it
// was; frames written a few bytes at a time (short reads), and frames
// in an order the client does not place directly (a field after the
// data), still read right.
func TestBulkFrameLies(t *testing.T) {
	const rows, cols = 512, 1024 // 2 MiB: more than a small read
	half := func(r, c uint64) []uint64 { return []uint64{r, c} }
	bshape := half(rows/2, cols/2)
	value := func(o []uint64) float32 { return float32(1 + o[0] + o[1]) }
	good := func(o []uint64) []byte {
		b := make([]byte, rows/2*cols/2*4)
		for i := 0; i < len(b); i += 4 {
			binary.LittleEndian.PutUint32(b[i:], math.Float32bits(value(o)))
		}
		return b
	}
	origins := [][]uint64{half(0, 0), half(0, cols/2), half(rows/2, 0), half(rows/2, cols/2)}
	end := make([]byte, 8)
	unknown := protowire.AppendVarint(protowire.AppendTag(nil, 9, protowire.VarintType), 7)
	cases := []struct {
		name   string
		frames func(w io.Writer)
		whole  int    // blocks written whole before the lie
		cut    bool   // the lie's block may be partly written
		err    string // in the error; "" for a read that succeeds
	}{
		{"data longer than the block", func(w io.Writer) {
			w.Write(blockFrame(origins[0], bshape, good(origins[0]), nil, 0))
			w.Write(blockFrame(origins[1], bshape, append(good(origins[1]), 0, 0, 0, 0), nil, 0))
		}, 1, false, "has 524292 bytes, want 524288"},
		{"data shorter than the block", func(w io.Writer) {
			w.Write(blockFrame(origins[0], bshape, good(origins[0])[4:], nil, 0))
		}, 0, false, "has 524284 bytes, want 524288"},
		{"block outside the slab", func(w io.Writer) {
			w.Write(blockFrame(origins[0], bshape, good(origins[0]), nil, 0))
			w.Write(blockFrame(half(rows/2+1, 0), bshape, good(origins[2]), nil, 0))
		}, 1, false, "outside the slab"},
		{"frame longer than its message", func(w io.Writer) {
			w.Write(append(blockFrame(origins[0], bshape, good(origins[0]), nil, 2), 0xff, 0xff))
		}, 0, false, "a frame of the bulk connection"},
		{"connection ends inside the data", func(w io.Writer) {
			w.Write(blockFrame(origins[0], bshape, good(origins[0]), nil, 0))
			f := blockFrame(origins[3], bshape, good(origins[3]), nil, 0)
			w.Write(f[:len(f)/2])
		}, 1, true, "the bulk connection"},
		{"frames written in small pieces", func(w io.Writer) {
			var all []byte
			for _, o := range origins {
				all = append(all, blockFrame(o, bshape, good(o), nil, 0)...)
			}
			all = append(all, end...)
			r := rand.New(rand.NewPCG(1, 2))
			for len(all) > 0 {
				k := min(len(all), 1+r.IntN(3000))
				if _, err := w.Write(all[:k]); err != nil {
					return
				}
				all = all[k:]
			}
		}, 4, false, ""},
		{"a field after the data", func(w io.Writer) {
			for i, o := range origins {
				var after []byte
				if i == 2 {
					after = unknown
				}
				w.Write(blockFrame(o, bshape, good(o), after, 0))
			}
			w.Write(end)
		}, 4, false, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer lis.Close()
			glis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
			real := arrayserver.NewServer(gateway.New(memory.New(), codecsvc.NewLocal(), gateway.Config{}))
			gatewayv1.RegisterArrayServiceServer(srv, &bulkLiar{Server: real, lis: lis, shape: []uint64{rows, cols}, frames: tc.frames})
			go srv.Serve(glis)
			defer srv.Stop()
			c := dialT(t, glis.Addr().String(), client.WithSharedMemory(false))
			ctx := context.Background()
			a, err := c.CreateArray(ctx, "a", client.ArraySpec{Shape: []int64{rows, cols}, DataType: "float32", ChunkShape: []int64{rows / 2, cols / 2}})
			if err != nil {
				t.Fatal(err)
			}
			dst := make([]float32, rows*cols)
			for i := range dst {
				dst[i] = -1
			}
			placed := client.PlacedFrames()
			err = client.ReadInto(ctx, a, nil, dst)
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				want := int64(4)
				if strings.Contains(tc.name, "field after") {
					want = 3 // the third has a field after its data
				}
				if n := client.PlacedFrames() - placed; n != want {
					t.Errorf("%d frames placed directly, want %d", n, want)
				}
			} else if grpcerr.Code(err) != codes.DataLoss || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("ReadInto: %v, want DataLoss with %q", err, tc.err)
			}
			// Whole blocks hold their values, the rest of the
			// destination (but the block the connection ended in)
			// nothing.
			for i, v := range dst {
				r, col := uint64(i/cols), uint64(i%cols)
				blk := int(r/(rows/2)*2 + col/(cols/2))
				o := origins[blk]
				switch {
				case blk < tc.whole:
					if v != value(o) {
						t.Fatalf("element (%d, %d) = %v, want %v", r, col, v, value(o))
					}
				case tc.cut && blk == 3:
					// anything: the connection may end inside an element
				case v != -1:
					t.Fatalf("element (%d, %d) outside the blocks sent = %v, want it untouched", r, col, v)
				}
			}
		})
	}
}
