package client_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"github.com/zarrgate/zarrgate/client"
	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/gateway"
	"github.com/zarrgate/zarrgate/gateway/arrayserver"
	"github.com/zarrgate/zarrgate/internal/bulk"
	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/internal/testcerts"
	"github.com/zarrgate/zarrgate/internal/tlsconf"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/memory"
)

// bulkServer serves a gateway over an in-memory store with a bulk
// listener (over TLS with tlsCfg, when set) and counts the ReadSlab calls
// that ask for bulk.
type bulkServer struct {
	addr   string
	bulk   *bulk.Listener
	asked  atomic.Int64 // ReadSlab calls with bulk set
	opened atomic.Int64 // OpenSmallReads calls
	calls  atomic.Int64 // ReadSlabSmall gRPC calls (not those over small-reads connections)
	srv    *rpc.Server
}

// smallCalls counts the ReadSlabSmall calls that reach the server as
// gRPC calls: a stats handler sees those only.
type smallCalls struct{ n *atomic.Int64 }

func (h smallCalls) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	if info.FullMethodName == gatewayv1.ArrayService_ReadSlabSmall_FullMethodName {
		h.n.Add(1)
	}
	return ctx
}
func (smallCalls) HandleRPC(context.Context, stats.RPCStats)                         {}
func (smallCalls) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (smallCalls) HandleConn(context.Context, stats.ConnStats)                       {}

func newBulkServer(t testing.TB, tlsCfg *tls.Config, bcfg bulk.Config, lis net.Listener) *bulkServer {
	t.Helper()
	return newCountingServer(t, tlsCfg, &bcfg, lis, nil)
}

// newPlainServer is newBulkServer without a bulk listener.
func newPlainServer(t *testing.T) *bulkServer {
	t.Helper()
	return newCountingServer(t, nil, nil, nil, nil)
}

// newCountingServer serves a gateway over store (an in-memory one if
// nil) with a bulk listener of bcfg (none if nil).
func newCountingServer(t testing.TB, tlsCfg *tls.Config, bcfg *bulk.Config, lis net.Listener, store storesvc.Store) *bulkServer {
	t.Helper()
	s := &bulkServer{}
	if lis == nil {
		var err error
		if lis, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	opts := []grpc.ServerOption{grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		return h(srv, &askedStream{ServerStream: ss, s: s})
	}), grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if info.FullMethod == gatewayv1.ArrayService_OpenSmallReads_FullMethodName {
			s.opened.Add(1)
		}
		return h(ctx, req)
	}), grpc.StatsHandler(smallCalls{&s.calls})}
	if tlsCfg != nil {
		opts = append(opts, rpc.ServerTLS(tlsCfg))
		bcfg.TLS = tlsCfg.Clone()
		bcfg.TLS.NextProtos = nil
	}
	srv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)), opts...)
	s.srv = srv
	if store == nil {
		store = memory.New()
	}
	as := arrayserver.NewServer(gateway.New(store, codecsvc.NewLocal(), gateway.Config{}))
	if bcfg != nil {
		bl, err := bulk.Listen("127.0.0.1:0", *bcfg)
		if err != nil {
			t.Fatal(err)
		}
		s.bulk = bl
		as.SetBulk(bl)
		t.Cleanup(func() { bl.Close() })
	}
	as.Register(srv)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	s.addr = lis.Addr().String()
	return s
}

type askedStream struct {
	grpc.ServerStream
	s *bulkServer
}

func (a *askedStream) RecvMsg(m any) error {
	err := a.ServerStream.RecvMsg(m)
	if r, ok := m.(*gatewayv1.ReadSlabRequest); ok && r.GetBulk() {
		a.s.asked.Add(1)
	}
	return err
}

