// Reads over a bulk connection: the blocks of a ReadSlab call over a
// plain TCP (or TLS) connection beside gRPC, cheaper per byte than the
// HTTP/2 stream (internal/bulk, gateway.proto's BulkOffer).

package client

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/bulk"
	"github.com/zarrgate/zarrgate/internal/grpcerr"
)

// WithBulk turns bulk reads on or off (default on). With them, reads
// through the socket (not shared memory) ask the gateway for their blocks
// over a bulk connection, a plain TCP connection (TLS when the client
// uses TLS) beside gRPC's, which costs both ends about half the CPU per
// byte of the gRPC stream; gateways without a bulk listener
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
	lastErr  error
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
func (s *bulkState) failed(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.offUntil, s.lastErr = time.Now().Add(bulkRetryAfter), err
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
}

func newBulkIn(ctx context.Context, conn net.Conn) *bulkIn {
	return &bulkIn{conn: conn, r: bulk.NewReader(conn, MaxMessageSize),
		stop: context.AfterFunc(ctx, func() { conn.Close() })}
}

func (b *bulkIn) close() {
	b.stop()
	b.conn.Close()
}

// next returns the next frame (in the reader's buffer unless own), or
// io.EOF after the end frame and the call's OK; any other error is the
// read's, the call's status when it has one.
func (b *bulkIn) next(ctx context.Context, stream grpc.ClientStream, path string, own bool) ([]byte, error) {
	f, err := b.r.Next(own)
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
