package arrayserver

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/zarrgate/zarrgate/gateway"
	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"
	"github.com/zarrgate/zarrgate/internal/bufpool"
	"github.com/zarrgate/zarrgate/internal/bulk"
	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/internal/wire"
	"github.com/zarrgate/zarrgate/storesvc/memory"
)

// serveGateway serves a gateway over loopback and returns a client.
func serveGateway(t *testing.T, g *gateway.Gateway) gatewayv1.ArrayServiceClient {
	return serveGatewayB(t, g)
}

func serveGatewayB(t testing.TB, g *gateway.Gateway) gatewayv1.ArrayServiceClient {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	NewServer(g).Register(srv)
	go srv.Serve(lis)
	cc, err := rpc.Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close(); srv.Stop() })
	return gatewayv1.NewArrayServiceClient(cc)
}

// serveGatewayBulkB is serveGatewayB with a bulk listener (ReadSlab's
// bulk reads, OpenSmallReads' connections).
func serveGatewayBulkB(t testing.TB, g *gateway.Gateway) gatewayv1.ArrayServiceClient {
	return serveBulkB(t, NewServer(g))
}

// serveBulkB serves s with a bulk listener.
func serveBulkB(t testing.TB, s *Server) gatewayv1.ArrayServiceClient {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bl, err := bulk.Listen("127.0.0.1:0", bulk.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	s.SetBulk(bl)
	s.Register(srv)
	go srv.Serve(lis)
	cc, err := rpc.Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close(); srv.Stop(); bl.Close() })
	return gatewayv1.NewArrayServiceClient(cc)
}

// openSmallReadsB opens a small-reads connection of c's server.
func openSmallReadsB(t testing.TB, c gatewayv1.ArrayServiceClient) net.Conn {
	resp, err := c.OpenSmallReads(ctx, &gatewayv1.OpenSmallReadsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	o := resp.GetOffer()
	conn, err := bulk.Dial(ctx, net.JoinHostPort("127.0.0.1", strconv.Itoa(int(o.GetPort()))), nil, o.GetTicket())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// serveGatewayPlain serves g on a plain grpc.NewServer(), as a program
// embedding ArrayService outside this module would, and dials it with a
// plain client: gRPC's own proto codec on both sides.
func serveGatewayPlain(t testing.TB, g *gateway.Gateway) gatewayv1.ArrayServiceClient {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	NewServer(g).Register(srv)
	go srv.Serve(lis)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close(); srv.Stop() })
	return gatewayv1.NewArrayServiceClient(cc)
}

// servers are the two ways of serving a gateway the RPC tests run on: the
// blocks of ReadSlab go by reference on the first, copied on the second
// (where sending by reference once failed with "message is wire.ByRef").
var servers = []struct {
	name  string
	serve func(testing.TB, *gateway.Gateway) gatewayv1.ArrayServiceClient
}{{"zarrgate", serveGatewayB}, {"plain", serveGatewayPlain}}

func TestSlabRPCs(t *testing.T) {
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			testSlabRPCs(t, srv.serve(t, gateway.New(memory.New(), testCodecs, gateway.Config{})))
		})
	}
}