// idle waits until the bulk listener has no connection open.
func (s *bulkServer) idle(t *testing.T) {
	t.Helper()
	for i := 0; s.bulk.Open() > 0; i++ {
		if i > 3000 {
			t.Fatalf("%d bulk connections still open", s.bulk.Open())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// everyRead reads sel of a by every public read that can use ReadSlab, and
// returns what each returned, in one comparable form.
func everyRead(t *testing.T, a *client.Array, sel client.Selection) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	if a.DataType == "string" {
		v, shape, err := client.ReadStrings(ctx, a, sel)
		if err != nil {
			t.Fatal(err)
		}
		out["ReadStrings"] = fmt.Sprint(shape, v)
	} else {
		_, raw, err := client.ReadBytes(ctx, a, sel)
		if err != nil {
			t.Fatal(err)
		}
		out["ReadBytes"] = string(raw)
		if a.DataType == "float32" {
			v, shape, err := client.Read[float32](ctx, a, sel)
			if err != nil {
				t.Fatal(err)
			}
			out["Read"] = fmt.Sprint(shape, v)
			dst := make([]float32, len(v))
			if err := client.ReadInto(ctx, a, sel, dst); err != nil {
				t.Fatal(err)
			}
			out["ReadInto"] = fmt.Sprint(dst)
		}
	}
	_, blocks, err := a.Blocks(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	// Blocks owns its data: keep every block, format them at the end.
	var kept []client.Block
	for b, err := range blocks {
		if err != nil {
			t.Fatal(err)
		}
		kept = append(kept, b)
	}
	var bs []string
	for _, b := range kept {
		bs = append(bs, fmt.Sprint(b.Origin, b.Shape, b.Data, b.Offsets))
	}
	slices.Sort(bs)
	out["Blocks"] = fmt.Sprint(bs)
	return out
}

// TestBulkReadsAgree reads arrays of several types (fill chunks among
// the written ones), strided selections and strings through the bulk
// connection and through the stream, with every read function, and
// checks that the results agree byte for byte and that bulk was used.
func TestBulkReadsAgree(t *testing.T) {
	client.SetSplitMin(t, 1<<10) // split reads too, each band its own bulk read
	ctx := context.Background()
	s := newBulkServer(t, nil, bulk.Config{}, nil)
	viaBulk := dialT(t, s.addr, client.WithSharedMemory(false), client.WithConnections(2))
	viaStream := dialT(t, s.addr, client.WithSharedMemory(false), client.WithBulk(false))
	r := rand.New(rand.NewPCG(3, 4))
	for _, dt := range []string{"float32", "int16", "uint8", "float64", "string"} {
		a, err := viaStream.CreateArray(ctx, "bulk/"+dt, client.ArraySpec{Shape: []int64{250, 330}, DataType: dt, ChunkShape: []int64{100, 150}, FillValue: fillOf(dt)})
		if err != nil {
			t.Fatal(err)
		}
		// The first chunk row only: the rest is the fill value. Chunks
		// of 32 KiB and more travel by reference (wire.Large).
		sel := client.Selection{{Start: 0, Stop: 100, Step: 1}, {Start: 0, Stop: 330, Step: 1}}
		if dt == "string" {
			v := make([]string, 100*330)
			for i := range v {
				v[i] = fmt.Sprint("s", i*i%97, "-", i)
			}
			_, err = client.WriteStrings(ctx, a, sel, v)
		} else {
			raw := make([]byte, 100*330*map[string]int{"float32": 4, "int16": 2, "uint8": 1, "float64": 8}[dt])
			for i := range raw {
				raw[i] = byte(r.IntN(256))
			}
			b := client.Block{Origin: []int64{0, 0}, Shape: []int64{100, 330}, Data: raw}
			_, err = a.WriteBlocks(ctx, sel, func(yield func(client.Block, error) bool) { yield(b, nil) })
		}
		if err != nil {
			t.Fatal(err)
		}
		ab, err := viaBulk.OpenArray(ctx, "bulk/"+dt)
		if err != nil {
			t.Fatal(err)
		}
		for _, sel := range []client.Selection{nil, client.MustParseSelection("3:247:4,1:329:3"), client.MustParseSelection("30:250,0:330:7"), client.MustParseSelection("50:51,60:61")} {
			before := s.bulk.Counts()[bulk.ResultAccepted]
			placed := client.PlacedFrames()
			want := everyRead(t, a, sel)
			if client.PlacedFrames() != placed {
				t.Fatalf("%s: the client WithBulk(false) placed bulk frames", dt)
			}
			if got := s.bulk.Counts()[bulk.ResultAccepted]; got != before {
				t.Fatalf("%s: the client WithBulk(false) used bulk", dt)
			}
			// Rows of any length straight into place, then only those
			// of 64 bytes and more (the others copied from the frame).
			client.SetMinPlacedRow(t, 1)
			got := everyRead(t, ab, sel)
			n := client.PlacedFrames() - placed
			client.SetMinPlacedRow(t, 64)
			got64 := everyRead(t, ab, sel)
			for k, w := range want {
				if got[k] != w {
					t.Errorf("%s %v: %s through bulk differs from the stream's", dt, sel, k)
				}
				if got64[k] != w {
					t.Errorf("%s %v: %s through bulk (rows of 64 bytes and more placed) differs from the stream's", dt, sel, k)
				}
			}
			// Dense reads of fixed-size types take the blocks straight
			// into place (the last selection is one element, read with
			// ReadSlabSmall).
			if shape := sel.Shape(ab.Shape); dt != "string" && shape[0]*shape[1] > 1 && n == 0 {
				t.Errorf("%s %v: no bulk frame read straight into place", dt, sel)
			}
			// Small reads go over a small-reads connection (one for
			// all of them, kept between reads); Blocks is always
			// ReadSlab.
			if n := s.bulk.Counts()[bulk.ResultAccepted] - before; n == 0 {
				t.Errorf("%s %v: no bulk connection for %d reads", dt, sel, len(want))
			}
		}
	}
	if s.opened.Load() == 0 {
		t.Error("no small-reads connection was opened")
	}
	viaBulk.Close() // and its idle small-reads connections
	s.idle(t)
	if asked, opened, got := s.asked.Load(), s.opened.Load(), s.bulk.Counts(); uint64(asked+opened) != got[bulk.ResultAccepted] || got[bulk.ResultAccepted] != got[bulk.ResultAccepted]+got[bulk.ResultUnknownTicket]+got[bulk.ResultBadHello]+got[bulk.ResultTimeout] {
		t.Errorf("%d calls asked for bulk, %d for small-reads connections; connections %v", asked, opened, got)
	}
}

func fillOf(dt string) string {
	switch dt {
	case "string":
		return `"fill"`
	case "uint8":
		return "7"
	}
	return "-3"
}

// TestBulkUnreachable: an offer naming a port nobody listens on makes the
// client read again through the stream, and not ask for bulk for a while.
func TestBulkUnreachable(t *testing.T) {
	ctx := context.Background()
	// A listener whose port is closed before any offer: connections to
	// it are refused.
	blis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := bulk.New(blis, bulk.Config{})
	blis.Close()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	as := arrayserver.NewServer(gateway.New(memory.New(), codecsvc.NewLocal(), gateway.Config{}))
	as.SetBulk(dead)
	as.Register(srv)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	c := dialT(t, lis.Addr().String(), client.WithSharedMemory(false))
	// More than a small read (1 MiB): a ReadSlab.
	a, err := c.CreateArray(ctx, "u", client.ArraySpec{Shape: []int64{600, 600}, DataType: "float32", ChunkShape: []int64{100, 100}, FillValue: "2.5"})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		v, _, err := client.Read[float32](ctx, a, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(v) != 600*600 || v[0] != 2.5 || v[len(v)-1] != 2.5 {
			t.Fatalf("read %d values %v…", len(v), v[:1])
		}
	}
	// The first read's ticket was given up (its call cancelled), the
	// second did not ask.
	if n := dead.Waiting(); n != 0 {
		t.Errorf("%d tickets wait", n)
	}
}

// TestBulkFallbackAsksOnce counts the calls asking for bulk of a client
// that cannot connect: one, then none for a minute.
func TestBulkFallbackAsksOnce(t *testing.T) {
	ctx := context.Background()
	s := newBulkServer(t, nil, bulk.Config{Advertise: "192.0.2.1"}, nil) // TEST-NET-1: never reached
	c := dialT(t, s.addr, client.WithSharedMemory(false))
	a, err := c.CreateArray(ctx, "f", client.ArraySpec{Shape: []int64{10, 10}, DataType: "uint8", ChunkShape: []int64{10, 10}, FillValue: "9"})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, raw, err := client.ReadBytes(ctx, a, nil); err != nil || len(raw) != 100 || raw[99] != 9 {
			t.Fatalf("read: %v", err)
		}
	}
	if n := s.asked.Load(); n != 1 {
		t.Fatalf("%d calls asked for bulk, want 1", n)
	}
}

// TestBulkTLS reads over a TLS bulk listener, with and without client
// certificates (mTLS), and the reads use bulk.
func TestBulkTLS(t *testing.T) {
	ctx := context.Background()
	p := newPKI(t)
	cliCert, cliKey := p.ca.Issue(t, testcerts.Client("alice")).WriteAs(t, p.dir, "alice.pem", "alice-key.pem")
	for _, mtls := range []bool{false, true} {
		clientCA := ""
		if mtls {
			clientCA = p.caFile
		}
		cfg, err := tlsconf.Server(p.srvCert, p.srvKey, clientCA, slog.New(slog.NewTextHandler(io.Discard, nil)), "h2")
		if err != nil {
			t.Fatal(err)
		}
		s := newBulkServer(t, cfg, bulk.Config{}, nil)
		ccfg, err := client.LoadTLS(p.caFile, "", "")
		if mtls {
			ccfg, err = client.LoadTLS(p.caFile, cliCert, cliKey)
		}
		if err != nil {
			t.Fatal(err)
		}
		c := dialT(t, s.addr, client.WithTLS(ccfg), client.WithSharedMemory(false))
		a, err := c.CreateArray(ctx, "t", client.ArraySpec{Shape: []int64{700, 700}, DataType: "float32", ChunkShape: []int64{100, 100}, FillValue: "4"})
		if err != nil {
			t.Fatal(err)
		}
		v, _, err := client.Read[float32](ctx, a, nil)
		if err != nil || len(v) != 700*700 || v[12345] != 4 {
			t.Fatalf("mtls %v: read: %v", mtls, err)
		}
		if got := s.bulk.Counts(); got[bulk.ResultAccepted] != 1 || got[bulk.ResultTLSFailed] != 0 {
			t.Fatalf("mtls %v: bulk connections %v", mtls, got)
		}
		// Small reads over a small-reads connection, TLS too.
		for range 3 {
			v, _, err = client.Read[float32](ctx, a, client.MustParseSelection("10:20,690:700"))
			if err != nil || len(v) != 100 || v[99] != 4 {
				t.Fatalf("mtls %v: small read: %v", mtls, err)
			}
		}
		if s.opened.Load() != 1 || s.calls.Load() != 0 {
			t.Fatalf("mtls %v: %d small-reads connections opened, %d ReadSlabSmall calls; want 1 and none", mtls, s.opened.Load(), s.calls.Load())
		}
		// The listener counts a connection once it has handed it over,
		// which may be after the reads on it.
		for i := 0; s.bulk.Counts()[bulk.ResultAccepted] < 2 && i < 500; i++ {
			time.Sleep(10 * time.Millisecond)
		}
		if got := s.bulk.Counts(); got[bulk.ResultAccepted] != 2 || got[bulk.ResultTLSFailed] != 0 {
			t.Fatalf("mtls %v: bulk connections %v; want 2 accepted (the read's, then the small reads')", mtls, got)
		}
	}
}

// TestBulkStopEarly stops iterating a bulk read's blocks after the first:
// the call and its bulk connection end, nothing is left open.
func TestBulkStopEarly(t *testing.T) {
	ctx := context.Background()
	s := newBulkServer(t, nil, bulk.Config{}, nil)
	c := dialT(t, s.addr, client.WithSharedMemory(false))
	a, err := c.CreateArray(ctx, "e", client.ArraySpec{Shape: []int64{2048, 2048}, DataType: "float32", ChunkShape: []int64{256, 256}, FillValue: "1"})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		_, blocks, err := a.Blocks(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, err := range blocks {
			if err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	s.idle(t)
	if got := s.bulk.Counts()[bulk.ResultAccepted]; got != 3 || s.asked.Load() != 3 {
		t.Fatalf("%d bulk connections for 3 reads", got)
	}
}

// TestBulkRefusedFallsBack: a bulk listener that closes the client's
// connection before any frame (over its connection limit here) makes the
// client read through the stream at once, not wait for the server to
// give up on the ticket.
func TestBulkRefusedFallsBack(t *testing.T) {
	ctx := context.Background()
	s := newBulkServer(t, nil, bulk.Config{MaxConns: 1, HelloTimeout: time.Hour}, nil)
	hold, err := net.Dial("tcp", s.bulk.Addr().String()) // the one connection, in its hello
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	for s.bulk.Open() < 1 {
		time.Sleep(time.Millisecond)
	}
	c := dialT(t, s.addr, client.WithSharedMemory(false))
	a, err := c.CreateArray(ctx, "r", client.ArraySpec{Shape: []int64{600, 600}, DataType: "float32", ChunkShape: []int64{300, 300}, FillValue: "3"})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		v, _, err := client.Read[float32](ctx, a, nil)
		if err != nil || len(v) != 600*600 || v[600*600-1] != 3 {
			t.Fatalf("read: %v", err)
		}
	}
	if got := s.bulk.Counts(); got[bulk.ResultOverLimit] != 1 || s.asked.Load() != 1 {
		t.Fatalf("%d calls asked for bulk; connections %v", s.asked.Load(), got)
	}
}

// TestBulkReadFails: a read that fails on the server after its offer
// (a corrupt chunk) reports the server's error, and bulk stays on.
func TestBulkReadFails(t *testing.T) {
	ctx := context.Background()
	s := newBulkServer(t, nil, bulk.Config{}, nil)
	c := dialT(t, s.addr, client.WithSharedMemory(false))
	a, err := c.CreateArray(ctx, "bad", client.ArraySpec{Shape: []int64{600, 600}, DataType: "float32", ChunkShape: []int64{600, 600}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Store(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Set(ctx, "bad/c/0/0", strings.NewReader("not zstd at all"), storesvc.Condition{}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, _, err := client.Read[float32](ctx, a, nil); !errors.Is(err, errs.DataLoss) {
			t.Fatalf("read %d of a corrupt chunk: %v", i, err)
		}
	}
	if n := s.asked.Load(); n != 2 {
		t.Fatalf("%d of 2 reads asked for bulk", n)
	}
}
