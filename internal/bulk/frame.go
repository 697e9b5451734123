package bulk

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/zarrgate/zarrgate/internal/wire"
)

// coalesce is the size below which a frame's pieces are copied together
// into one buffer instead of written where they lie: the length, the
// message's small fields, small values.
const coalesce = 4 << 10

// Writer writes a read's frames to its bulk connection.
type Writer struct {
	w       io.Writer
	scratch []byte
	bufs    net.Buffers
}

// NewWriter returns a writer of frames to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write writes m as a frame: its length, then m marshalled as the gRPC
// stream would send it (internal/wire), large bytes values written where
// they lie (one writev on a TCP connection, no copy in user space). m's
// values must not change until Write returns; done, if set, is called
// then, whether the write succeeded or not.
func (w *Writer) Write(m proto.Message, done func()) error {
	if done != nil {
		defer done()
	}
	data, err := wire.Marshal(m)
	if err != nil {
		return err
	}
	defer data.Free()
	small := 8
	for _, b := range data {
		if n := b.Len(); n < coalesce {
			small += n
		}
	}
	if cap(w.scratch) < small {
		w.scratch = make([]byte, 0, max(small, 2*cap(w.scratch)))
	}
	// scratch never grows below: the slices of it in bufs stay valid.
	s := binary.LittleEndian.AppendUint64(w.scratch[:0], uint64(data.Len()))
	from := 0
	w.bufs = w.bufs[:0]
	for _, b := range data {
		d := b.ReadOnlyData()
		if len(d) < coalesce {
			s = append(s, d...)
			continue
		}
		if from < len(s) {
			w.bufs = append(w.bufs, s[from:])
			from = len(s)
		}
		w.bufs = append(w.bufs, d)
	}
	if from < len(s) {
		w.bufs = append(w.bufs, s[from:])
	}
	bufs := w.bufs // WriteTo consumes its receiver
	_, err = bufs.WriteTo(w.w)
	clear(w.bufs) // no references to m's values left behind
	return err
}

// End writes the end frame (a length of 0).
func (w *Writer) End() error {
	var end [8]byte
	_, err := w.w.Write(end[:])
	return err
}

// MaxFrame is the largest frame a Reader takes by default: the Go
// client's largest gRPC message.
const MaxFrame = 64 << 20

// ErrTooLarge is Reader.Next's error for a frame over the reader's max.
var ErrTooLarge = errors.New("bulk: frame too large")

// ErrFrame is the error for taking more of a frame than is left of it.
var ErrFrame = errors.New("bulk: past the end of the frame")

// Reader read-ahead: the buffer's size, and how much of it a read into
// a frame's destinations (ReadInto) may take beyond them (the next
// frame's length and first bytes; a little of its data, copied out).
const (
	aheadSize = 8 << 10
	aheadTail = 512
)

// Reader reads the frames of a bulk connection: whole (Next), or in parts
// (Begin, Peek, Discard, ReadInto, Rest), the large ones straight into
// their destinations.
type Reader struct {
	r   io.Reader
	raw *rawReader // r's socket, for readv; nil if it has none (TLS)
	max int

	ahead  []byte // read-ahead: ahead[lo:hi] is read and not yet taken
	lo, hi int
	left   int  // of the current frame (after Begin), not yet taken
	in     bool // inside a frame
	buf    []byte
	bufs   [][]byte // ReadInto's, reused
	short  int      // readvs that returned less than asked (tests)
}

// NewReader returns a reader of frames from r of at most max bytes each
// (MaxFrame if max ≤ 0).
func NewReader(r io.Reader, max int) *Reader {
	if max <= 0 {
		max = MaxFrame
	}
	// A small buffer: it saves system calls on small frames, while
	// frames larger than it are read straight into their own buffer (all
	// but what the buffer held already), not copied through it.
	return &Reader{r: r, raw: newRawReader(r), max: max, ahead: make([]byte, aheadSize)}
}

// Direct reports whether ReadInto reads from the socket itself, with
// readv, rather than through r's Read (a TLS connection, a pipe).
func (r *Reader) Direct() bool { return r.raw != nil }