func testSlabRPCs(t *testing.T, c gatewayv1.ArrayServiceClient) {
	_, err := c.CreateArray(ctx, &gatewayv1.CreateArrayRequest{Path: "a", Shape: []uint64{600, 700}, DataType: "int32", ChunkShape: []uint64{300, 700},
		CodecsJson: `[{"name":"bytes","configuration":{"endian":"little"}}]`, FillValueJson: "-1"})
	if err != nil {
		t.Fatal(err)
	}
	ws, err := c.WriteSlab(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ws.Send(&gatewayv1.WriteSlabRequest{Message: &gatewayv1.WriteSlabRequest_Header{Header: &gatewayv1.WriteSlabHeader{Path: "a",
		Selection: []*gatewayv1.Slice{{Start: 0, Stop: 600}, {Start: 0, Stop: 700, Step: 2}}}}})
	for row := uint64(0); row < 600; row += 100 {
		data := make([]byte, 0, 100*350*4)
		for i := range uint64(100 * 350) {
			data = binary.LittleEndian.AppendUint32(data, uint32((row*350+i)*2))
		}
		ws.Send(&gatewayv1.WriteSlabRequest{Message: &gatewayv1.WriteSlabRequest_Block{Block: &gatewayv1.Block{Origin: []uint64{row, 0}, Shape: []uint64{100, 350}, Data: data}}})
	}
	resp, err := ws.CloseAndRecv()
	if err != nil || resp.GetChunksWritten() != 2 || resp.GetBytesWritten() != 2*300*700*4 {
		t.Fatalf("WriteSlab = %v, %v", resp, err)
	}
	rs, err := c.ReadSlab(ctx, &gatewayv1.ReadSlabRequest{Path: "a"})
	if err != nil {
		t.Fatal(err)
	}
	first, err := rs.Recv()
	if err != nil || first.GetHeader() == nil || fmt.Sprint(first.GetHeader().GetShape()) != "[600 700]" || first.GetHeader().GetElementSize() != 4 {
		t.Fatalf("header = %v, %v", first, err)
	}
	got := make([]byte, 600*700*4)
	blocks := 0
	for {
		m, err := rs.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b := m.GetBlock()
		if len(b.GetData()) > maxBlockBytes {
			t.Fatalf("block of %d bytes", len(b.GetData()))
		}
		blocks++
		rows := b.GetShape()[0]
		for r := range rows {
			y := b.GetOrigin()[0] + r
			copy(got[(y*700+b.GetOrigin()[1])*4:], b.GetData()[r*b.GetShape()[1]*4:(r+1)*b.GetShape()[1]*4])
		}
	}
	for i := range 600 * 700 {
		want := int32(-1)
		if i%2 == 0 {
			want = int32(i)
		}
		if v := int32(binary.LittleEndian.Uint32(got[4*i:])); v != want {
			t.Fatalf("element %d = %d, want %d (over %d blocks)", i, v, want, blocks)
		}
	}

	// Errors keep their codes across the wire, naming the dimension.
	rs, _ = c.ReadSlab(ctx, &gatewayv1.ReadSlabRequest{Path: "a", Selection: []*gatewayv1.Slice{{Start: 0, Stop: 601}, {Start: 0, Stop: 1}}})
	_, err = rs.Recv()
	if status.Code(err) != codes.OutOfRange || !bytes.Contains([]byte(err.Error()), []byte("dimension 0")) {
		t.Fatalf("out of bounds: %v", err)
	}
	rs, _ = c.ReadSlab(ctx, &gatewayv1.ReadSlabRequest{Path: "missing"})
	if _, err = rs.Recv(); status.Code(err) != codes.NotFound {
		t.Fatalf("missing array: %v", err)
	}
	ws, _ = c.WriteSlab(ctx)
	ws.Send(&gatewayv1.WriteSlabRequest{Message: &gatewayv1.WriteSlabRequest_Block{Block: &gatewayv1.Block{}}})
	if _, err := ws.CloseAndRecv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("write without header: %v", err)
	}
}

// TestSlabRPCsLargeBlocks reads an array of one 3.2 MiB chunk, whose block
// leaves in pieces of maxBlockBytes, on both servers, and checks every
// element and that the pieces were large (sent by reference where the
// codec allows).
func TestSlabRPCsLargeBlocks(t *testing.T) {
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			c := srv.serve(t, gateway.New(memory.New(), testCodecs, gateway.Config{}))
			if _, err := c.CreateArray(ctx, &gatewayv1.CreateArrayRequest{Path: "b", Shape: []uint64{800, 1000}, DataType: "float32", ChunkShape: []uint64{800, 1000},
				CodecsJson: `[{"name":"bytes","configuration":{"endian":"little"}}]`}); err != nil {
				t.Fatal(err)
			}
			data := make([]byte, 0, 800*1000*4)
			for i := range uint32(800 * 1000) {
				data = binary.LittleEndian.AppendUint32(data, i*7)
			}
			ws, err := c.WriteSlab(ctx)
			if err != nil {
				t.Fatal(err)
			}
			ws.Send(&gatewayv1.WriteSlabRequest{Message: &gatewayv1.WriteSlabRequest_Header{Header: &gatewayv1.WriteSlabHeader{Path: "b"}}})
			for row := uint64(0); row < 800; row += 200 {
				ws.Send(&gatewayv1.WriteSlabRequest{Message: &gatewayv1.WriteSlabRequest_Block{Block: &gatewayv1.Block{Origin: []uint64{row, 0}, Shape: []uint64{200, 1000}, Data: data[row*4000 : (row+200)*4000]}}})
			}
			if _, err := ws.CloseAndRecv(); err != nil {
				t.Fatal(err)
			}
			rs, err := c.ReadSlab(ctx, &gatewayv1.ReadSlabRequest{Path: "b"})
			if err != nil {
				t.Fatal(err)
			}
			got := make([]byte, len(data))
			var large int
			for {
				m, err := rs.Recv()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				b := m.GetBlock()
				if b == nil {
					continue // the header
				}
				if len(b.GetData()) >= wire.Large {
					large++
				}
				w := b.GetShape()[1] * 4
				for r := range b.GetShape()[0] {
					copy(got[(b.GetOrigin()[0]+r)*4000+b.GetOrigin()[1]*4:], b.GetData()[r*w:(r+1)*w])
				}
			}
			if !bytes.Equal(got, data) {
				t.Fatal("the array read back differs from what was written")
			}
			if large < 3 {
				t.Fatalf("%d large pieces, want the 3.2 MiB chunk in at least 3", large)
			}
		})
	}
}

