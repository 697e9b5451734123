// Reads over a bulk connection: the blocks of a ReadSlab call over a
// plain TCP (or TLS) connection beside gRPC, cheaper per byte than the
// HTTP/2 stream (internal/bulk, gateway.proto's BulkOffer).

package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/bulk"
	"github.com/zarrgate/zarrgate/internal/grpcerr"
)

// WithBulk turns bulk reads on or off (default on). With them, reads
// through the socket (not shared memory) ask the gateway for their blocks
// over a bulk connection, a plain TCP connection (TLS when the client
// uses TLS) beside gRPC's, which costs both ends less CPU than the gRPC
// stream (a 512 MiB read: the client 270 ms instead of 440, the gateway
// 95 ms less; docs/benchmarks.md); gateways without a bulk listener
// (--bulk-listen) send them through the stream as before. When the bulk
// connection cannot be made (a firewall, a proxy in between), the read
// is made again through the stream, and the client does not ask for bulk
// for a minute. Small reads (up to 1 MiB) go over bulk connections too,
// kept open between reads (OpenSmallReads): a random 64 × 64 read's p50
// about a fifth lower than as a ReadSlabSmall call; WithBulk(false)
// makes them calls.
func WithBulk(on bool) Option { return func(o *options) { o.bulk = &on } }

// Bulk connection timings: how long connecting and the hello may take,
// and how long a client that failed to connect reads without bulk.
const (
	bulkDialTimeout = 2 * time.Second
	bulkRetryAfter  = time.Minute
)

// bulkState is whether and how a client reads over bulk connections.
type bulkState struct {
	on   bool
	host string      // the host of the dial target, for offers naming none
	tls  *tls.Config // the client's, or nil

	mu       sync.Mutex
	offUntil time.Time // after a failed connection
}

// want reports whether a read asks for bulk now.
func (s *bulkState) want() bool {
	if !s.on {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Now().After(s.offUntil)
}

// failed turns bulk off for bulkRetryAfter.
func (s *bulkState) failed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.offUntil = time.Now().Add(bulkRetryAfter)
}

// dial connects to the bulk listener of an offer and sends its hello.
func (s *bulkState) dial(ctx context.Context, o *gatewayv1.BulkOffer) (net.Conn, error) {
	host := o.GetHost()
	if host == "" {
		host = s.host
	}
	if host == "" || o.GetPort() == 0 || o.GetPort() > 65535 {
		return nil, errors.New("the offer names no address the client can reach")
	}
	ctx, cancel := context.WithTimeout(ctx, bulkDialTimeout)
	defer cancel()
	return bulk.Dial(ctx, net.JoinHostPort(host, strconv.Itoa(int(o.GetPort()))), s.tls, o.GetTicket())
}

// targetHost is the host of a gRPC dial target (host:port, or a URI such
// as dns:///host:port), "" for unix sockets and targets without one.
func targetHost(target string) string {
	if strings.HasPrefix(target, "unix:") || strings.HasPrefix(target, "unix-abstract:") {
		return ""
	}
	if i := strings.Index(target, "://"); i >= 0 {
		target = target[i+3:]
		if j := strings.LastIndex(target, "/"); j >= 0 {
			target = target[j+1:] // dns://authority/host:port
		}
	}
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		return ""
	}
	return host
}

// bulkIn is the receiving end of a read's bulk connection.
type bulkIn struct {
	conn net.Conn
	r    *bulk.Reader
	stop func() bool // of the AfterFunc closing conn with the read's context
	rows [][]byte    // placeFrame's, reused

	// The first frame's length, read by open.
	firstLen int
	firstErr error
	peeked   bool
}

// callError is open's error when the call itself failed: its status.
type callError struct{ err error }

func (e callError) Error() string { return e.err.Error() }

// refusalWait is how long open waits for the call's status when the bulk
// connection ends before its first frame: the server ends a failed read
// at once, while a refused hello (a ticket the listener did not take, a
// listener over its limit, a client certificate refused after a TLS 1.3
// handshake) leaves the call waiting for a connection that never comes.
const refusalWait = time.Second

