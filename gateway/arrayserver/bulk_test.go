package arrayserver

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/zarrgate/zarrgate/gateway"
	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"
	"github.com/zarrgate/zarrgate/internal/bulk"
	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/storesvc/memory"
)

// serveBulk serves a gateway with a bulk listener of cfg over loopback.
func serveBulk(t *testing.T, cfg bulk.Config) (gatewayv1.ArrayServiceClient, *bulk.Listener) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bl, err := bulk.Listen("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	as := NewServer(gateway.New(memory.New(), testCodecs, gateway.Config{}))
	as.SetBulk(bl)
	as.Register(srv)
	go srv.Serve(lis)
	cc, err := rpc.Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close(); srv.Stop(); bl.Close() })
	return gatewayv1.NewArrayServiceClient(cc), bl
}

// writeInts makes the array "a": 600×700 int32 in 300×350 chunks, every
// element its index, the last chunk never written (fill value -1).
func writeInts(t *testing.T, c gatewayv1.ArrayServiceClient) {
	t.Helper()
	if _, err := c.CreateArray(ctx, &gatewayv1.CreateArrayRequest{Path: "a", Shape: []uint64{600, 700}, DataType: "int32", ChunkShape: []uint64{300, 350},
		CodecsJson: `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":1}}]`, FillValueJson: "-1"}); err != nil {
		t.Fatal(err)
	}
	ws, err := c.WriteSlab(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ws.Send(&gatewayv1.WriteSlabRequest{Message: &gatewayv1.WriteSlabRequest_Header{Header: &gatewayv1.WriteSlabHeader{Path: "a",
		Selection: []*gatewayv1.Slice{{Start: 0, Stop: 600}, {Start: 0, Stop: 350}}}}})
	data := make([]byte, 0, 600*350*4)
	for i := range uint32(600 * 350) {
		data = binary.LittleEndian.AppendUint32(data, i/350*700+i%350)
	}
	ws.Send(&gatewayv1.WriteSlabRequest{Message: &gatewayv1.WriteSlabRequest_Block{Block: &gatewayv1.Block{Origin: []uint64{0, 0}, Shape: []uint64{600, 350}, Data: data}}})
	if _, err := ws.CloseAndRecv(); err != nil {
		t.Fatal(err)
	}
	ws, _ = c.WriteSlab(ctx)
	ws.Send(&gatewayv1.WriteSlabRequest{Message: &gatewayv1.WriteSlabRequest_Header{Header: &gatewayv1.WriteSlabHeader{Path: "a",
		Selection: []*gatewayv1.Slice{{Start: 0, Stop: 300}, {Start: 350, Stop: 700}}}}})
	data = data[:0]
	for i := range uint32(300 * 350) {
		data = binary.LittleEndian.AppendUint32(data, i/350*700+350+i%350)
	}
	ws.Send(&gatewayv1.WriteSlabRequest{Message: &gatewayv1.WriteSlabRequest_Block{Block: &gatewayv1.Block{Origin: []uint64{0, 0}, Shape: []uint64{300, 350}, Data: data}}})
	if _, err := ws.CloseAndRecv(); err != nil {
		t.Fatal(err)
	}
}

// readBlocks reads a slab through the stream, or through bulk: the
// blocks' messages, marshalled, sorted.
func readBlocks(t *testing.T, c gatewayv1.ArrayServiceClient, req *gatewayv1.ReadSlabRequest) (*gatewayv1.SlabHeader, []string, bool) {
	t.Helper()
	rs, err := c.ReadSlab(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	first, err := rs.Recv()
	if err != nil {
		t.Fatal(err)
	}
	h := first.GetHeader()
	var out []string
	add := func(m *gatewayv1.ReadSlabResponse) {
		if m.GetBlock() == nil {
			t.Fatalf("not a block: %v", m)
		}
		b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		out = append(out, string(b))
	}
	if o := h.GetBulk(); o != nil {
		conn, err := bulk.Dial(ctx, net.JoinHostPort("127.0.0.1", strconv.Itoa(int(o.GetPort()))), nil, o.GetTicket())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		r := bulk.NewReader(conn, 0)
		for {
			f, err := r.Next(true)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			m := new(gatewayv1.ReadSlabResponse)
			if err := proto.Unmarshal(f, m); err != nil {
				t.Fatal(err)
			}
			add(m)
		}
	}
	for {
		m, err := rs.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.GetBulk() != nil {
			t.Fatal("a message in the stream of a bulk read")
		}
		add(m)
	}
	slices.Sort(out)
	offered := h.GetBulk() != nil
	h.Bulk = nil
	return h, out, offered
}

func TestReadSlabBulk(t *testing.T) {
	c, bl := serveBulk(t, bulk.Config{})
	writeInts(t, c)
	for _, sel := range [][]*gatewayv1.Slice{nil, {{Start: 5, Stop: 590, Step: 3}, {Start: 1, Stop: 700, Step: 7}}, {{Start: 350, Stop: 600}, {Start: 400, Stop: 700}}} {
		hs, stream, offered := readBlocks(t, c, &gatewayv1.ReadSlabRequest{Path: "a", Selection: sel})
		if offered {
			t.Fatal("an offer to a read that did not ask for bulk")
		}
		hb, frames, offered := readBlocks(t, c, &gatewayv1.ReadSlabRequest{Path: "a", Selection: sel, Bulk: true})
		if !offered || !proto.Equal(hs, hb) || !slices.Equal(stream, frames) || len(frames) == 0 {
			t.Fatalf("selection %v: bulk read %d blocks (header %v), the stream %d (%v)", sel, len(frames), hb, len(stream), hs)
		}
	}
	if got := bl.Counts()[bulk.ResultAccepted]; got != 3 {
		t.Fatalf("%d bulk connections accepted for 3 bulk reads", got)
	}
}

func TestReadSlabBulkRefusals(t *testing.T) {
	c, bl := serveBulk(t, bulk.Config{TicketTTL: 200 * time.Millisecond})
	writeInts(t, c)
	// An offer nobody takes: FAILED_PRECONDITION naming the listener.
	rs, err := c.ReadSlab(ctx, &gatewayv1.ReadSlabRequest{Path: "a", Bulk: true})
	if err != nil {
		t.Fatal(err)
	}
	first, err := rs.Recv()
	if err != nil || first.GetHeader().GetBulk() == nil {
		t.Fatalf("header %v, %v", first, err)
	}
	_, err = rs.Recv()
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), bl.Addr().String()) {
		t.Fatalf("an offer not taken: %v", err)
	}

	// The client closing the bulk connection after the first frame: the
	// call ends UNAVAILABLE (the server's write fails), nothing left open.
	c2, bl2 := serveBulk(t, bulk.Config{})
	if _, err := c2.CreateArray(ctx, &gatewayv1.CreateArrayRequest{Path: "big", Shape: []uint64{4096, 4096}, DataType: "float32", ChunkShape: []uint64{256, 256},
		CodecsJson: `[{"name":"bytes","configuration":{"endian":"little"}}]`, FillValueJson: "1.5"}); err != nil {
		t.Fatal(err)
	}
	rs, err = c2.ReadSlab(ctx, &gatewayv1.ReadSlabRequest{Path: "big", Bulk: true})
	if err != nil {
		t.Fatal(err)
	}
	first, err = rs.Recv()
	if err != nil || first.GetHeader().GetBulk() == nil {
		t.Fatalf("header %v, %v", first, err)
	}
	o := first.GetHeader().GetBulk()
	conn, err := bulk.Dial(ctx, net.JoinHostPort("127.0.0.1", strconv.Itoa(int(o.GetPort()))), nil, o.GetTicket())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bulk.NewReader(conn, 0).Next(false); err != nil {
		t.Fatal(err)
	}
	conn.(*net.TCPConn).SetLinger(0) // a reset: the server's next write fails
	conn.Close()
	_, err = rs.Recv()
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "bulk connection") {
		t.Fatalf("the client closed the bulk connection: %v", err)
	}
	// The gRPC call's own end (the client cancels it) ends the writes too.
	cctx, cancel := context.WithCancel(ctx)
	rs, _ = c2.ReadSlab(cctx, &gatewayv1.ReadSlabRequest{Path: "big", Bulk: true})
	first, _ = rs.Recv()
	o = first.GetHeader().GetBulk()
	conn, err = bulk.Dial(ctx, net.JoinHostPort("127.0.0.1", strconv.Itoa(int(o.GetPort()))), nil, o.GetTicket())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := bulk.NewReader(conn, 0).Next(false); err != nil {
		t.Fatal(err)
	}
	cancel() // and never read: the server's writes block until the call ends
	// The server closes its end (the listener counts it closed) without
	// the client reading anything.
	for i := 0; bl2.Open() > 0; i++ {
		if i == 3000 {
			t.Fatal("the cancelled call's bulk connection is still open")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// A server whose tickets are all waiting sends the blocks through the
	// stream, without an offer.
	c3, _ := serveBulk(t, bulk.Config{MaxTickets: 1, TicketTTL: time.Hour})
	writeInts(t, c3)
	held, err := c3.ReadSlab(ctx, &gatewayv1.ReadSlabRequest{Path: "a", Bulk: true})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := held.Recv(); err != nil || m.GetHeader().GetBulk() == nil {
		t.Fatalf("the first read: %v, %v", m, err)
	}
	_, stream, offered := readBlocks(t, c3, &gatewayv1.ReadSlabRequest{Path: "a", Bulk: true})
	if offered || len(stream) == 0 {
		t.Fatalf("a second read with all tickets out: offered %v, %d blocks", offered, len(stream))
	}
}
