package bulk_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"github.com/zarrgate/zarrgate/internal/bulk"
	"github.com/zarrgate/zarrgate/internal/testcerts"
	"github.com/zarrgate/zarrgate/internal/wire"
)

func listen(t *testing.T, cfg bulk.Config) *bulk.Listener {
	t.Helper()
	l, err := bulk.Listen("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// dialRaw connects without the protocol and sends b.
func dialRaw(t *testing.T, l *bulk.Listener, b []byte) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if len(b) > 0 {
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// closedByServer waits for the server to close c (reading sees EOF or a
// reset, never data).
func closedByServer(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	n, err := c.Read(make([]byte, 1))
	if n > 0 || err == nil {
		t.Fatalf("read %d bytes (%v) from a connection the server should have closed", n, err)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the server did not close the connection")
	}
}

// closeAndCount closes l (which waits for the connections in their hello)
// and returns its counts; nothing may be left open.
func closeAndCount(t *testing.T, l *bulk.Listener) map[string]uint64 {
	t.Helper()
	l.Close()
	if n := l.Open(); n != 0 {
		t.Errorf("%d connections left open", n)
	}
	return l.Counts()
}

func wantCounts(t *testing.T, got map[string]uint64, want map[string]uint64) {
	t.Helper()
	for _, r := range bulk.Results {
		if got[r] != want[r] {
			t.Errorf("%s: %d connections, want %d (all: %v)", r, got[r], want[r], got)
		}
	}
}

func TestTicketGetsItsConnection(t *testing.T) {
	l := listen(t, bulk.Config{})
	tk, err := l.Offer()
	if err != nil {
		t.Fatal(err)
	}
	if tk.Port() == 0 || len(tk.ID()) != bulk.TicketSize {
		t.Fatalf("port %d, ticket %x", tk.Port(), tk.ID())
	}
	cc, err := bulk.Dial(context.Background(), l.Addr().String(), nil, tk.ID())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	sc, err := tk.Wait(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sc.Write([]byte("x"))
	sc.Close()
	got, _ := io.ReadAll(cc)
	if string(got) != "x" {
		t.Fatalf("client read %q", got)
	}
	wantCounts(t, closeAndCount(t, l), map[string]uint64{bulk.ResultAccepted: 1})
}

func TestRefusedHellos(t *testing.T) {
	l := listen(t, bulk.Config{})
	tk, err := l.Offer()
	if err != nil {
		t.Fatal(err)
	}
	// Wrong magic, with the right ticket: refused, the ticket unspent.
	closedByServer(t, dialRaw(t, l, append([]byte("ZGBULK2\n"), tk.ID()...)))
	// A ticket never issued.
	closedByServer(t, dialRaw(t, l, bulk.Hello(make([]byte, bulk.TicketSize))))
	// A hello cut short.
	c := dialRaw(t, l, []byte(bulk.Magic))
	c.(*net.TCPConn).CloseWrite()
	closedByServer(t, c)
	// The ticket is good still, once.
	cc, err := bulk.Dial(context.Background(), l.Addr().String(), nil, tk.ID())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	sc, err := tk.Wait(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	// Reused: refused.
	closedByServer(t, dialRaw(t, l, bulk.Hello(tk.ID())))
	sc.Close()
	wantCounts(t, closeAndCount(t, l), map[string]uint64{bulk.ResultAccepted: 1, bulk.ResultBadHello: 2, bulk.ResultUnknownTicket: 2})
}

func TestExpiredTicket(t *testing.T) {
	l := listen(t, bulk.Config{TicketTTL: 50 * time.Millisecond})
	tk, err := l.Offer()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tk.Wait(context.Background()); !errors.Is(err, bulk.ErrNoConnection) {
		t.Fatalf("Wait without a connection: %v", err)
	}
	closedByServer(t, dialRaw(t, l, bulk.Hello(tk.ID())))
	if n := l.Waiting(); n != 0 {
		t.Errorf("%d tickets wait", n)
	}
	wantCounts(t, closeAndCount(t, l), map[string]uint64{bulk.ResultUnknownTicket: 1})
}

func TestWaitEndsWithItsContext(t *testing.T) {
	l := listen(t, bulk.Config{})
	tk, err := l.Offer()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tk.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait: %v", err)
	}
	closedByServer(t, dialRaw(t, l, bulk.Hello(tk.ID())))
	wantCounts(t, closeAndCount(t, l), map[string]uint64{bulk.ResultUnknownTicket: 1})
}

func TestHelloNeverSent(t *testing.T) {
	before := runtime.NumGoroutine()
	l := listen(t, bulk.Config{HelloTimeout: 100 * time.Millisecond})
	closedByServer(t, dialRaw(t, l, nil))
	closedByServer(t, dialRaw(t, l, []byte("ZGB")))
	wantCounts(t, closeAndCount(t, l), map[string]uint64{bulk.ResultTimeout: 2})
	// The accept loop and the connections' goroutines are gone.
	for i := 0; runtime.NumGoroutine() > before && i < 100; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines, %d before", n, before)
	}
}

func TestCloseEndsHellos(t *testing.T) {
	l := listen(t, bulk.Config{HelloTimeout: time.Hour})
	c := dialRaw(t, l, []byte("ZG"))
	tk, err := l.Offer()
	if err != nil {
		t.Fatal(err)
	}
	// The connection is accepted (in its hello) once a second one is:
	// accept takes them in order.
	for l.Open() < 1 {
		time.Sleep(time.Millisecond)
	}
	l.Close()
	closedByServer(t, c)
	if _, err := tk.Wait(context.Background()); !errors.Is(err, bulk.ErrClosed) {
		t.Fatalf("Wait after Close: %v", err)
	}
	if _, err := l.Offer(); !errors.Is(err, bulk.ErrClosed) {
		t.Fatalf("Offer after Close: %v", err)
	}
	wantCounts(t, closeAndCount(t, l), map[string]uint64{bulk.ResultBadHello: 1})
}

func TestLimits(t *testing.T) {
	l := listen(t, bulk.Config{MaxConns: 2, MaxTickets: 2, HelloTimeout: time.Hour})
	a, b := dialRaw(t, l, nil), dialRaw(t, l, nil)
	for l.Open() < 2 {
		time.Sleep(time.Millisecond)
	}
	closedByServer(t, dialRaw(t, l, nil))
	a.Close()
	b.Close()
	for range 2 {
		if _, err := l.Offer(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Offer(); !errors.Is(err, bulk.ErrTooManyTickets) {
		t.Fatalf("a third ticket: %v", err)
	}
	wantCounts(t, closeAndCount(t, l), map[string]uint64{bulk.ResultOverLimit: 1, bulk.ResultBadHello: 2})
}

func TestTLS(t *testing.T) {
	ca := testcerts.NewCA(t, "bulk CA")
	srv := ca.Issue(t, testcerts.Server("127.0.0.1")).TLS(t)
	cli := ca.Issue(t, testcerts.Client("alice")).TLS(t)
	for _, mtls := range []bool{false, true} {
		cfg := &tls.Config{Certificates: []tls.Certificate{srv}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}}
		if mtls {
			cfg.ClientAuth, cfg.ClientCAs = tls.RequireAndVerifyClientCert, ca.Pool()
		}
		l := listen(t, bulk.Config{TLS: cfg})
		tk, err := l.Offer()
		if err != nil {
			t.Fatal(err)
		}
		// Plaintext: the handshake fails, the ticket stays unspent.
		closedByServer(t, dialRaw(t, l, bulk.Hello(tk.ID())))
		want := map[string]uint64{bulk.ResultTLSFailed: 1, bulk.ResultAccepted: 1}
		ccfg := &tls.Config{RootCAs: ca.Pool(), NextProtos: []string{"h2"}}
		if mtls {
			// Without a client certificate: refused.
			c, err := bulk.Dial(context.Background(), l.Addr().String(), ccfg, tk.ID())
			if err == nil {
				// TLS 1.3: the server's refusal arrives after the client's
				// handshake is done.
				_, err = c.Read(make([]byte, 1))
				c.Close()
			}
			if err == nil {
				t.Fatal("a client without a certificate got through")
			}
			want[bulk.ResultTLSFailed]++
			ccfg.Certificates = []tls.Certificate{cli}
		}
		cc, err := bulk.Dial(context.Background(), l.Addr().String(), ccfg, tk.ID())
		if err != nil {
			t.Fatal(err)
		}
		sc, err := tk.Wait(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		w := bulk.NewWriter(sc)
		msg := block(100 << 10)
		if err := w.Write(msg, nil); err != nil {
			t.Fatal(err)
		}
		w.End()
		sc.Close()
		r := bulk.NewReader(cc, 0)
		f, err := r.Next(false)
		if err != nil {
			t.Fatal(err)
		}
		got := new(gatewayv1.ReadSlabResponse)
		if err := wire.Decode(f, got); err != nil || !proto.Equal(got, msg) {
			t.Fatalf("mtls %v: frame decodes to another message (%v)", mtls, err)
		}
		if _, err := r.Next(false); err != io.EOF {
			t.Fatalf("after the last frame: %v", err)
		}
		cc.Close()
		wantCounts(t, closeAndCount(t, l), want)
	}
}

func block(n int) *gatewayv1.ReadSlabResponse {
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(i * 7)
	}
	return &gatewayv1.ReadSlabResponse{Message: &gatewayv1.ReadSlabResponse_Block{Block: &gatewayv1.Block{
		Origin: []uint64{1, 2}, Shape: []uint64{3, uint64(n)}, Data: data, Offsets: []uint64{0, 5}}}}
}

func TestFrames(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	msgs := []*gatewayv1.ReadSlabResponse{block(0), block(10), block(wire.Large), block(1 << 20), block(5), block(300 << 10)}
	var done atomic.Int64
	go func() {
		c, err := lis.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		w := bulk.NewWriter(c)
		for _, m := range msgs {
			if err := w.Write(m, func() { done.Add(1) }); err != nil {
				return
			}
		}
		w.End()
	}()
	c, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bulk.NewReader(c, 2<<20)
	for i, want := range msgs {
		f, err := r.Next(i%2 == 0)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		got := new(gatewayv1.ReadSlabResponse)
		if err := wire.Decode(f, got); err != nil {
			t.Fatal(err)
		}
		// Byte for byte what the stock protobuf encoding decodes to.
		if !proto.Equal(got, want) {
			t.Fatalf("frame %d decodes to another message", i)
		}
	}
	if _, err := r.Next(false); err != io.EOF {
		t.Fatalf("after the last frame: %v", err)
	}
	if done.Load() != int64(len(msgs)) {
		t.Fatalf("done called %d times for %d frames", done.Load(), len(msgs))
	}
}

func TestReaderBounds(t *testing.T) {
	// A length over the reader's max is refused before anything is
	// allocated; a connection ending inside a frame is not its end.
	hdr := []byte{0, 0, 0, 1, 0, 0, 0, 0} // 16 MiB
	if _, err := bulk.NewReader(bytes.NewReader(hdr), 1<<20).Next(false); err == nil || err == io.EOF {
		t.Fatalf("a 16 MiB frame with a 1 MiB max: %v", err)
	}
	if _, err := bulk.NewReader(bytes.NewReader(append([]byte{4, 0, 0, 0, 0, 0, 0, 0}, 1, 2)), 0).Next(false); err != io.ErrUnexpectedEOF {
		t.Fatalf("a truncated frame: %v", err)
	}
	if _, err := bulk.NewReader(bytes.NewReader(nil), 0).Next(false); err != io.ErrUnexpectedEOF {
		t.Fatalf("no end frame: %v", err)
	}
}
