// Package bulk is ReadSlab's bulk data path: a plain TCP listener (TLS
// with the gRPC listener's configuration when that uses TLS) over which a
// read's blocks travel as length-prefixed frames instead of through the
// gRPC stream, whose HTTP/2 framing in 16 KiB frames, copies and flow
// control cost more CPU per byte than the data's own handling (issue 20).
//
// The protocol (gateway.proto, message BulkOffer): a ReadSlab call asking
// for bulk gets an offer in its header, naming the listener's host and
// port and a ticket of 16 random bytes. The client connects, sends the 8
// bytes [Magic] and the ticket (the hello), then reads frames: an 8-byte
// little-endian length, then that many bytes of a ReadSlabResponse
// holding one block; a length of 0 ends the blocks. The gateway writes
// a block's data field last (internal/wire's encoder puts large values
// after the small fields, and a block of fixed-size elements has nothing
// after its data), so that a client can parse the frame up to the data
// and read the data straight into place ([Reader.ReadInto]); clients
// must still take any valid encoding. The gRPC stream ends
// with the call's status once every frame was written. A ticket is good
// for one connection, for [TicketTTL]; it is a bearer capability issued to
// a call that was authenticated and authorized like any other.
//
// The server side is a [Listener] (accept loop, hellos, tickets, bounds)
// and a [Writer] (frames, block data written by reference); the client
// side is [Dial] and a [Reader] (whole frames, or a frame in parts: the
// data of a block read with readv into many destinations).
package bulk

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Magic opens a bulk connection, before the ticket.
const Magic = "ZGBULK1\n"

// TicketSize is the length of a ticket.
const TicketSize = 16

// Defaults of a Listener's Config.
const (
	// TicketTTL is how long a ticket waits for its connection.
	TicketTTL = 10 * time.Second
	// HelloTimeout bounds the TLS handshake and the hello of a connection.
	HelloTimeout = 5 * time.Second
	// MaxConns is the most bulk connections open at once (in their hello
	// or carrying a read).
	MaxConns = 256
	// MaxTickets is the most tickets waiting for their connection at once.
	MaxTickets = 1024
)

// Results of accepted connections, the label of
// zarrgate_bulk_connections_total.
const (
	ResultAccepted      = "accepted"       // a good hello, handed to its read
	ResultBadHello      = "bad_hello"      // not the magic, or closed before the hello's end
	ResultUnknownTicket = "unknown_ticket" // no such ticket: never issued, used already, or expired
	ResultOverLimit     = "over_limit"     // MaxConns connections open already
	ResultTimeout       = "timeout"        // no handshake and hello within HelloTimeout
	ResultTLSFailed     = "tls_failed"     // the TLS handshake failed (a plaintext client, a refused certificate)
)

// Results lists every result, in the order of the constants.
var Results = []string{ResultAccepted, ResultBadHello, ResultUnknownTicket, ResultOverLimit, ResultTimeout, ResultTLSFailed}

// Config configures a Listener; zero fields take the defaults.
type Config struct {
	// TLS, when set, is the listener's TLS configuration (the gRPC
	// listener's, certificates reloaded per handshake as there).
	TLS *tls.Config
	// Advertise is the host put into offers; empty: clients use the host
	// they reached the gRPC listener by.
	Advertise string
	// TicketTTL, HelloTimeout, MaxConns and MaxTickets: see the defaults.
	TicketTTL    time.Duration
	HelloTimeout time.Duration
	MaxConns     int
	MaxTickets   int
	// Logger logs refused connections at debug level; nil: slog's default.
	Logger *slog.Logger
}

// Listener is a bulk listener: it accepts connections, reads their
// hellos and hands each to the read whose ticket it names.
type Listener struct {
	lis  net.Listener
	cfg  Config
	port uint32
	log  *slog.Logger

	conns atomic.Int64 // open: in their hello or handed to a read

	mu      sync.Mutex
	tickets map[[TicketSize]byte]*Ticket
	closed  bool
	hellos  map[*conn]struct{} // connections in their hello
	handles sync.WaitGroup     // their goroutines
	serving sync.WaitGroup     // Serve, until it has seen the listener closed

	counts [6]atomic.Uint64 // by result, in the order of Results
}

