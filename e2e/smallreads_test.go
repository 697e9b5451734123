package e2e

import (
	"context"
	"encoding/binary"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"github.com/zarrgate/zarrgate/client"
	"github.com/zarrgate/zarrgate/internal/bulk"
)

func handledSmall(code string) string {
	return `grpc_server_handled_total{grpc_code="` + code + `", grpc_method="ReadSlabSmall", grpc_service="zarrgate.gateway.v1.ArrayService", grpc_type="unary"}`
}

// TestServeSmallReadsHostile: `zarrgate serve`'s small-reads connections
// (OpenSmallReads) taken by a client that sends what it likes. Frames
// that are not a read get INVALID_ARGUMENT and the connection goes on; a
// slab over 1 MiB RESOURCE_EXHAUSTED; a frame longer than the server
// takes, or a ticket used twice, closes the connection unanswered; 300
// connections held open do not grow the server's memory, and reads go on
// meanwhile. Every read over a connection is counted as a ReadSlabSmall
// call.
func TestServeSmallReadsHostile(t *testing.T) {
	p := startWithAdmin(t, "serve", true, "--root", t.TempDir())
	if bulkAddr(p) == "" {
		t.Fatal("no bulk listener")
	}
	ctx := context.Background()
	c, err := client.Dial(ctx, p.addr, client.WithSharedMemory(false))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, err := c.CreateArray(ctx, "h", client.ArraySpec{Shape: []int64{1000, 1000}, DataType: "float32", ChunkShape: []int64{100, 100}})
	if err != nil {
		t.Fatal(err)
	}
	vals := make([]float32, 1000*1000)
	for i := range vals {
		vals[i] = float32(i)
	}
	if _, err := client.Write(ctx, a, nil, vals); err != nil {
		t.Fatal(err)
	}
	ar := gatewayv1.NewArrayServiceClient(c.Conn())
	open := func() (net.Conn, []byte) {
		t.Helper()
		resp, err := ar.OpenSmallReads(ctx, &gatewayv1.OpenSmallReadsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetMaxRequestBytes() == 0 || resp.GetIdleTimeoutMs() == 0 || resp.GetLifetimeMs() == 0 {
			t.Fatalf("terms %v", resp)
		}
		o := resp.GetOffer()
		conn, err := bulk.Dial(ctx, net.JoinHostPort("127.0.0.1", strconv.Itoa(int(o.GetPort()))), nil, o.GetTicket())
		if err != nil {
			t.Fatal(err)
		}
		return conn, o.GetTicket()
	}
	frame := func(b []byte) []byte { return append(binary.LittleEndian.AppendUint64(nil, uint64(len(b))), b...) }
	ask := func(conn net.Conn, raw []byte) *gatewayv1.SmallReadsResponse {
		t.Helper()
		conn.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := conn.Write(raw); err != nil {
			t.Fatal(err)
		}
		b, err := bulk.NewReader(conn, 0).Next(true)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		var out gatewayv1.SmallReadsResponse
		if err := proto.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		return &out
	}
	// read is the frame of a read of path's rows y0:y1, columns x0:x1.
	read := func(path string, y0, y1, x0, x1 uint64, timeout uint64) []byte {
		b, err := proto.Marshal(&gatewayv1.SmallReadsRequest{TimeoutMs: timeout, Read: &gatewayv1.ReadSlabSmallRequest{Path: path,
			Selection: []*gatewayv1.Slice{{Start: y0, Stop: y1, Step: 1}, {Start: x0, Stop: x1, Step: 1}}}})
		if err != nil {
			t.Fatal(err)
		}
		return frame(b)
	}
	// closedUnanswered checks that the server closes conn without an
	// answer.
	closedUnanswered := func(what string, conn net.Conn) {
		t.Helper()
		conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		if n, err := conn.Read(make([]byte, 8)); n != 0 || !closed(err) {
			t.Errorf("%s: read %d bytes, %v; want the connection closed unanswered", what, n, err)
		}
		conn.Close()
	}
	before := p.scrape(t)

	// A request without its read (not an empty frame: a length of 0
	// ends the connection).
	b, err := proto.Marshal(&gatewayv1.SmallReadsRequest{TimeoutMs: 5})
	if err != nil {
		t.Fatal(err)
	}
	noRead := frame(b)
	conn, ticket := open()
	for _, c := range []struct {
		what string
		raw  []byte
		want codes.Code
	}{
		{"not a protobuf", frame([]byte{0xff, 0xff, 0xff, 0xff, 0x0f}), codes.InvalidArgument},
		{"no read", noRead, codes.InvalidArgument},
		{"a slab of 4 MB", read("h", 0, 1000, 0, 1000, 0), codes.ResourceExhausted},
		{"past the array's end", read("h", 990, 1010, 0, 10, 0), codes.OutOfRange},
		{"no such array", read("nothing", 0, 1, 0, 1, 0), codes.NotFound},
		{"a good read, the longest timeout", read("h", 10, 12, 20, 23, math.MaxUint64), codes.OK},
	} {
		out := ask(conn, c.raw)
		if got := codes.Code(out.GetCode()); got != c.want {
			t.Errorf("%s: %v %q, want %v", c.what, got, out.GetMessage(), c.want)
		}
		if c.want == codes.OK {
			var got []float32
			for _, b := range out.GetRead().GetBlocks() {
				for i := 0; i+4 <= len(b.GetData()); i += 4 {
					got = append(got, math.Float32frombits(binary.LittleEndian.Uint32(b.GetData()[i:])))
				}
			}
			if want := []float32{10020, 10021, 10022, 11020, 11021, 11022}; !slices.Equal(got, want) {
				t.Errorf("%s: %v, want %v", c.what, got, want)
			}
		}
	}
	// A frame longer than the server takes: closed at its length.
	conn.Write(binary.LittleEndian.AppendUint64(nil, 1<<62))
	closedUnanswered("a frame of 2^62 bytes", conn)
	conn, _ = open()
	conn.Write(frame(make([]byte, 1<<20)))
	closedUnanswered("a request of 1 MiB", conn)
	// The ticket of a connection made already.
	again, err := net.Dial("tcp", bulkAddr(p))
	if err != nil {
		t.Fatal(err)
	}
	again.Write(bulk.Hello(ticket))
	closedUnanswered("a ticket used twice", again)

	// 300 connections opened and left idle: the listener holds at most
	// its 256, memory stays flat, and a client still reads.
	pid := p.cmd.Process.Pid
	rss0, err := statusBytes(pid, "VmRSS")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range 300 {
		resp, err := ar.OpenSmallReads(ctx, &gatewayv1.OpenSmallReadsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		o := resp.GetOffer()
		hc, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(o.GetPort()))))
		if err != nil {
			t.Fatal(err)
		}
		hc.Write(bulk.Hello(o.GetTicket()))
		held = append(held, hc)
	}
	fresh, err := client.Dial(ctx, p.addr, client.WithSharedMemory(false))
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	fa, err := fresh.OpenArray(ctx, "h")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		got := make([]float32, 64*64)
		y := int64(i * 17)
		if err := client.ReadInto(ctx, fa, client.Selection{{Start: y, Stop: y + 64, Step: 1}, {Start: 100, Stop: 164, Step: 1}}, got); err != nil {
			t.Fatal(err)
		}
		if got[0] != vals[y*1000+100] || got[len(got)-1] != vals[(y+63)*1000+163] {
			t.Fatalf("read %d while 300 connections are held: wrong values", i)
		}
	}
	if rss, err := statusBytes(pid, "VmRSS"); err != nil || rss-rss0 > 64*MiB {
		t.Errorf("server RSS grew by %d MiB with 300 small-reads connections held (%v)", (rss-rss0)/MiB, err)
	}
	after := p.scrape(t)
	if n := delta(before, after, bulkCount("over_limit")); n < 300-256 {
		t.Errorf("%v connections refused over the limit, want at least %d", n, 300-256)
	}
	// The reads over connections are counted as ReadSlabSmall calls by
	// their code (frames that are no read never reach the method).
	for code, want := range map[string]float64{"ResourceExhausted": 1, "OutOfRange": 1, "NotFound": 1, "InvalidArgument": 0} {
		if n := delta(before, after, handledSmall(code)); n != want {
			t.Errorf("%v ReadSlabSmall calls counted %s, want %v", n, code, want)
		}
	}
	if n := delta(before, after, handledSmall("OK")); n < 51 {
		t.Errorf("%v ReadSlabSmall calls counted OK, want 51 or more", n)
	}
}

