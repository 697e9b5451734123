// Package tlsbatch provides gRPC's TLS transport credentials with one
// change: the TLS records of a large write leave in one system call.
package tlsbatch

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"syscall"

	"google.golang.org/grpc/credentials"
)

// Why TLS writes are batched
//
// gRPC hands the connection its frames in writes of up to its write
// buffer (256 KiB). crypto/tls cuts a write into records of at most 16 KiB
// and writes each record to the socket by itself: sixteen write system
// calls where plaintext makes one. On the slab benchmark (a 64 MiB read
// over loopback, docs/benchmarks.md) gathering them cut the kernel time
// of a TLS read by a fifth (56 to 44 ms) and its CPU by 7 %. So the
// connection under TLS gathers the records of one large write and sends
// them together.
//
// Only writes of more than one record are gathered (small writes, such as
// headers, window updates and pings, go straight out as before), and the
// buffer is taken from a pool for the duration of one write: a connection
// that is not writing a large message holds none. The cost is at most
// batchBytes per connection that is writing at that moment, next to the
// 256 KiB write buffer gRPC keeps per connection anyway. Reads are not
// buffered below TLS: that was measured too, saved nothing, and a read
// buffer would be held by every idle connection.

const (
	// maxPlaintext is the largest payload of one TLS record.
	maxPlaintext = 16 << 10
	// batchBytes is the size of the gathering buffer: gRPC's largest write
	// (readWriteBufBytes) cut into records, with room for each record's
	// header and tag (22 bytes in TLS 1.3, at most 2 KiB in all: 16
	// records of up to 16 KiB + 5 bytes of header + 108 of padding, MAC
	// and tag in TLS 1.2), so that it leaves in one system call.
	batchBytes = grpcWriteBuffer + 4<<10
	// grpcWriteBuffer is the gRPC write buffer of internal/rpc and of the
	// Go client (grpc.WriteBufferSize): the largest write gRPC makes.
	grpcWriteBuffer = 256 << 10
)

var batchBufs = sync.Pool{New: func() any { b := make([]byte, 0, batchBytes); return &b }}

// Credentials is credentials.NewTLS(cfg) whose connections send the TLS
// records of a large write in one system call instead of one each.
// rpc.ServerTLS, rpc.WithTLS, rpc.Tier and the Go client use it.
func Credentials(cfg *tls.Config) credentials.TransportCredentials {
	return batchingCreds{credentials.NewTLS(cfg)}
}

type batchingCreds struct {
	credentials.TransportCredentials
}

func (c batchingCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	g := &gatherConn{Conn: raw}
	conn, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, g)
	if err != nil {
		return conn, info, err
	}
	return &batchedConn{Conn: conn, raw: g}, info, nil
}

func (c batchingCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	g := &gatherConn{Conn: raw}
	conn, info, err := c.TransportCredentials.ServerHandshake(g)
	if err != nil {
		return conn, info, err
	}
	return &batchedConn{Conn: conn, raw: g}, info, nil
}

func (c batchingCreds) Clone() credentials.TransportCredentials {
	return batchingCreds{c.TransportCredentials.Clone()}
}

// gatherConn is the socket under the TLS connection. While gathering (in
// a batchedConn's large write) it keeps what TLS writes, and sends it
// when its buffer is full or the write ends; otherwise (the handshake,
// alerts, small writes) it writes through.
type gatherConn struct {
	net.Conn
	mu  sync.Mutex
	buf *[]byte // non-nil while gathering
	err error   // the first failed send: the stream is broken from there on
}

func (g *gatherConn) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil {
		return 0, g.err
	}
	if g.buf == nil {
		return g.Conn.Write(p)
	}
	if len(*g.buf)+len(p) > cap(*g.buf) {
		if err := g.sendLocked(); err != nil {
			return 0, err
		}
		if len(p) > cap(*g.buf) {
			return g.Conn.Write(p)
		}
	}
	*g.buf = append(*g.buf, p...)
	return len(p), nil
}

// sendLocked sends what was gathered. A failure is kept: TLS believes the
// records it gave were sent, so after a partial send the peer would see a
// broken stream; every later write fails as TLS's own writes would.
func (g *gatherConn) sendLocked() error {
	if len(*g.buf) == 0 {
		return nil
	}
	_, err := g.Conn.Write(*g.buf)
	*g.buf = (*g.buf)[:0]
	if err != nil {
		g.err = err
	}
	return err
}

func (g *gatherConn) gather() {
	g.mu.Lock()
	g.buf = batchBufs.Get().(*[]byte)
	g.mu.Unlock()
}

// flush sends what was gathered, returns the buffer to the pool and goes
// back to writing through.
func (g *gatherConn) flush() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	err := g.sendLocked()
	if err == nil {
		err = g.err
	}
	batchBufs.Put(g.buf)
	g.buf = nil
	return err
}

// SyscallConn keeps the socket reachable through the TLS connection, as
// credentials.NewTLS does for a plain *net.TCPConn (channelz reads socket
// options through it).
func (g *gatherConn) SyscallConn() (syscall.RawConn, error) {
	if s, ok := g.Conn.(syscall.Conn); ok {
		return s.SyscallConn()
	}
	return nil, errNoSyscallConn
}

var errNoSyscallConn = &net.OpError{Op: "syscallconn", Err: syscall.ENOTSUP}

// batchedConn is the TLS connection gRPC writes to: a write of more than
// one record is gathered below TLS and sent at its end.
type batchedConn struct {
	net.Conn // the TLS connection
	raw      *gatherConn
	mu       sync.Mutex // one write at a time gathers
}

func (c *batchedConn) Write(p []byte) (int, error) {
	if len(p) <= maxPlaintext {
		return c.Conn.Write(p)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.raw.gather()
	n, err := c.Conn.Write(p)
	if ferr := c.raw.flush(); err == nil && ferr != nil {
		return 0, ferr
	}
	return n, err
}
