// Small reads over small-reads connections (OpenSmallReads): a small read
// written to a bulk connection the gateway answers on the goroutine that
// reads it, instead of a gRPC call, whose hand-offs between goroutines on
// both ends cost a random 64×64 read about 130 µs on a 2-core VM (issue
// 20, docs/benchmarks.md).

package client

import (
	"context"
	"errors"
	"net"
	"runtime"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"github.com/zarrgate/zarrgate/internal/bulk"
)

// smallConnMargin: a connection is not used when the gateway would close
// it within this long (idle or at the end of its lifetime), so that a
// read rarely meets a connection closing under it.
const smallConnMargin = 5 * time.Second

// smallPool is a client's small-reads connections. A read takes an idle
// one (or opens one), and puts it back when answered; at most
// maxIdleSmall wait, at most maxSmallConns are open (reads beyond them
// are calls).
type smallPool struct {
	bulk *bulkState

	mu       sync.Mutex
	idle     []*smallConn // most recently used last
	open     int          // connections open: idle, in use, being opened
	most     int          // the most open at once (tests)
	off      bool         // the gateway has none (no bulk listener, or too old)
	offUntil time.Time    // after a connection could not be made
	closed   bool
}

// smallConn is one small-reads connection.
type smallConn struct {
	conn     net.Conn
	r        *bulk.Reader
	w        *bulk.Writer
	maxReq   int
	idleFor  time.Duration // the gateway's idle timeout
	expires  time.Time     // the gateway closes it then
	lastUsed time.Time
}

func maxIdleSmall() int  { return 2 * runtime.GOMAXPROCS(0) }
func maxSmallConns() int { return max(8, 4*runtime.GOMAXPROCS(0)) }

// usable reports whether c may carry a read now.
func (c *smallConn) usable(now time.Time) bool {
	return now.Add(smallConnMargin).Before(c.expires) && now.Sub(c.lastUsed) < c.idleFor-smallConnMargin
}

func (p *smallPool) want() bool {
	if p == nil || !p.bulk.on {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.off && !p.closed && time.Now().After(p.offUntil)
}

// take returns an idle usable connection; or nil, and whether the caller
// may open one (then counted open: it must call opened).
func (p *smallPool) take() (c *smallConn, mayOpen bool) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.idle) > 0 {
		c := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		if c.usable(now) {
			return c, false
		}
		c.conn.Close()
		p.open--
	}
	if p.open >= maxSmallConns() {
		return nil, false
	}
	p.open++
	p.most = max(p.most, p.open)
	return nil, true
}

// opened ends an open that take allowed: c, or nil if it failed.
func (p *smallPool) opened(c *smallConn) {
	if c == nil {
		p.mu.Lock()
		p.open--
		p.mu.Unlock()
	}
}

// put keeps c for the next read, or closes it.
func (p *smallPool) put(c *smallConn) {
	c.lastUsed = time.Now()
	p.mu.Lock()
	if !p.closed && len(p.idle) < maxIdleSmall() {
		p.idle = append(p.idle, c)
		c = nil
	}
	p.mu.Unlock()
	if c != nil {
		p.discard(c)
	}
}

// discard closes c, a connection taken from the pool or opened.
func (p *smallPool) discard(c *smallConn) {
	c.conn.Close()
	p.mu.Lock()
	p.open--
	p.mu.Unlock()
}

func (p *smallPool) close() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.open -= len(idle)
	p.mu.Unlock()
	for _, c := range idle {
		c.conn.Close()
	}
}

// dial opens a connection: the OpenSmallReads call, then the bulk
// listener's hello. ok is false when the gateway offers none; a gateway
// without them is not asked again, one that failed to connect not for a
// while.
func (p *smallPool) dial(ctx context.Context, arrays gatewayv1.ArrayServiceClient) (*smallConn, bool) {
	resp, err := arrays.OpenSmallReads(ctx, &gatewayv1.OpenSmallReadsRequest{})
	if err != nil {
		switch status.Code(err) {
		case codes.Unimplemented, codes.FailedPrecondition:
			p.mu.Lock()
			p.off = true
			p.mu.Unlock()
		}
		return nil, false
	}
	conn, err := p.bulk.dial(ctx, resp.GetOffer())
	if err != nil {
		if ctx.Err() == nil {
			p.mu.Lock()
			p.offUntil = time.Now().Add(bulkRetryAfter)
			p.mu.Unlock()
		}
		return nil, false
	}
	now := time.Now()
	return &smallConn{
		conn:     conn,
		r:        bulk.NewReader(conn, MaxMessageSize),
		w:        bulk.NewWriter(conn),
		maxReq:   int(min(resp.GetMaxRequestBytes(), 1<<30)),
		idleFor:  time.Duration(min(resp.GetIdleTimeoutMs(), 1<<40)) * time.Millisecond,
		expires:  now.Add(time.Duration(min(resp.GetLifetimeMs(), 1<<40)) * time.Millisecond),
		lastUsed: now,
	}, true
}

