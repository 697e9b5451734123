package arrayserver

import (
	"encoding/json"
	"net"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/gateway"
	"github.com/zarrgate/zarrgate/internal/bulk"
	"github.com/zarrgate/zarrgate/storesvc/memory"
)

// smallConnRead sends one read of a's element (0, 0) over conn and
// returns the answer, or the error of the connection.
func smallConnRead(conn net.Conn) (*gatewayv1.SmallReadsResponse, error) {
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	m := &gatewayv1.SmallReadsRequest{Read: &gatewayv1.ReadSlabSmallRequest{Path: "a", Selection: []*gatewayv1.Slice{{Start: 0, Stop: 1}, {Start: 0, Stop: 1}}}}
	if err := bulk.NewWriter(conn).Write(m, nil); err != nil {
		return nil, err
	}
	raw, err := bulk.NewReader(conn, 0).Next(true)
	if err != nil {
		return nil, err
	}
	var out gatewayv1.SmallReadsResponse
	return &out, proto.Unmarshal(raw, &out)
}

// TestSmallReadsTerms: a small-reads connection is closed by the server
// when it idles past the idle timeout, and between two reads once it has
// lived its lifetime; the terms sent with the offer are those in force.
func TestSmallReadsTerms(t *testing.T) {
	g := gateway.New(memory.New(), codecsvc.NewLocal(), gateway.Config{})
	if _, err := g.CreateArray(ctx, "a", gateway.ArraySpec{Shape: []int64{4, 4}, DataType: "int32", ChunkShape: []int64{2, 2}, Codecs: json.RawMessage(plainBytes)}); err != nil {
		t.Fatal(err)
	}
	s := NewServer(g)
	s.small.idle, s.small.lifetime = 300*time.Millisecond, 2*time.Second
	c := serveBulkB(t, s)
	resp, err := c.OpenSmallReads(ctx, &gatewayv1.OpenSmallReadsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetIdleTimeoutMs() != 300 || resp.GetLifetimeMs() != 2000 || resp.GetMaxRequestBytes() != SmallReadsMaxRequest {
		t.Errorf("terms %v", resp)
	}

	// Idle: reads 100 ms apart keep it open, 600 ms of silence close it.
	conn := openSmallReadsB(t, c)
	for range 5 {
		if out, err := smallConnRead(conn); err != nil || out.GetCode() != 0 {
			t.Fatalf("read: %v %v", out, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(600 * time.Millisecond)
	if out, err := smallConnRead(conn); err == nil {
		t.Fatalf("a read after 600 ms idle was answered (%v); want the connection closed", out)
	}

	// Lifetime: reads 100 ms apart are answered for 2 s, then the
	// connection is closed before the next.
	conn = openSmallReadsB(t, c)
	start := time.Now()
	for {
		out, err := smallConnRead(conn)
		if err != nil {
			break
		}
		if out.GetCode() != 0 {
			t.Fatalf("read: %v", out)
		}
		if time.Since(start) > 4*time.Second {
			t.Fatal("the connection outlived its lifetime of 2 s by 2 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if d := time.Since(start); d < 2*time.Second {
		t.Errorf("the connection was closed after %v, before its lifetime of 2 s", d)
	}
}