// TestWriteSlabPooledBlocks writes blocks of at least wire.Large bytes,
// which the zarrgate server receives into pooled buffers: those of a
// fixed-size array are recycled for the next blocks once copied out, those
// of a string array never (the values stay in them until the call ends),
// so every element reads back as written, on both servers.
func TestWriteSlabPooledBlocks(t *testing.T) {
	bufpool.CheckDoublePuts()
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			c := srv.serve(t, gateway.New(memory.New(), testCodecs, gateway.Config{}))
			const rows, cols, h = 128, 1024, 16 // blocks of 16 rows: 64 KiB of elements, 96+ KiB of strings
			if _, err := c.CreateArray(ctx, &gatewayv1.CreateArrayRequest{Path: "f", Shape: []uint64{rows, cols}, DataType: "uint32", ChunkShape: []uint64{16, 256},
				CodecsJson: `[{"name":"bytes","configuration":{"endian":"little"}}]`}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.CreateArray(ctx, &gatewayv1.CreateArrayRequest{Path: "s", Shape: []uint64{rows, cols}, DataType: "string", ChunkShape: []uint64{16, 256},
				CodecsJson: `[{"name":"vlen-utf8"}]`, FillValueJson: `""`}); err != nil {
				t.Fatal(err)
			}
			str := func(r, c uint64) string { return fmt.Sprintf("%d:%d", r, c) }
			for _, path := range []string{"f", "s"} {
				ws, err := c.WriteSlab(ctx)
				if err != nil {
					t.Fatal(err)
				}
				ws.Send(&gatewayv1.WriteSlabRequest{Message: &gatewayv1.WriteSlabRequest_Header{Header: &gatewayv1.WriteSlabHeader{Path: path}}})
				for r0 := uint64(0); r0 < rows; r0 += h {
					b := &gatewayv1.Block{Origin: []uint64{r0, 0}, Shape: []uint64{h, cols}}
					for r := r0; r < r0+h; r++ {
						for col := range uint64(cols) {
							if path == "f" {
								b.Data = binary.LittleEndian.AppendUint32(b.Data, uint32(r*cols+col+1))
							} else {
								b.Data = append(b.Data, str(r, col)...)
								b.Offsets = append(b.Offsets, uint64(len(b.Data)))
							}
						}
					}
					if path == "s" {
						b.Offsets = append([]uint64{0}, b.Offsets...)
					}
					if len(b.Data)+8*len(b.Offsets) < 2*wire.Large {
						t.Fatalf("block of %d bytes: too small to be pooled", len(b.Data))
					}
					if err := ws.Send(&gatewayv1.WriteSlabRequest{Message: &gatewayv1.WriteSlabRequest_Block{Block: b}}); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := ws.CloseAndRecv(); err != nil {
					t.Fatalf("%s: %v", path, err)
				}
			}
			fixed, _ := readSlab(t, c, "f")
			for i := range uint64(rows * cols) {
				if v := binary.LittleEndian.Uint32(fixed[4*i:]); v != uint32(i+1) {
					t.Fatalf("f: element %d = %d, want %d", i, v, i+1)
				}
			}
			_, strs := readSlab(t, c, "s")
			for i, v := range strs {
				if want := str(uint64(i)/cols, uint64(i)%cols); v != want {
					t.Fatalf("s: element %d = %q, want %q", i, v, want)
				}
			}
		})
	}
}

// readSlab reads a whole 2-D array: the bytes of a fixed-size one, or the
// values of a string one, in C order.
func readSlab(t *testing.T, c gatewayv1.ArrayServiceClient, path string) ([]byte, []string) {
	t.Helper()
	rs, err := c.ReadSlab(ctx, &gatewayv1.ReadSlabRequest{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	first, err := rs.Recv()
	if err != nil {
		t.Fatal(err)
	}
	h := first.GetHeader()
	shape, elem := h.GetShape(), h.GetElementSize()
	n := shape[0] * shape[1]
	data := make([]byte, n*uint64(elem))
	strs := make([]string, n)
	for {
		m, err := rs.Recv()
		if err == io.EOF {
			return data, strs
		}
		if err != nil {
			t.Fatal(err)
		}
		b := m.GetBlock()
		o, s := b.GetOrigin(), b.GetShape()
		for r := range s[0] {
			for col := range s[1] {
				i, k := (o[0]+r)*shape[1]+o[1]+col, r*s[1]+col
				if elem > 0 {
					copy(data[i*uint64(elem):(i+1)*uint64(elem)], b.GetData()[k*uint64(elem):])
				} else {
					strs[i] = string(b.GetData()[b.GetOffsets()[k]:b.GetOffsets()[k+1]])
				}
			}
		}
	}
}
