package rpc_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/zarrgate/zarrgate/internal/rpc"
)

// dnsServer is a DNS server on 127.0.0.1 (UDP) that answers A queries for
// any name with the addresses it is given, and every other query with no
// records: the name of a worker tier (a Kubernetes headless Service) whose
// pods come and go. It counts the A queries it answers.
type dnsServer struct {
	conn    net.PacketConn
	mu      sync.Mutex
	addrs   []netip.Addr
	queries atomic.Int64
}

func startDNS(t *testing.T, addrs ...netip.Addr) *dnsServer {
	t.Helper()
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &dnsServer{conn: conn, addrs: addrs}
	t.Cleanup(func() { conn.Close() })
	go s.serve()
	return s
}

func (s *dnsServer) set(addrs ...netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addrs = addrs
}

func (s *dnsServer) serve() {
	buf := make([]byte, 1500)
	for {
		n, from, err := s.conn.ReadFrom(buf)
		if err != nil {
			return
		}
		var p dnsmessage.Parser
		h, err := p.Start(buf[:n])
		if err != nil {
			continue
		}
		q, err := p.Question()
		if err != nil {
			continue
		}
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired})
		b.EnableCompression()
		b.StartQuestions()
		b.Question(q)
		b.StartAnswers()
		if q.Type == dnsmessage.TypeA {
			s.queries.Add(1)
			s.mu.Lock()
			for _, a := range s.addrs {
				b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 1}, dnsmessage.AResource{A: a.As4()})
			}
			s.mu.Unlock()
		}
		msg, err := b.Finish()
		if err != nil {
			continue
		}
		s.conn.WriteTo(msg, from)
	}
}

// startWorkerAt serves the test service on addr (an address other than
// 127.0.0.1's: a name resolves to addresses, not ports, so workers behind
// one name share a port on different loopback addresses).
func startWorkerAt(t *testing.T, addr string) (*poolWorker, error) {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	w := &poolWorker{addr: lis.Addr().String()}
	w.srv = rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	w.srv.RegisterService(testService(func(context.Context) error { w.calls.Add(1); return nil }), struct{}{})
	go w.srv.Serve(lis)
	t.Cleanup(w.srv.Stop)
	return w, nil
}

// TestPoolReresolvesDNS: a pool dialled on a DNS name (gRPC's dns resolver,
// asking a real DNS server) resolves it again every refresh while its
// workers stay healthy, so that a worker added behind the name (a new pod)
// gets calls, and one removed from it gets none, while calls made all
// along never fail. Without the refresh gRPC resolves again only when a
// connection fails, and the new worker would never be found.
func TestPoolReresolvesDNS(t *testing.T) {
	ipA, ipB := netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.3")
	// Two workers on one port, at two loopback addresses.
	var a, b *poolWorker
	for range 20 {
		var err error
		if a, err = startWorkerAt(t, ipA.String()+":0"); err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(a.addr)
		if b, err = startWorkerAt(t, net.JoinHostPort(ipB.String(), port)); err == nil {
			break
		}
		a.srv.Stop()
		a, b = nil, nil
	}
	if b == nil {
		t.Fatal("no port free on both 127.0.0.2 and 127.0.0.3")
	}
	_, port, _ := net.SplitHostPort(a.addr)
	dns := startDNS(t, ipA)
	target := fmt.Sprintf("dns://%s/workers.zarrgate.test:%s", dns.conn.LocalAddr(), port)
	cc, pool, err := rpc.DialPool(target, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cc.Connect()
	waitReady(t, pool, a.addr)

	// Calls all along, each with a deadline: none may fail.
	ctx, stop := context.WithCancel(context.Background())
	var calls, failed atomic.Int64
	var firstErr atomic.Value
	done := make(chan struct{})
	defer func() { stop(); <-done }()
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := callUnary(cctx, cc)
			cancel()
			if err != nil && ctx.Err() == nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err)
			}
			calls.Add(1)
			time.Sleep(2 * time.Millisecond)
		}
	}()

	// A new pod behind the name: found, and given calls.
	dns.set(ipA, ipB)
	waitReady(t, pool, a.addr, b.addr)
	waitCalls(t, b, 10)
	// The first pod leaves the name (A stays up, as a pod being replaced
	// may): no more calls for it.
	dns.set(ipB)
	waitReady(t, pool, b.addr)
	aCalls := a.calls.Load()
	waitCalls(t, b, 10)
	stop()
	<-done
	if a.calls.Load() != aCalls {
		t.Errorf("worker A got %d calls after it left the name", a.calls.Load()-aCalls)
	}
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d calls failed while the name changed: %v", n, calls.Load(), firstErr.Load())
	}
	t.Logf("%d calls, A %d, B %d; %s resolved %d times", calls.Load(), a.calls.Load(), b.calls.Load(), target, dns.queries.Load())
	if q := dns.queries.Load(); q < 2 {
		t.Fatalf("the name was resolved %d times", q)
	}
}

// waitCalls waits until w has answered n more calls than it had.
func waitCalls(t *testing.T, w *poolWorker, n int64) {
	t.Helper()
	before := w.calls.Load()
	for range 500 {
		if w.calls.Load() >= before+n {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("worker %s answered %d calls, want %d more", w.addr, w.calls.Load()-before, n)
}
