package tlsbatch_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/zarrgate/zarrgate/internal/testcerts"
	"github.com/zarrgate/zarrgate/internal/tlsbatch"
)

// socket is the server's end of a TCP connection, counting the writes
// that reach it; failNext makes the next write fail (once).
type socket struct {
	net.Conn
	writes   atomic.Int64
	failNext atomic.Bool
}

var errInjected = errors.New("injected write failure")

func (s *socket) Write(p []byte) (int, error) {
	s.writes.Add(1)
	if s.failNext.Swap(false) {
		return 0, errInjected
	}
	return s.Conn.Write(p)
}

// tlsPair connects a client and a server through NewTLSCredentials over
// loopback TCP; the server's socket counts its writes.
func tlsPair(t *testing.T) (client, server net.Conn, sock *socket) {
	t.Helper()
	ca := testcerts.NewCA(t, "batch CA")
	cert := ca.Issue(t, testcerts.Server("127.0.0.1")).TLS(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	type result struct {
		c   net.Conn
		err error
	}
	done := make(chan result, 1)
	sock = &socket{}
	go func() {
		raw, err := lis.Accept()
		if err != nil {
			done <- result{nil, err}
			return
		}
		sock.Conn = raw
		c, _, err := tlsbatch.Credentials(&tls.Config{Certificates: []tls.Certificate{cert}}).ServerHandshake(sock)
		done <- result{c, err}
	}()
	raw, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	client, _, err = tlsbatch.Credentials(&tls.Config{RootCAs: ca.Pool()}).ClientHandshake(context.Background(), "127.0.0.1", raw)
	if err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { client.Close(); r.c.Close() })
	return client, r.c, sock
}

// TestTLSLargeWriteOneSyscall: a write of gRPC's size (256 KiB, sixteen
// TLS records) reaches the socket in one system call, not one per record;
// larger writes in a few; small writes as before; and the bytes arrive
// intact and in order, including a small write made while a large one is
// being gathered.
func TestTLSLargeWriteOneSyscall(t *testing.T) {
	client, server, sock := tlsPair(t)
	payload := func(n int, seed byte) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = seed + byte(i*7)
		}
		return b
	}
	for _, tc := range []struct {
		n, maxWrites int
	}{{256 << 10, 1}, {1 << 20, 5}, {100, 1}, {16 << 10, 1}} {
		p := payload(tc.n, byte(tc.n))
		got := make([]byte, tc.n)
		read := make(chan error, 1)
		go func() { _, err := io.ReadFull(client, got); read <- err }()
		before := sock.writes.Load()
		if n, err := server.Write(p); err != nil || n != tc.n {
			t.Fatalf("write of %d bytes: %d, %v", tc.n, n, err)
		}
		if w := sock.writes.Load() - before; w > int64(tc.maxWrites) {
			t.Errorf("a write of %d bytes took %d writes on the socket, want at most %d", tc.n, w, tc.maxWrites)
		}
		if err := <-read; err != nil || !bytes.Equal(got, p) {
			t.Fatalf("read of %d bytes: %v (equal %v)", tc.n, err, bytes.Equal(got, p))
		}
	}

	// Writes from two goroutines (as gRPC's writer and the TLS layer's
	// own records may be): each arrives whole, in either order.
	big, small := payload(512<<10, 1), payload(300, 2)
	got := make([]byte, len(big)+len(small))
	read := make(chan error, 1)
	go func() { _, err := io.ReadFull(client, got); read <- err }()
	var wg sync.WaitGroup
	for _, p := range [][]byte{big, small} {
		wg.Go(func() {
			if _, err := server.Write(p); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if err := <-read; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, append(append([]byte{}, big...), small...)) && !bytes.Equal(got, append(append([]byte{}, small...), big...)) {
		t.Fatal("concurrent writes arrived mixed")
	}
}

// TestTLSBatchedSendFailureSticks: when sending gathered records fails,
// the write fails, and so does every later one, even if the socket would
// take it: TLS believes those records were sent, so the peer could only
// get a broken stream (crypto/tls makes its own write errors permanent
// for the same reason).
func TestTLSBatchedSendFailureSticks(t *testing.T) {
	_, server, sock := tlsPair(t)
	sock.failNext.Store(true)
	if _, err := server.Write(make([]byte, 256<<10)); !errors.Is(err, errInjected) {
		t.Fatalf("large write: %v, want the socket's error", err)
	}
	for _, n := range []int{10, 256 << 10} {
		if _, err := server.Write(make([]byte, n)); !errors.Is(err, errInjected) {
			t.Errorf("write of %d bytes after a failed send: %v, want the socket's error", n, err)
		}
	}
}