// read makes the small read req over a small-reads connection. ok is
// false when it could not be made there (no connection, the request too
// large for one, the connection failed before the answer): make it with
// ReadSlabSmall then. Otherwise the answer is resp, or err as the gRPC
// call's status error would be.
func (p *smallPool) read(ctx context.Context, arrays gatewayv1.ArrayServiceClient, req *gatewayv1.ReadSlabSmallRequest) (resp *gatewayv1.ReadSlabSmallResponse, err error, ok bool) {
	if !p.want() {
		return nil, nil, false
	}
	m := &gatewayv1.SmallReadsRequest{Read: req}
	if d, has := ctx.Deadline(); has {
		left := time.Until(d)
		if left <= 0 {
			return nil, status.FromContextError(context.DeadlineExceeded).Err(), true
		}
		m.TimeoutMs = uint64((left + time.Millisecond - 1) / time.Millisecond)
	}
	c, fresh := p.take()
	if fresh {
		c, ok = p.dial(ctx, arrays)
		p.opened(c)
		if !ok {
			return nil, nil, false
		}
	}
	if c == nil {
		return nil, nil, false // as many open as the client keeps, all busy
	}
	if size := proto.Size(m); size > c.maxReq {
		p.put(c)
		return nil, nil, false
	}
	resp, err = c.do(ctx, m)
	if err == nil {
		p.put(c)
		return resp, nil, true
	}
	var st statusError
	if errors.As(err, &st) {
		// A status in a frame: the connection is fine, the read failed.
		p.put(c)
		if status.Code(st.err) == codes.Unavailable {
			// Made again as a call, which the client's retry policy
			// retries.
			return nil, nil, false
		}
		return nil, st.err, true
	}
	p.discard(c)
	if ctx.Err() != nil {
		return nil, status.FromContextError(ctx.Err()).Err(), true
	}
	// The connection failed: closed by the gateway as it idled, drained
	// or reached its lifetime, or, if it was new, refused (the listener
	// full). The read is made again as a call; after a refusal, the
	// client makes its small reads as calls for a while.
	if fresh {
		p.mu.Lock()
		p.offUntil = time.Now().Add(bulkRetryAfter)
		p.mu.Unlock()
	}
	return nil, nil, false
}

// statusError is do's error for a read the gateway answered with a
// status other than OK.
type statusError struct{ err error }

func (e statusError) Error() string { return e.err.Error() }

// do sends one request and reads its answer. Errors other than a
// statusError leave the connection unusable.
func (c *smallConn) do(ctx context.Context, m *gatewayv1.SmallReadsRequest) (*gatewayv1.ReadSlabSmallResponse, error) {
	if d, has := ctx.Deadline(); has {
		c.conn.SetDeadline(d)
	} else {
		c.conn.SetDeadline(time.Time{})
	}
	stop := context.AfterFunc(ctx, func() { c.conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := c.w.Write(m, nil); err != nil {
		return nil, err
	}
	frame, err := c.r.Next(false)
	if err != nil {
		return nil, err
	}
	var out gatewayv1.SmallReadsResponse
	if err := proto.Unmarshal(frame, &out); err != nil {
		return nil, err
	}
	if code := codes.Code(out.GetCode()); code != codes.OK {
		return nil, statusError{status.Error(code, out.GetMessage())}
	}
	if out.GetRead() == nil {
		return nil, statusError{status.Error(codes.DataLoss, "the gateway answered a small read with neither a slab nor an error")}
	}
	return out.GetRead(), nil
}