// New returns a listener serving lis (call Serve). lis is closed by Close.
func New(lis net.Listener, cfg Config) *Listener {
	if cfg.TicketTTL <= 0 {
		cfg.TicketTTL = TicketTTL
	}
	if cfg.HelloTimeout <= 0 {
		cfg.HelloTimeout = HelloTimeout
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = MaxConns
	}
	if cfg.MaxTickets <= 0 {
		cfg.MaxTickets = MaxTickets
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	l := &Listener{lis: lis, cfg: cfg, log: cfg.Logger, tickets: map[[TicketSize]byte]*Ticket{}, hellos: map[*conn]struct{}{}}
	if a, ok := lis.Addr().(*net.TCPAddr); ok {
		l.port = uint32(a.Port)
	}
	return l
}

// Listen listens on the TCP address addr and serves it in the
// background until Close.
func Listen(addr string, cfg Config) (*Listener, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("bulk listener %s: %w", addr, err)
	}
	l := New(lis, cfg)
	go l.Serve()
	return l, nil
}

// Addr is the listener's address.
func (l *Listener) Addr() net.Addr { return l.lis.Addr() }

// TTL is how long a ticket waits for its connection.
func (l *Listener) TTL() time.Duration { return l.cfg.TicketTTL }

// Counts returns how many connections ended in each result, by result.
func (l *Listener) Counts() map[string]uint64 {
	out := make(map[string]uint64, len(Results))
	for i, r := range Results {
		out[r] = l.counts[i].Load()
	}
	return out
}

// Open is how many bulk connections are open.
func (l *Listener) Open() int64 { return l.conns.Load() }

// Waiting is how many tickets wait for their connection.
func (l *Listener) Waiting() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.tickets)
}

func (l *Listener) count(result string) {
	for i, r := range Results {
		if r == result {
			l.counts[i].Add(1)
		}
	}
}

// Serve accepts connections until the listener is closed.
func (l *Listener) Serve() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.serving.Add(1)
	l.mu.Unlock()
	defer l.serving.Done()
	var delay time.Duration
	for {
		c, err := l.lis.Accept()
		if err != nil {
			l.mu.Lock()
			closed := l.closed
			l.mu.Unlock()
			if closed {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) {
				// Out of descriptors, or a transient error: back off as
				// net/http does.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		if l.conns.Add(1) > int64(l.cfg.MaxConns) {
			l.conns.Add(-1)
			l.count(ResultOverLimit)
			c.Close()
			continue
		}
		l.mu.Lock()
		if l.closed {
			// Accepted as Close ran: closed before its hello, counted as
			// the connections Close takes in their hello are (every
			// accepted connection has one result).
			l.mu.Unlock()
			l.conns.Add(-1)
			l.count(ResultBadHello)
			c.Close()
			continue
		}
		hc := &conn{Conn: c, l: l}
		l.hellos[hc] = struct{}{}
		l.handles.Add(1)
		l.mu.Unlock()
		go l.handle(hc)
	}
}

// Close stops accepting, closes the connections in their hello and
// refuses the waiting tickets. Connections handed to reads are theirs to
// close.
func (l *Listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	for id, t := range l.tickets {
		delete(l.tickets, id)
		close(t.gone)
	}
	for c := range l.hellos {
		c.Conn.Close() // its hello fails, and handle closes it
	}
	l.mu.Unlock()
	err := l.lis.Close()
	// Serve may hold a connection accepted as Close ran: it counts it and
	// returns. Then every connection has its result (Counts).
	l.serving.Wait()
	l.handles.Wait()
	return err
}

// handle reads a connection's hello (after the TLS handshake) within
// HelloTimeout and hands it to its ticket's read, or closes it.
func (l *Listener) handle(c *conn) {
	defer l.handles.Done()
	defer func() {
		l.mu.Lock()
		delete(l.hellos, c)
		l.mu.Unlock()
	}()
	raw := c.Conn
	raw.SetDeadline(time.Now().Add(l.cfg.HelloTimeout))
	var nc net.Conn = c
	if l.cfg.TLS != nil {
		tc := tls.Server(c, l.cfg.TLS)
		if err := tc.Handshake(); err != nil {
			l.refuse(c, timeoutOr(err, ResultTLSFailed), "tls handshake", err)
			return
		}
		nc = &tlsConn{Conn: tc, inner: c}
	}
	var hello [len(Magic) + TicketSize]byte
	if _, err := io.ReadFull(nc, hello[:]); err != nil {
		l.refuse(c, timeoutOr(err, ResultBadHello), "hello", err)
		return
	}
	if !bytes.Equal(hello[:len(Magic)], []byte(Magic)) {
		l.refuse(c, ResultBadHello, "hello", errors.New("not the bulk protocol's magic"))
		return
	}
	var id [TicketSize]byte
	copy(id[:], hello[len(Magic):])
	raw.SetDeadline(time.Time{})
	// The hand-off happens under the lock that Cancel takes: either the
	// ticket is still there and its connection is in t.conn before a
	// Cancel can look (which then closes it), or Cancel removed the
	// ticket first and the connection is refused here; never a
	// connection handed to a ticket nobody waits for.
	l.mu.Lock()
	t := l.tickets[id]
	if t != nil {
		delete(l.tickets, id)
		t.conn <- nc // buffered: the ticket's one connection
	}
	l.mu.Unlock()
	if t == nil {
		l.refuse(c, ResultUnknownTicket, "hello", errors.New("no such ticket (never issued, used already or expired)"))
		return
	}
	l.count(ResultAccepted)
}

