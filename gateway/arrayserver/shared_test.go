package arrayserver

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"
	storev1 "github.com/zarrgate/zarrgate/gen/zarrgate/store/v1"

	"github.com/zarrgate/zarrgate/gateway"
	"github.com/zarrgate/zarrgate/internal/membudget"
	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/internal/shm"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/memory"
)

type sharedStream = grpc.BidiStreamingClient[gatewayv1.ReadSlabSharedRequest, gatewayv1.ReadSlabSharedResponse]

// sharedFixture serves a gateway with 1 MiB segments and an array of
// 512×640 int32 (1.25 MiB, so the ring wraps) holding i at element i.
func sharedFixture(t *testing.T, cfg gateway.Config) gatewayv1.ArrayServiceClient {
	t.Helper()
	return sharedFixtureOn(t, cfg, serveGatewayB)
}

// sharedFixtureOn is sharedFixture served by serve.
func sharedFixtureOn(t *testing.T, cfg gateway.Config, serve func(testing.TB, *gateway.Gateway) gatewayv1.ArrayServiceClient) gatewayv1.ArrayServiceClient {
	t.Helper()
	cfg.SharedMemoryBytes = 1 << 20
	c := serve(t, gateway.New(memory.New(), testCodecs, cfg))
	if _, err := c.CreateArray(ctx, &gatewayv1.CreateArrayRequest{Path: "a", Shape: []uint64{512, 640}, DataType: "int32", ChunkShape: []uint64{64, 128},
		CodecsJson: `[{"name":"bytes","configuration":{"endian":"little"}}]`}); err != nil {
		t.Fatal(err)
	}
	ws, err := c.WriteSlab(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ws.Send(&gatewayv1.WriteSlabRequest{Message: &gatewayv1.WriteSlabRequest_Header{Header: &gatewayv1.WriteSlabHeader{Path: "a"}}})
	data := make([]byte, 0, 512*640*4)
	for i := range uint32(512 * 640) {
		data = binary.LittleEndian.AppendUint32(data, i)
	}
	for row := uint64(0); row < 512; row += 128 {
		ws.Send(&gatewayv1.WriteSlabRequest{Message: &gatewayv1.WriteSlabRequest_Block{Block: &gatewayv1.Block{Origin: []uint64{row, 0}, Shape: []uint64{128, 640}, Data: data[row*640*4 : (row+128)*640*4]}}})
	}
	if _, err := ws.CloseAndRecv(); err != nil {
		t.Fatal(err)
	}
	return c
}

// openShared starts a ReadSlabShared of rows [lo, hi) of the fixture and
// returns the stream and the header.
func openShared(t *testing.T, c gatewayv1.ArrayServiceClient, lo, hi uint64) (sharedStream, *gatewayv1.SlabHeader) {
	t.Helper()
	s, err := c.ReadSlabShared(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.Send(&gatewayv1.ReadSlabSharedRequest{Message: &gatewayv1.ReadSlabSharedRequest_Read{Read: &gatewayv1.ReadSlabRequest{Path: "a",
		Selection: []*gatewayv1.Slice{{Start: lo, Stop: hi}, {Start: 0, Stop: 640}}}}})
	m, err := s.Recv()
	if err != nil || m.GetHeader() == nil {
		t.Fatalf("header: %v, %v", m, err)
	}
	return s, m.GetHeader()
}

func sendAttach(s sharedStream, ok bool) {
	s.Send(&gatewayv1.ReadSlabSharedRequest{Message: &gatewayv1.ReadSlabSharedRequest_Attach{Attach: &gatewayv1.SharedAttach{Attached: ok}}})
}

func sendRelease(s sharedStream, n uint64) {
	s.Send(&gatewayv1.ReadSlabSharedRequest{Message: &gatewayv1.ReadSlabSharedRequest_Release{Release: &gatewayv1.SharedRelease{Blocks: n}}})
}

// place copies a block's rows into got (rows of 640), from data.
func place(t *testing.T, got []byte, b *gatewayv1.Block, data []byte) {
	t.Helper()
	if uint64(len(data)) != b.GetShape()[0]*b.GetShape()[1]*4 {
		t.Fatalf("block %v has %d bytes", b.GetShape(), len(data))
	}
	w := b.GetShape()[1] * 4
	for r := range b.GetShape()[0] {
		copy(got[((b.GetOrigin()[0]+r)*640+b.GetOrigin()[1])*4:], data[r*w:(r+1)*w])
	}
}

func checkRows(t *testing.T, got []byte, lo uint64) {
	t.Helper()
	for i := range len(got) / 4 {
		if v := binary.LittleEndian.Uint32(got[4*i:]); v != uint32(lo*640)+uint32(i) {
			t.Fatalf("element %d = %d, want %d", i, v, uint32(lo*640)+uint32(i))
		}
	}
}

// TestReadSlabSharedProtocol plays the client's side by hand: blocks come
// as ranges of the mapped segment, the ring wraps as the client releases,
// the end comes after the last block, and a drained segment is lent to the
// next call (same token).
func TestReadSlabSharedProtocol(t *testing.T) {
	if !shm.Supported {
		t.Skip("no shared memory on this platform")
	}
	c := sharedFixture(t, gateway.Config{SharedMemory: true})
	var tokens [][]byte
	for call := range 3 {
		// The first call releases every block but the latest at once; the
		// others release in batches of 8 (a quarter of the ring), so that
		// workers wait for room and wake together.
		batch := 1
		if call > 0 {
			batch = 8
		}
		unreleased := 0
		s, h := openShared(t, c, 0, 512)
		seg := h.GetSharedSegment()
		if seg == nil {
			t.Fatal("no segment offered")
		}
		tokens = append(tokens, seg.GetToken())
		m, err := shm.Attach(seg.GetPath(), int64(seg.GetSize()), seg.GetToken())
		if err != nil {
			t.Fatal(err)
		}
		sendAttach(s, true)
		got := make([]byte, 512*640*4)
		var shared, ended int
		end := uint64(shm.DataOffset) // where the previous block ended
		for {
			msg, err := s.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if msg.GetEnd() != nil {
				ended++
				sendRelease(s, uint64(unreleased)) // the rest
				continue
			}
			b := msg.GetBlock()
			r := b.GetShared()
			if r == nil || len(b.GetData()) != 0 || ended > 0 {
				t.Fatalf("block %v: shared %v, %d inline bytes, after the end: %v", b.GetOrigin(), r, len(b.GetData()), ended > 0)
			}
			if r.GetOffset() < shm.DataOffset || r.GetOffset()+r.GetLength() > uint64(len(m.Data)) {
				t.Fatalf("range %v outside the segment", r)
			}
			// Blocks come in the order of their allocations, the order the
			// releases free them in: each starts where the previous one
			// ended, or back at the start of the ring.
			if r.GetOffset() != end && r.GetOffset() != shm.DataOffset {
				t.Fatalf("block %d at offset %d, the previous one ended at %d", shared, r.GetOffset(), end)
			}
			end = r.GetOffset() + r.GetLength()
			place(t, got, b, m.Data[r.GetOffset():r.GetOffset()+r.GetLength()])
			shared++
			if unreleased++; unreleased > batch {
				sendRelease(s, uint64(unreleased-1)) // all but the latest
				unreleased = 1
			}
		}
		m.Close()
		if ended != 1 || shared < 10 {
			t.Fatalf("%d shared blocks, %d ends", shared, ended)
		}
		checkRows(t, got, 0)
	}
	if !bytes.Equal(tokens[0], tokens[1]) || !bytes.Equal(tokens[1], tokens[2]) {
		t.Fatal("the second call got a new segment, not the drained one")
	}
}

// TestReadSlabSharedInline: a client that cannot map the segment, and a
// gateway with shared memory off, get the blocks inline.
// recvInline receives the rest of a read of rows of the fixture, every
// block inline, and returns the rows.
func recvInline(t *testing.T, s sharedStream, rows int) []byte {
	t.Helper()
	got := make([]byte, rows*640*4)
	for {
		msg, err := s.Recv()
		if err == io.EOF {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		b := msg.GetBlock()
		if b == nil || b.GetShared() != nil {
			t.Fatalf("message %v, want an inline block", msg)
		}
		place(t, got, b, b.GetData())
	}
}

// Both on zarrgate's server and on a plain gRPC server (see servers).
func TestReadSlabSharedInline(t *testing.T) {
	for _, srv := range servers {
		for _, cfg := range []gateway.Config{{SharedMemory: shm.Supported}, {}} {
			c := sharedFixtureOn(t, cfg, srv.serve)
			s, h := openShared(t, c, 100, 300)
			if (h.GetSharedSegment() != nil) != cfg.SharedMemory {
				t.Fatalf("%s server, shared memory %v: segment offered: %v", srv.name, cfg.SharedMemory, h.GetSharedSegment())
			}
			if cfg.SharedMemory {
				sendAttach(s, false)
			}
			checkRows(t, recvInline(t, s, 200), 100)
		}
	}
}

// TestReadSlabSharedBadClients: protocol errors get InvalidArgument, a
// client that stops releasing holds only its own call, and the gateway
// keeps serving with its segment slots free again.
func TestReadSlabSharedBadClients(t *testing.T) {
	if !shm.Supported {
		t.Skip("no shared memory on this platform")
	}
	c := sharedFixture(t, gateway.Config{SharedMemory: true, MaxSharedReads: 1})
	expect := func(s sharedStream, code codes.Code, what string) {
		t.Helper()
		for {
			_, err := s.Recv()
			if err == nil {
				continue
			}
			if status.Code(err) != code {
				t.Fatalf("%s: %v, want %v", what, err, code)
			}
			return
		}
	}
	// The first message must be the read.
	s, err := c.ReadSlabShared(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sendAttach(s, true)
	expect(s, codes.InvalidArgument, "attach first")

	// The second must answer the offer.
	s, _ = openShared(t, c, 0, 512)
	sendRelease(s, 1)
	expect(s, codes.InvalidArgument, "release before attach")

	// Releasing more blocks than were sent.
	s, _ = openShared(t, c, 0, 512)
	sendAttach(s, true)
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	sendRelease(s, 1000)
	expect(s, codes.InvalidArgument, "release of unsent blocks")

	// Another message after the attach answer.
	s, _ = openShared(t, c, 0, 512)
	sendAttach(s, true)
	sendAttach(s, true)
	expect(s, codes.InvalidArgument, "a second attach")

	// A client that never releases: the gateway waits on the full ring
	// until the client gives up.
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	s, err = c.ReadSlabShared(cctx)
	if err != nil {
		t.Fatal(err)
	}
	s.Send(&gatewayv1.ReadSlabSharedRequest{Message: &gatewayv1.ReadSlabSharedRequest_Read{Read: &gatewayv1.ReadSlabRequest{Path: "a"}}})
	s.Recv()
	sendAttach(s, true)
	n := 0
	for {
		if _, err := s.Recv(); err != nil {
			if status.Code(err) != codes.DeadlineExceeded {
				t.Fatalf("stalled client: %v", err)
			}
			break
		}
		n++
	}
	cancel()
	if n*64*128*4 > 1<<20 {
		t.Fatalf("the gateway sent %d blocks into a 1 MiB ring nobody released", n)
	}

	// With every slot free again, a well-behaved read gets a segment.
	deadline := time.Now().Add(5 * time.Second)
	for {
		s, h := openShared(t, c, 0, 64)
		if h.GetSharedSegment() != nil {
			sendAttach(s, false)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stalled call's segment slot was never freed")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestReadSlabSharedDirect: whole chunks of a raw array are read straight
// into the segment; missing ones read as the fill value, and a stored
// chunk of the wrong size is DataLoss naming it, with the gateway still
// serving.
func TestReadSlabSharedDirect(t *testing.T) {
	if !shm.Supported {
		t.Skip("no shared memory on this platform")
	}
	g := gateway.New(memory.New(), testCodecs, gateway.Config{SharedMemory: true, SharedMemoryBytes: 1 << 20})
	c := serveGateway(t, g)
	if _, err := c.CreateArray(ctx, &gatewayv1.CreateArrayRequest{Path: "a", Shape: []uint64{512, 640}, DataType: "int32", ChunkShape: []uint64{64, 128},
		CodecsJson: `[{"name":"bytes","configuration":{"endian":"little"}}]`, FillValueJson: "-7"}); err != nil {
		t.Fatal(err)
	}
	// Chunk (0, 0) holds its row-major index; (1, 0) stays missing.
	chunk := make([]byte, 0, 64*128*4)
	for i := range uint32(64 * 128) {
		chunk = binary.LittleEndian.AppendUint32(chunk, i)
	}
	if _, err := g.Store().Set(ctx, "a/c/0/0", bytes.NewReader(chunk), storesvc.Condition{}); err != nil {
		t.Fatal(err)
	}
	read := func(rows uint64) ([]byte, error) {
		got := make([]byte, rows*128*4)
		err := readAllShared(t, c, []*gatewayv1.Slice{{Start: 0, Stop: rows}, {Start: 0, Stop: 128}}, func(b *gatewayv1.Block, data []byte) {
			copy(got[b.GetOrigin()[0]*128*4:], data)
		})
		return got, err
	}
	got, err := read(128)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 128 * 128 {
		want := int32(i)
		if i >= 64*128 {
			want = -7
		}
		if v := int32(binary.LittleEndian.Uint32(got[4*i:])); v != want {
			t.Fatalf("element %d = %d, want %d", i, v, want)
		}
	}
	if _, err := g.Store().Set(ctx, "a/c/1/0", bytes.NewReader(chunk[:100]), storesvc.Condition{}); err != nil {
		t.Fatal(err)
	}
	if _, err := read(128); status.Code(err) != codes.DataLoss || !bytes.Contains([]byte(err.Error()), []byte("a/c/1/0")) {
		t.Fatalf("read of a short chunk: %v, want DataLoss naming a/c/1/0", err)
	}
	if _, err := read(64); err != nil {
		t.Fatalf("the gateway stopped serving after a bad chunk: %v", err)
	}
}

// readAllShared reads sel of array "a" through ReadSlabShared as a client
// does: it maps the segment, hands every block with its bytes there to
// handle, releases an eighth of the ring at a time and the rest at the
// end. Every block must come in shared memory.
func readAllShared(tb testing.TB, c gatewayv1.ArrayServiceClient, sel []*gatewayv1.Slice, handle func(b *gatewayv1.Block, data []byte)) error {
	tb.Helper()
	s, err := c.ReadSlabShared(ctx)
	if err != nil {
		return err
	}
	s.Send(&gatewayv1.ReadSlabSharedRequest{Message: &gatewayv1.ReadSlabSharedRequest_Read{Read: &gatewayv1.ReadSlabRequest{Path: "a", Selection: sel}}})
	m, err := s.Recv()
	if err != nil {
		return err
	}
	seg := m.GetHeader().GetSharedSegment()
	if seg == nil {
		tb.Fatal("no segment offered")
	}
	mp, err := shm.Attach(seg.GetPath(), int64(seg.GetSize()), seg.GetToken())
	if err != nil {
		tb.Fatal(err)
	}
	defer mp.Close()
	sendAttach(s, true)
	var blocks, bytes uint64
	for {
		msg, err := s.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if msg.GetEnd() != nil {
			sendRelease(s, blocks)
			continue
		}
		b := msg.GetBlock()
		r := b.GetShared()
		if r == nil {
			tb.Fatalf("block %v not in shared memory", b.GetOrigin())
		}
		handle(b, mp.Data[r.GetOffset():r.GetOffset()+r.GetLength()])
		blocks++
		if bytes += r.GetLength(); bytes >= seg.GetSize()/8 {
			sendRelease(s, blocks)
			blocks, bytes = 0, 0
		}
	}
}

// A segment's memory comes from the budget: with less to spare than a
// segment, reads go inline (and still read right), and what a segment
// holds is given back when it is dropped.
func TestSharedSegmentsUseTheBudget(t *testing.T) {
	if !shm.Supported {
		t.Skip("no shared memory on this platform")
	}
	small := membudget.New(4<<20, time.Second)
	c := sharedFixture(t, gateway.Config{SharedMemory: true, Budget: small})
	others, err := small.Acquire(ctx, 3<<20+512<<10, "other calls")
	if err != nil {
		t.Fatal(err)
	}
	defer others.Release()
	s, h := openShared(t, c, 0, 64)
	if h.GetSharedSegment() != nil {
		t.Fatal("a 1 MiB segment was lent out of a 512 KiB budget")
	}
	checkRows(t, recvInline(t, s, 64), 0)

	big := membudget.New(64<<20, time.Second)
	c = sharedFixture(t, gateway.Config{SharedMemory: true, Budget: big})
	s, h = openShared(t, c, 0, 64)
	if h.GetSharedSegment() == nil {
		t.Fatal("no segment offered")
	}
	if big.InUse() < 1<<20 {
		t.Fatalf("a lent segment holds %d bytes of the budget", big.InUse())
	}
	sendAttach(s, false)
	for {
		if _, err := s.Recv(); err != nil {
			break
		}
	}
}

// TestStoreSharedUsesGatewaySegments: the StoreService beside the
// gateway lends GetPartialValuesShared the gateway's segments, out of its
// memory budget (none offered when the budget cannot spare one), and
// values arrive through them.
func TestStoreSharedUsesGatewaySegments(t *testing.T) {
	for _, tc := range []struct {
		name   string
		budget int64
		offer  bool
	}{{"budget", 64 << 20, true}, {"no budget", 512 << 10, false}} {
		t.Run(tc.name, func(t *testing.T) {
			budget := membudget.New(tc.budget, time.Second)
			backend := memory.New()
			value := bytes.Repeat([]byte("zarrgate"), 1000)
			if _, err := backend.Set(ctx, "a/c/0", bytes.NewReader(value), storesvc.Condition{}); err != nil {
				t.Fatal(err)
			}
			g := gateway.New(backend, testCodecs, gateway.Config{SharedMemory: true, SharedMemoryBytes: 1 << 20, Budget: budget})
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
			call, err := storev1.NewStoreServiceClient(cc).GetPartialValuesShared(ctx)
			if err != nil {
				t.Fatal(err)
			}
			call.Send(&storev1.GetPartialValuesSharedRequest{Read: &storev1.GetPartialValuesRequest{Ranges: []*storev1.KeyRange{{Key: "a/c/0"}, {Key: "a/c/1"}}}})
			offer, err := call.Recv()
			if err != nil {
				t.Fatal(err)
			}
			seg := offer.GetSegment()
			if (seg != nil) != tc.offer {
				t.Fatalf("offer %v, want one: %v", seg, tc.offer)
			}
			var m *shm.Mapping
			if seg != nil {
				if budget.InUse() < 1<<20 {
					t.Errorf("a lent segment holds %d bytes of the budget", budget.InUse())
				}
				if m, err = shm.Attach(seg.GetPath(), int64(seg.GetSize()), seg.GetToken()); err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				yes := true
				call.Send(&storev1.GetPartialValuesSharedRequest{Attach: &yes})
			}
			resp, err := call.Recv()
			if err != nil {
				t.Fatal(err)
			}
			parts := resp.GetParts()
			if len(parts) != 2 || !parts[1].GetMissing() || !parts[0].GetLast() {
				t.Fatalf("parts %v", parts)
			}
			got := parts[0].GetData()
			if sh := parts[0].GetShared(); sh != nil {
				if m == nil {
					t.Fatal("a shared value without a segment")
				}
				got = m.Data[sh.GetOffset() : sh.GetOffset()+sh.GetLength()]
				call.Send(&storev1.GetPartialValuesSharedRequest{Release: 1})
			} else if tc.offer {
				t.Error("value inline with the segment attached")
			}
			if !bytes.Equal(got, value) {
				t.Errorf("value of %d bytes, want %d", len(got), len(value))
			}
			call.CloseSend()
			if _, err := call.Recv(); err != io.EOF {
				t.Errorf("end: %v", err)
			}
		})
	}
}
