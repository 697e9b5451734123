package bulk

import (
	"bufio"
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

// Reader reads the frames of a bulk connection.
type Reader struct {
	r   *bufio.Reader
	max int
	hdr [8]byte
	buf []byte
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
	return &Reader{r: bufio.NewReaderSize(r, 8<<10), max: max}
}

// Next returns the next frame's bytes: in the reader's one buffer, valid
// until the next call, or (own) in a fresh slice. It returns io.EOF after
// the end frame, io.ErrUnexpectedEOF when the connection ends before it,
// and an error without reading on for a length over the reader's max.
func (r *Reader) Next(own bool) ([]byte, error) {
	if _, err := io.ReadFull(r.r, r.hdr[:]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	n := binary.LittleEndian.Uint64(r.hdr[:])
	if n == 0 {
		return nil, io.EOF
	}
	if n > uint64(r.max) {
		return nil, fmt.Errorf("%w: %d bytes, more than the %d taken", ErrTooLarge, n, r.max)
	}
	var b []byte
	if own {
		b = make([]byte, n)
	} else {
		if cap(r.buf) < int(n) {
			r.buf = make([]byte, n)
		}
		b = r.buf[:n]
	}
	if _, err := io.ReadFull(r.r, b); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return b, nil
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