// open connects to the bulk listener of an offer, sends the hello and
// reads the first frame's length. An error means the bulk connection is
// not usable, and the read should be made again through the stream; or,
// as a callError, that the call failed.
func (s *bulkState) open(ctx context.Context, o *gatewayv1.BulkOffer, stream grpc.ClientStream, cancel context.CancelFunc) (*bulkIn, error) {
	conn, err := s.dial(ctx, o)
	if err != nil {
		return nil, err
	}
	b := &bulkIn{conn: conn, r: bulk.NewReader(conn, MaxMessageSize),
		stop: context.AfterFunc(ctx, func() { conn.Close() })}
	b.firstLen, b.firstErr = b.r.Begin()
	b.peeked = true
	if b.firstErr == nil || b.firstErr == io.EOF || ctx.Err() != nil || errors.Is(b.firstErr, bulk.ErrTooLarge) {
		return b, nil // begin reports what there is to report
	}
	b.close()
	// Closed before the first frame: a failed read (its status comes at
	// once), or a refused hello (no status: the server still waits).
	done := make(chan error, 1)
	go func() {
		var m gatewayv1.ReadSlabResponse
		done <- stream.RecvMsg(&m)
	}()
	t := time.NewTimer(refusalWait)
	defer t.Stop()
	select {
	case serr := <-done:
		if status.Code(serr) != codes.OK {
			return nil, callError{serr}
		}
	case <-t.C:
		cancel()
		<-done
	}
	return nil, fmt.Errorf("the bulk connection ended before its first frame: %w", b.firstErr)
}

func (b *bulkIn) close() {
	b.stop()
	b.conn.Close()
}

// begin begins the next frame, whose bytes are then taken from b.r, and
// returns its length; or io.EOF after the end frame and the call's OK;
// any other error is the read's (fail's).
func (b *bulkIn) begin(ctx context.Context, stream grpc.ClientStream, path string) (int, error) {
	var n int
	var err error
	if b.peeked {
		n, err, b.peeked = b.firstLen, b.firstErr, false
	} else {
		n, err = b.r.Begin()
	}
	if err == nil {
		return n, nil
	}
	if err == io.EOF {
		// The end frame: the call ends OK, and nothing else comes.
		var m gatewayv1.ReadSlabResponse
		switch err := stream.RecvMsg(&m); {
		case err == io.EOF:
			return 0, io.EOF
		case err != nil:
			return 0, grpcerr.FromStatus(err)
		default:
			return 0, errs.New(errs.DataLoss, "read %q: a message in the stream after the bulk connection's blocks", path)
		}
	}
	return 0, b.fail(ctx, stream, path, err)
}

// fail is the read's error for err, of reading the connection: the
// call's status when it has one.
func (b *bulkIn) fail(ctx context.Context, stream grpc.ClientStream, path string, err error) error {
	if ctx.Err() != nil {
		return grpcerr.FromStatus(status.FromContextError(ctx.Err()).Err())
	}
	if errors.Is(err, bulk.ErrTooLarge) {
		return errs.Wrap(errs.DataLoss, err, "read %q: the bulk connection", path)
	}
	// The connection broke or carried nonsense: the server, whose writes
	// now fail, ends the call with its status, which says more when the
	// read failed there first.
	b.conn.Close()
	var m gatewayv1.ReadSlabResponse
	serr := stream.RecvMsg(&m)
	if serr != nil && serr != io.EOF {
		return grpcerr.FromStatus(serr)
	}
	return errs.Wrap(errs.DataLoss, err, "read %q: the bulk connection", path)
}

// connError is placeFrame's error of reading the connection (not of what
// it carried).
type connError struct{ err error }

func (e connError) Error() string { return e.err.Error() }

// placedFrames counts the frames placeFrame read into place (tests).
var placedFrames atomic.Int64

// minPlacedRow: blocks whose rows in the destination are shorter than
// this are copied into place from the frame (placeBlock), as one readv
// iovec per row of a few elements costs more than the copy.
var minPlacedRow int64 = 64

// placeFrame reads the frame begun on b, a block of fixed-size elements,
// straight into its rows of hdr.into, the slab's dense destination,
// without a copy of the block in user space: it parses the frame's
// ReadSlabResponse up to the block's data (blockPrefix), checks the block
// against the slab and its data's length against the block, then reads
// the data with readv into the rows. ok is false, with nothing of the
// frame taken, for a frame it does not parse so (data not last, fields
// it does not expect): the frame is then read whole. Reading errors are
// connErrors; the others are what the frame carried.
func placeFrame(b *bulkIn, hdr *SlabHeader) (_ Block, ok bool, _ error) {
	left := b.r.Left()
	var origin, shape []int64
	var data, dataLen int
	for _, k := range []int{256, 4096} {
		p, err := b.r.Peek(k)
		if err != nil {
			return Block{}, false, connError{err}
		}
		var more bool
		origin, shape, data, dataLen, more, ok = blockPrefix(p, left)
		if ok || !more || len(p) == left {
			break
		}
	}
	if !ok {
		return Block{}, false, nil
	}
	if err := checkBox(hdr, origin, shape); err != nil {
		return Block{}, false, err
	}
	if err := checkSize(hdr, origin, shape, int64(dataLen)); err != nil {
		return Block{}, false, err
	}
	blk := Block{Origin: origin, Shape: shape, placed: true}
	rows, rowBytes := rowsOf(b.rows[:0], hdr.into, hdr.Shape, blk, hdr.ElementSize)
	b.rows = rows
	defer clear(b.rows) // no references to the destination left behind
	if rowBytes < minPlacedRow && dataLen > 0 {
		return Block{}, false, nil
	}
	if err := b.r.Discard(data); err != nil {
		return Block{}, false, connError{err}
	}
	if err := b.r.ReadInto(rows); err != nil {
		return Block{}, false, connError{err}
	}
	placedFrames.Add(1)
	return blk, true, nil
}