// TestServeSmallReadsTokenRevoked: a small-reads connection opened with a
// token serves reads until the token is removed from the token file, then
// refuses them (UNAUTHENTICATED), on the same connection: each read
// presents the opening call's credentials anew.
func TestServeSmallReadsTokenRevoked(t *testing.T) {
	dir := t.TempDir()
	tokens, policy := filepath.Join(dir, "tokens"), filepath.Join(dir, "policy.yaml")
	alice := strings.TrimSpace(mustZg(t, "", "token", "new", "--user", "alice", "--append", tokens))
	writePolicy(t, policy, "rules:\n  - principals: [user:alice]\n    permissions: [read, write]\n    prefixes: [\"\"]\n")
	s := startServer(t, "--root", filepath.Join(dir, "data"), "--tokens", tokens, "--policy", policy)
	ctx := context.Background()
	c, err := client.Dial(ctx, s.addr, client.WithToken(alice), client.WithSharedMemory(false))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.CreateArray(ctx, "r", client.ArraySpec{Shape: []int64{4, 4}, DataType: "int32", ChunkShape: []int64{2, 2}, FillValue: "5"}); err != nil {
		t.Fatal(err)
	}
	// c.Conn() carries alice's token (WithToken).
	resp, err := gatewayv1.NewArrayServiceClient(c.Conn()).OpenSmallReads(ctx, &gatewayv1.OpenSmallReadsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := bulk.Dial(ctx, net.JoinHostPort("127.0.0.1", strconv.Itoa(int(resp.GetOffer().GetPort()))), nil, resp.GetOffer().GetTicket())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := bulk.NewReader(conn, 0)
	read := func() codes.Code {
		t.Helper()
		conn.SetDeadline(time.Now().Add(30 * time.Second))
		m := &gatewayv1.SmallReadsRequest{Read: &gatewayv1.ReadSlabSmallRequest{Path: "r"}}
		if err := bulk.NewWriter(conn).Write(m, nil); err != nil {
			t.Fatal(err)
		}
		b, err := r.Next(true)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		var out gatewayv1.SmallReadsResponse
		if err := proto.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		return codes.Code(out.GetCode())
	}
	if got := read(); got != codes.OK {
		t.Fatalf("alice's read: %v", got)
	}
	// Alice's token removed from the file: once the server has reloaded
	// it (a call with it is refused), the connection's next read is too.
	if err := os.WriteFile(tokens, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, err := c.OpenArray(ctx, "r"); err != nil && strings.Contains(err.Error(), "unknown bearer token") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the removed token is still accepted by calls")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := read(); got != codes.Unauthenticated {
		t.Errorf("a read on alice's connection after her token was removed: %v, want Unauthenticated", got)
	}
}