func timeoutOr(err error, result string) string {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return ResultTimeout
	}
	return result
}

func (l *Listener) refuse(c net.Conn, result, stage string, err error) {
	l.count(result)
	l.log.Debug("bulk connection refused", "remote", c.RemoteAddr().String(), "result", result, "stage", stage, "error", err)
	c.Close()
}

// conn is an accepted connection, counted open until closed.
type conn struct {
	net.Conn
	l    *Listener
	once sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.conns.Add(-1) })
	return err
}

// tlsConn is a TLS connection whose Close also closes (and uncounts) the
// connection beneath at once, without waiting for close_notify's write.
type tlsConn struct {
	*tls.Conn
	inner *conn
}

func (c *tlsConn) Close() error {
	c.Conn.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	c.Conn.Close()
	return c.inner.Close()
}

// ErrTooManyTickets is Offer's error when MaxTickets tickets wait.
var ErrTooManyTickets = errors.New("bulk: too many reads wait for their bulk connection")

// ErrClosed is Offer's and Wait's error once the listener is closed.
var ErrClosed = errors.New("bulk: the listener is closed")

// Ticket is one read's claim on a bulk connection.
type Ticket struct {
	l    *Listener
	id   [TicketSize]byte
	conn chan net.Conn // the connection, once its hello named the ticket
	gone chan struct{} // closed when the listener dropped the ticket (Close)
}

// Offer issues a ticket, waiting for its connection until Wait gives up
// or Cancel; the caller must call one of them.
func (l *Listener) Offer() (*Ticket, error) {
	t := &Ticket{l: l, conn: make(chan net.Conn, 1), gone: make(chan struct{})}
	if _, err := rand.Read(t.id[:]); err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	if len(l.tickets) >= l.cfg.MaxTickets {
		return nil, ErrTooManyTickets
	}
	l.tickets[t.id] = t
	return t, nil
}

// ID is the ticket's 16 bytes.
func (t *Ticket) ID() []byte { return t.id[:] }

// Host is the host offers name: Config.Advertise.
func (t *Ticket) Host() string { return t.l.cfg.Advertise }

// Port is the listener's port.
func (t *Ticket) Port() uint32 { return t.l.port }

// Addr is the listener's address, for messages.
func (t *Ticket) Addr() string {
	if h := t.l.cfg.Advertise; h != "" {
		return net.JoinHostPort(h, strconv.Itoa(int(t.l.port)))
	}
	return t.l.lis.Addr().String()
}

// ErrNoConnection is Wait's error when no connection named the ticket
// within TicketTTL.
var ErrNoConnection = errors.New("bulk: no connection presented the ticket in time")

// Wait returns the connection that presented the ticket, waiting at most
// TicketTTL (then ErrNoConnection; call it right after handing out the
// offer), or until ctx is done (its error). The ticket is spent either
// way: a connection presenting it later is refused as unknown.
func (t *Ticket) Wait(ctx context.Context) (net.Conn, error) {
	timer := time.NewTimer(t.l.cfg.TicketTTL)
	defer timer.Stop()
	var err error
	select {
	case c := <-t.conn:
		return c, nil
	case <-t.gone:
		err = ErrClosed
	case <-timer.C:
		err = ErrNoConnection
	case <-ctx.Done():
		err = ctx.Err()
	}
	t.Cancel()
	return nil, err
}

// Cancel spends the ticket: a connection presenting it later is refused,
// and one that did already is closed.
func (t *Ticket) Cancel() {
	t.l.mu.Lock()
	if t.l.tickets[t.id] == t {
		delete(t.l.tickets, t.id)
	}
	t.l.mu.Unlock()
	// Past the lock, no connection can be handed to t any more (handle
	// hands off under it): one handed before is in t.conn.
	select {
	case c := <-t.conn:
		c.Close()
	default:
	}
}
