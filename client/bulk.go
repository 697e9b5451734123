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
// for a minute.
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

	// The first frame, read by open.
	first    []byte
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
// reads the first frame (own: into a buffer of its own). An error means
// the bulk connection is not usable, and the read should be made again
// through the stream; or, as a callError, that the call failed.
func (s *bulkState) open(ctx context.Context, o *gatewayv1.BulkOffer, stream grpc.ClientStream, cancel context.CancelFunc, own bool) (*bulkIn, error) {
	conn, err := s.dial(ctx, o)
	if err != nil {
		return nil, err
	}
	b := &bulkIn{conn: conn, r: bulk.NewReader(conn, MaxMessageSize),
		stop: context.AfterFunc(ctx, func() { conn.Close() })}
	b.first, b.firstErr = b.r.Next(own)
	b.peeked = true
	if b.firstErr == nil || b.firstErr == io.EOF || ctx.Err() != nil || errors.Is(b.firstErr, bulk.ErrTooLarge) {
		return b, nil // next reports what there is to report
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

// next returns the next frame (in the reader's buffer unless own), or
// io.EOF after the end frame and the call's OK; any other error is the
// read's, the call's status when it has one.
func (b *bulkIn) next(ctx context.Context, stream grpc.ClientStream, path string, own bool) ([]byte, error) {
	var f []byte
	var err error
	if b.peeked {
		f, err, b.first, b.peeked = b.first, b.firstErr, nil, false
	} else {
		f, err = b.r.Next(own)
	}
	if err == nil {
		return f, nil
	}
	if err == io.EOF {
		// The end frame: the call ends OK, and nothing else comes.
		var m gatewayv1.ReadSlabResponse
		switch err := stream.RecvMsg(&m); {
		case err == io.EOF:
			return nil, io.EOF
		case err != nil:
			return nil, grpcerr.FromStatus(err)
		default:
			return nil, errs.New(errs.DataLoss, "read %q: a message in the stream after the bulk connection's blocks", path)
		}
	}
	if ctx.Err() != nil {
		return nil, grpcerr.FromStatus(status.FromContextError(ctx.Err()).Err())
	}
	if errors.Is(err, bulk.ErrTooLarge) {
		return nil, errs.Wrap(errs.DataLoss, err, "read %q: the bulk connection", path)
	}
	// The connection broke or carried nonsense: the server, whose writes
	// now fail, ends the call with its status, which says more when the
	// read failed there first.
	b.conn.Close()
	var m gatewayv1.ReadSlabResponse
	serr := stream.RecvMsg(&m)
	if serr != nil && serr != io.EOF {
		return nil, grpcerr.FromStatus(serr)
	}
	return nil, errs.Wrap(errs.DataLoss, err, "read %q: the bulk connection", path)
}
