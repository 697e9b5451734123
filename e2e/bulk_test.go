package e2e

import (
	"context"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/client"
)

var bulkRE = regexp.MustCompile(`bulk_listen=(\S+)`)

func bulkCount(result string) string {
	return `zarrgate_bulk_connections_total{result="` + result + `"}`
}

// bulkAddr is the bulk listener's address a server logged ("" for none).
func bulkAddr(p *adminProc) string {
	if m := bulkRE.FindStringSubmatch(p.logs.String()); m != nil {
		return m[1]
	}
	return ""
}

// readBothWays writes a 1000×1100 float32 array of random values through
// c and reads it, whole, strided and as blocks, through c and through a
// client with bulk off, which must agree byte for byte.
func readBothWays(t *testing.T, addr string, opts ...client.Option) {
	t.Helper()
	ctx := context.Background()
	c, err := client.Dial(ctx, addr, append(opts, client.WithSharedMemory(false))...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	plain, err := client.Dial(ctx, addr, append(opts, client.WithSharedMemory(false), client.WithBulk(false))...)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	a, err := c.CreateArray(ctx, "bulk", client.ArraySpec{Shape: []int64{1000, 1100}, DataType: "float32", ChunkShape: []int64{256, 256}, FillValue: "-1"})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	vals := make([]float32, 700*1100) // rows from 700 on stay the fill value
	for i := range vals {
		vals[i] = r.Float32()
	}
	if _, err := client.Write(ctx, a, client.MustParseSelection("0:700,0:1100"), vals); err != nil {
		t.Fatal(err)
	}
	pa, err := plain.OpenArray(ctx, "bulk")
	if err != nil {
		t.Fatal(err)
	}
	for _, sel := range []client.Selection{nil, client.MustParseSelection("3:999:2,5:1100")} {
		got, gshape, err := client.Read[float32](ctx, a, sel)
		if err != nil {
			t.Fatal(err)
		}
		want, wshape, err := client.Read[float32](ctx, pa, sel)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(gshape, wshape) || !slices.Equal(got, want) {
			t.Fatalf("%v: bulk read differs from the stream's", sel)
		}
	}
	_, blocks, err := a.Blocks(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := int64(0)
	for b, err := range blocks {
		if err != nil {
			t.Fatal(err)
		}
		n += int64(len(b.Data))
	}
	if n != 1000*1100*4 {
		t.Fatalf("blocks of %d bytes", n)
	}
}

// TestServeBulk: `zarrgate serve` on loopback runs a bulk listener by
// default; the Go client reads through it, the same values as through the
// stream; connections with a wrong hello or an unknown ticket are refused
// and counted. --bulk-listen off (or ZARRGATE_BULK_LISTEN=off) has none.
func TestServeBulk(t *testing.T) {
	p := startWithAdmin(t, "serve", true, "--root", t.TempDir())
	baddr := bulkAddr(p)
	if !strings.HasPrefix(baddr, "127.0.0.1:") {
		t.Fatalf("serve on loopback: bulk listener %q", baddr)
	}
	before := p.scrape(t)
	readBothWays(t, p.addr)
	after := p.scrape(t)
	if n := delta(before, after, bulkCount("accepted")); n != 3 {
		t.Errorf("%v bulk connections accepted for 3 bulk reads", n)
	}
	for _, hello := range []string{"GET / HTTP/1.1\r\n\r\n..........", "ZGBULK1\n0123456789abcdef"} {
		c, err := net.Dial("tcp", baddr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte(hello))
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if n, err := c.Read(make([]byte, 1)); n != 0 || !closed(err) {
			t.Errorf("hello %q: read %d bytes, %v; want the connection closed", hello, n, err)
		}
		c.Close()
	}
	after2 := p.scrape(t)
	if delta(after, after2, bulkCount("bad_hello")) != 1 || delta(after, after2, bulkCount("unknown_ticket")) != 1 {
		t.Errorf("refused hellos not counted: %v", after2)
	}

	for _, off := range [][]string{{"--bulk-listen", "off"}, {"--bulk-listen", "off", "--listen", "127.0.0.1:0"}} {
		q := startWithAdmin(t, "serve", true, append([]string{"--root", t.TempDir()}, off...)...)
		if a := bulkAddr(q); a != "" {
			t.Errorf("%v: a bulk listener at %s", off, a)
		}
	}
	t.Setenv("ZARRGATE_BULK_LISTEN", "off")
	if q := startWithAdmin(t, "serve", true, "--root", t.TempDir()); bulkAddr(q) != "" {
		t.Error("ZARRGATE_BULK_LISTEN=off: a bulk listener")
	}
}

// closed reports whether a read's error says the peer closed the
// connection: its end, or a reset (the peer closed with bytes unread).
func closed(err error) bool {
	return err == io.EOF || err != nil && strings.Contains(err.Error(), "connection reset")
}

// TestServeBulkUnreachable: offers naming a host the client cannot reach
// (--bulk-advertise) cost the client a failed connection, then it reads
// through the stream.
func TestServeBulkUnreachable(t *testing.T) {
	p := startWithAdmin(t, "serve", true, "--root", t.TempDir(), "--bulk-advertise", "192.0.2.1") // TEST-NET-1
	before := p.scrape(t)
	readBothWays(t, p.addr)
	if n := delta(before, p.scrape(t), bulkCount("accepted")); n != 0 {
		t.Errorf("%v bulk connections accepted", n)
	}
}

// TestServeBulkMTLS: with --tls-cert, --tls-key and --client-ca the bulk
// listener serves mTLS too: the Go client reads through it with its
// certificate; a plaintext hello is refused and counted.
func TestServeBulkMTLS(t *testing.T) {
	f := newTLSFiles(t)
	p := startWithAdmin(t, "serve", true, "--root", t.TempDir(), "--tls-cert", f.cert, "--tls-key", f.key, "--client-ca", f.ca)
	baddr := bulkAddr(p)
	if baddr == "" || !strings.Contains(p.logs.String(), `msg="bulk listener" bulk_listen=`+baddr+" tls=true mtls=true") {
		t.Fatalf("bulk listener %q, log:\n%s", baddr, p.logs.String())
	}
	cfg, err := client.LoadTLS(f.ca, f.clientCert, f.clientKey)
	if err != nil {
		t.Fatal(err)
	}
	p.hc = &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
	before := p.scrape(t)
	readBothWays(t, p.addr, client.WithTLS(cfg))
	after := p.scrape(t)
	if n := delta(before, after, bulkCount("accepted")); n != 3 {
		t.Errorf("%v bulk connections accepted over mTLS for 3 bulk reads", n)
	}
	c, err := net.Dial("tcp", baddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("ZGBULK1\n0123456789abcdef"))
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	io.Copy(io.Discard, c) // a TLS alert at most, then the end
	if n := delta(after, p.scrape(t), bulkCount("tls_failed")); n != 1 {
		t.Errorf("a plaintext hello to the TLS bulk listener: %v tls_failed", n)
	}
}

// TestServeBulkFlood attacks the bulk listener of the real `zarrgate
// serve` as an untrusted client on the network would: more connections
// than the listener takes (256) that never finish their hello, one that
// sends 16 MiB of garbage, and a stream of guessed tickets. Meanwhile
// reads still succeed (through the stream while the listener is full),
// the server's memory does not grow with the garbage, every held
// connection is closed by the server after its hello deadline (5 s), and
// then reads go through bulk again. Every refusal is counted by its
// reason.
func TestServeBulkFlood(t *testing.T) {
	p := startWithAdmin(t, "serve", true, "--root", t.TempDir())
	baddr := bulkAddr(p)
	if baddr == "" {
		t.Fatal("no bulk listener")
	}
	pid := p.cmd.Process.Pid
	rss0, err := statusBytes(pid, "VmRSS")
	if err != nil {
		t.Fatal(err)
	}
	before := p.scrape(t)

	// Guessed tickets, each refused.
	for i := range 20 {
		c, err := net.Dial("tcp", baddr)
		if err != nil {
			t.Fatal(err)
		}
		hello := []byte("ZGBULK1\n0123456789abcdef")
		hello[len(hello)-1] = byte(i)
		c.Write(hello)
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		c.Read(make([]byte, 1))
		c.Close()
	}
	// 16 MiB of garbage on one connection: read no further than the
	// hello, then closed.
	g, err := net.Dial("tcp", baddr)
	if err != nil {
		t.Fatal(err)
	}
	junk := make([]byte, 1<<20)
	for i := range junk {
		junk[i] = byte(i * 7)
	}
	sent := 0
	g.SetWriteDeadline(time.Now().Add(30 * time.Second))
	for range 16 {
		n, err := g.Write(junk)
		sent += n
		if err != nil {
			break
		}
	}
	g.Close()
	if sent == len(junk)*16 {
		t.Errorf("the server took all %d bytes of garbage after the hello", sent)
	}

	// 300 connections that send part of a hello and stop: the first 256
	// are held until their deadline, the rest are refused at once.
	const held = 300
	conns := make([]net.Conn, 0, held)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range held {
		c, err := net.Dial("tcp", baddr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("ZGB"))
		conns = append(conns, c)
	}
	// Reads still work while the listener is full: through the stream.
	readBothWays(t, p.addr)
	if rss, err := statusBytes(pid, "VmRSS"); err != nil || rss-rss0 > 64*MiB {
		t.Errorf("server RSS grew by %d MiB under the flood (%v)", (rss-rss0)/MiB, err)
	}

	// The held connections are closed by the server once their hello
	// deadline passes.
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if n, err := c.Read(make([]byte, 1)); n != 0 || !closed(err) {
			t.Fatalf("held connection %d: read %d bytes, %v; want it closed by the server", i, n, err)
		}
	}
	mid := p.scrape(t)
	if n := delta(before, mid, bulkCount("timeout")); n < held-60 {
		t.Errorf("%v connections timed out in their hello, want most of the %d held", n, held)
	}
	if n := delta(before, mid, bulkCount("over_limit")); n < held-256 {
		t.Errorf("%v connections over the limit refused, want at least %d of %d", n, held-256, held)
	}
	if n := delta(before, mid, bulkCount("unknown_ticket")); n < 20 {
		t.Errorf("%v guessed tickets refused, want 20", n)
	}
	if n := delta(before, mid, bulkCount("bad_hello")); n < 1 {
		t.Errorf("the garbage connection: %v bad hellos", n)
	}

	// With the flood gone, a fresh client reads through bulk again (one
	// that saw the full listener would skip bulk for a minute).
	readBulk := func() {
		ctx := context.Background()
		c, err := client.Dial(ctx, p.addr, client.WithSharedMemory(false))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		a, err := c.OpenArray(ctx, "bulk")
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := client.Read[float32](ctx, a, nil); err != nil {
			t.Fatal(err)
		}
	}
	readBulk()
	if n := delta(mid, p.scrape(t), bulkCount("accepted")); n != 1 {
		t.Errorf("after the flood: %v bulk connections accepted for one read, want 1", n)
	}
	if err := p.cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the server died: %v", err)
	}
}