// fill reads more into the read-ahead (at least one byte), moving what is
// there to its start first.
func (r *Reader) fill() error {
	if r.lo > 0 {
		r.hi = copy(r.ahead, r.ahead[r.lo:r.hi])
		r.lo = 0
	}
	for {
		n, err := r.r.Read(r.ahead[r.hi:])
		r.hi += n
		if n > 0 {
			return nil
		}
		if err == nil {
			continue
		}
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
}

// readFull fills b from the read-ahead, then from r.
func (r *Reader) readFull(b []byte) error {
	k := copy(b, r.ahead[r.lo:r.hi])
	r.lo += k
	if k == len(b) {
		return nil
	}
	b = b[k:]
	if len(b) < len(r.ahead)/2 {
		for len(b) > 0 {
			if err := r.fill(); err != nil {
				return err
			}
			k := copy(b, r.ahead[r.lo:r.hi])
			r.lo += k
			b = b[k:]
		}
		return nil
	}
	if _, err := io.ReadFull(r.r, b); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	return nil
}

// Begin reads the next frame's length, and returns it: the frame's bytes
// are then taken with Peek, Discard, ReadInto and Rest, all of them
// (Next begins a frame and takes it whole). It returns io.EOF after the
// end frame, io.ErrUnexpectedEOF when the connection ends before it, and
// an error without reading on for a length over the reader's max.
func (r *Reader) Begin() (int, error) {
	if r.in {
		return 0, fmt.Errorf("bulk: Begin with %d bytes of a frame left", r.left)
	}
	var hdr [8]byte
	if err := r.readFull(hdr[:]); err != nil {
		return 0, err
	}
	n := binary.LittleEndian.Uint64(hdr[:])
	if n == 0 {
		return 0, io.EOF
	}
	if n > uint64(r.max) {
		return 0, fmt.Errorf("%w: %d bytes, more than the %d taken", ErrTooLarge, n, r.max)
	}
	r.left, r.in = int(n), true
	return int(n), nil
}

// Left is how much of the current frame has not been taken.
func (r *Reader) Left() int { return r.left }

// Peek returns the current frame's next min(k, Left(), the read-ahead's
// size) bytes without taking them, valid until the reader's next call.
func (r *Reader) Peek(k int) ([]byte, error) {
	k = min(k, r.left, len(r.ahead))
	for r.hi-r.lo < k {
		if err := r.fill(); err != nil {
			return nil, err
		}
	}
	return r.ahead[r.lo : r.lo+k], nil
}

// Discard takes the current frame's next k bytes, which Peek returned
// (ErrFrame for more than the frame or the read-ahead holds).
func (r *Reader) Discard(k int) error {
	if k > r.left || k > r.hi-r.lo {
		return ErrFrame
	}
	r.lo += k
	r.take(k)
	return nil
}

func (r *Reader) take(k int) {
	if r.left -= k; r.left == 0 {
		r.in = false
	}
}

// ReadInto takes the current frame's next len(b[0]) + len(b[1]) + … bytes
// into the slices of b, in order: what the read-ahead holds copied, the
// rest read from the connection straight into them (Direct: with readv,
// which may also read up to aheadTail bytes past them into the
// read-ahead). They must not be more than is left of the frame. b's
// slices may be changed.
func (r *Reader) ReadInto(b [][]byte) error {
	total := 0
	for _, p := range b {
		total += len(p)
	}
	if total > r.left {
		return ErrFrame
	}
	r.take(total)
	// What the read-ahead holds.
	for len(b) > 0 && r.lo < r.hi {
		k := copy(b[0], r.ahead[r.lo:r.hi])
		r.lo += k
		if b[0] = b[0][k:]; len(b[0]) == 0 {
			b = b[1:]
		}
	}
	b = skipEmpty(b)
	if len(b) == 0 {
		return nil
	}
	if r.raw == nil {
		for _, p := range b {
			if _, err := io.ReadFull(r.r, p); err != nil {
				if err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return err
			}
		}
		return nil
	}
	// The read-ahead is empty: the bytes past b go to its start.
	r.lo, r.hi = 0, 0
	tail := r.ahead[:aheadTail]
	for len(b) > 0 {
		iov := append(r.bufs[:0], b[:min(len(b), maxIovecs-1)]...)
		if len(iov) == len(b) {
			iov = append(iov, tail[r.hi:])
		}
		r.bufs = iov
		n, err := r.raw.readv(iov)
		clear(r.bufs) // no references to the destination left behind
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrUnexpectedEOF
		}
		for n > 0 && len(b) > 0 {
			k := min(n, len(b[0]))
			n -= k
			b[0] = b[0][k:]
			b = skipEmpty(b)
		}
		if len(b) > 0 {
			r.short++
		}
		r.hi += n // into the tail
	}
	return nil
}

// skipEmpty is b without its leading empty slices.
func skipEmpty(b [][]byte) [][]byte {
	for len(b) > 0 && len(b[0]) == 0 {
		b = b[1:]
	}
	return b
}

// maxIovecs is the most iovecs of one readv: Linux's IOV_MAX.
const maxIovecs = 1024

// Rest takes the rest of the current frame: in the reader's one buffer,
// valid until the next call, or (own) in a fresh slice.
func (r *Reader) Rest(own bool) ([]byte, error) {
	n := r.left
	var b []byte
	if own {
		b = make([]byte, n)
	} else {
		if cap(r.buf) < n {
			r.buf = make([]byte, n)
		}
		b = r.buf[:n]
	}
	r.take(n)
	if err := r.readFull(b); err != nil {
		return nil, err
	}
	return b, nil
}

// Next returns the next frame's bytes: in the reader's one buffer, valid
// until the next call, or (own) in a fresh slice. It returns io.EOF after
// the end frame, io.ErrUnexpectedEOF when the connection ends before it,
// and an error without reading on for a length over the reader's max.
func (r *Reader) Next(own bool) ([]byte, error) {
	if _, err := r.Begin(); err != nil {
		return nil, err
	}
	return r.Rest(own)
}

// Hello is the bytes a client sends first: Magic and the ticket.
func Hello(ticket []byte) []byte { return append([]byte(Magic), ticket...) }

// Dial connects to the bulk listener at addr (host:port) within ctx, over
// TLS with cfg when set (its ServerName, if empty, the host dialled; no
// ALPN), and sends the hello of ticket.
func Dial(ctx context.Context, addr string, cfg *tls.Config, ticket []byte) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if cfg != nil {
		cfg = cfg.Clone()
		cfg.NextProtos = nil
		if cfg.ServerName == "" {
			host, _, _ := net.SplitHostPort(addr)
			cfg.ServerName = host
		}
		tc := tls.Client(c, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, err
		}
		c = tc
	}
	if _, err := c.Write(Hello(ticket)); err != nil {
		c.Close()
		return nil, err
	}
	if !stop() {
		c.Close()
		return nil, ctx.Err()
	}
	c.SetDeadline(time.Time{})
	return c, nil
}