// blockPrefix parses p, the first bytes of a frame of n bytes, as a
// ReadSlabResponse whose block's data field comes last, as the gateway
// sends them (internal/wire's encoder puts large values after the small
// fields; the protobuf library orders fields by number, and a block of
// fixed-size elements has nothing after data): origin and shape packed,
// once each, then data (absent when empty), which ends the frame. It returns them, the
// offset of the data in the frame and its length; or more if p ends
// within them; or ok false for anything else (a header, fields in
// another order or form, unknown fields), which the full parse takes.
func blockPrefix(p []byte, n int) (origin, shape []int64, data, dataLen int, more, ok bool) {
	c := prefixCursor{p: p}
	// ReadSlabResponse: field 2 (block), which ends the frame.
	tag, err := c.varint()
	if err != nil || tag != 2<<3|2 {
		return nil, nil, 0, 0, err == errMore, false
	}
	l, err := c.varint()
	if err != nil || l != uint64(n-c.i) {
		return nil, nil, 0, 0, err == errMore, false
	}
	var seenOrigin, seenShape bool
	for {
		if c.i == n { // no data field: an empty block's
			return nonNil(origin), nonNil(shape), c.i, 0, false, true
		}
		tag, err := c.varint()
		if err != nil {
			return nil, nil, 0, 0, err == errMore, false
		}
		switch tag {
		case 1<<3 | 2, 2<<3 | 2: // origin, shape: packed varints
			if tag == 1<<3|2 && seenOrigin || tag == 2<<3|2 && seenShape {
				return nil, nil, 0, 0, false, false
			}
			l, err := c.varint()
			if err != nil {
				return nil, nil, 0, 0, err == errMore, false
			}
			if l > uint64(n-c.i) {
				return nil, nil, 0, 0, false, false
			}
			if l > uint64(len(p)-c.i) {
				return nil, nil, 0, 0, true, false
			}
			sub := prefixCursor{p: p[c.i : c.i+int(l)]}
			c.i += int(l)
			var v []int64
			for sub.i < len(sub.p) {
				x, err := sub.varint()
				if err != nil || x > 1<<62 {
					return nil, nil, 0, 0, false, false
				}
				v = append(v, int64(x))
			}
			if tag == 1<<3|2 {
				origin, seenOrigin = v, true
			} else {
				shape, seenShape = v, true
			}
		case 3<<3 | 2: // data, to the end of the frame
			l, err := c.varint()
			if err != nil || l != uint64(n-c.i) {
				return nil, nil, 0, 0, err == errMore, false
			}
			return nonNil(origin), nonNil(shape), c.i, int(l), false, true
		default:
			return nil, nil, 0, 0, false, false
		}
	}
}

// nonNil is v, or an empty slice for nil (a rank-0 block's origin).
func nonNil(v []int64) []int64 {
	if v == nil {
		return []int64{}
	}
	return v
}

// errMore is prefixCursor's error for a varint cut by the end of its bytes.
var errMore = errors.New("more")

type prefixCursor struct {
	p []byte
	i int
}

func (c *prefixCursor) varint() (uint64, error) {
	var x uint64
	for s := 0; s < 64; s += 7 {
		if c.i >= len(c.p) {
			return 0, errMore
		}
		b := c.p[c.i]
		c.i++
		x |= uint64(b&0x7f) << s
		if b < 0x80 {
			return x, nil
		}
	}
	return 0, errors.New("varint too long")
}

// rowsOf appends to rows the runs of out (a dense slab of shape shape,
// elem bytes per element) that a block covers, in the block's C order,
// adjacent runs joined, and returns them and the length of a run. The
// block has been checked against the slab (checkBox).
func rowsOf(rows [][]byte, out []byte, shape []int64, b Block, elem int) ([][]byte, int64) {
	n := eachRow(out, shape, b, elem, func(row []byte) { rows = append(rows, row) })
	return rows, n
}
