package arrayserver

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/zarrgate/zarrgate/gateway"
	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"
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
