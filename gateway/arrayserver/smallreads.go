package arrayserver

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"runtime/debug"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"github.com/zarrgate/zarrgate/internal/bulk"
)

// Small-reads connections (OpenSmallReads, gateway.proto): many
// ReadSlabSmall reads, one after another, over one bulk connection, each
// answered by the connection's goroutine itself. A gRPC call on this VM
// costs a small read ≈ 130 µs more than a bare round trip between two
// processes, in hand-offs between goroutines on both ends (issue 20,
// docs/benchmarks.md); a read here has none: the goroutine that reads the
// request runs the read and writes the answer.

// Terms of a small-reads connection, sent to the client in
// OpenSmallReadsResponse.
const (
	// SmallReadsMaxRequest is the largest request frame taken: a read's
	// path and selection. A larger frame closes the connection.
	SmallReadsMaxRequest = 16 << 10
	// SmallReadsIdle closes a connection that sends no request for this
	// long (and bounds how long writing an answer may take).
	SmallReadsIdle = 30 * time.Second
	// SmallReadsLifetime closes a connection, between two reads, once it
	// has been open this long.
	SmallReadsLifetime = 10 * time.Minute
	// smallReadsMaxTimeout bounds a request's own timeout.
	smallReadsMaxTimeout = 24 * time.Hour
)

// LocalCaller runs a unary method's handler as the server runs a gRPC
// call of it (internal/rpc's Server): small-reads connections need it.
type LocalCaller interface {
	// LocalContext keeps the credentials of the call ctx belongs to.
	LocalContext(ctx context.Context) context.Context
	// CallLocal runs handler through the server's unary interceptors.
	CallLocal(ctx context.Context, method string, req any, recvBytes int, sentBytes func(resp any) int, handler grpc.UnaryHandler) (any, error)
}

// smallServer is the server's small-reads connections.
type smallServer struct {
	local LocalCaller // nil: the registrar cannot run local calls
	// idle and lifetime: SmallReadsIdle and SmallReadsLifetime where
	// zero (tests set their own).
	idle, lifetime time.Duration

	mu       sync.Mutex
	conns    map[net.Conn]*smallConn
	draining bool
}

// smallConn is one connection's state, for the drain.
type smallConn struct {
	mu      sync.Mutex
	reading bool // waiting for a request: the drain closes it at once
	closing bool // the drain asked it to close after its read
}

func (sr *smallServer) terms() (idle, lifetime time.Duration) {
	idle, lifetime = SmallReadsIdle, SmallReadsLifetime
	if sr.idle > 0 {
		idle = sr.idle
	}
	if sr.lifetime > 0 {
		lifetime = sr.lifetime
	}
	return idle, lifetime
}

// drain stops offering connections and closes each open one once its
// read in progress (if any) is answered.
func (sr *smallServer) drain() {
	sr.mu.Lock()
	defer sr.mu.Unlock()
	sr.draining = true
	for c, sc := range sr.conns {
		sc.mu.Lock()
		sc.closing = true
		if sc.reading {
			c.SetReadDeadline(time.Now())
		}
		sc.mu.Unlock()
	}
}

// OpenSmallReads implements gatewayv1.ArrayServiceServer.
func (s *Server) OpenSmallReads(ctx context.Context, _ *gatewayv1.OpenSmallReadsRequest) (*gatewayv1.OpenSmallReadsResponse, error) {
	sr := &s.small
	if s.bulk == nil || sr.local == nil {
		return nil, status.Error(codes.FailedPrecondition, "open_small_reads: this gateway has no bulk listener (--bulk-listen); read small slabs with ReadSlabSmall")
	}
	sr.mu.Lock()
	draining := sr.draining
	sr.mu.Unlock()
	if draining {
		return nil, status.Error(codes.Unavailable, "open_small_reads: the gateway is shutting down")
	}
	t, err := s.bulk.Offer()
	switch {
	case errors.Is(err, bulk.ErrTooManyTickets):
		return nil, status.Errorf(codes.ResourceExhausted, "open_small_reads: %v; read with ReadSlabSmall", err)
	case err != nil:
		return nil, status.Errorf(codes.Unavailable, "open_small_reads: %v", err)
	}
	base := sr.local.LocalContext(ctx)
	go s.serveSmallReads(t, base)
	idle, lifetime := sr.terms()
	return &gatewayv1.OpenSmallReadsResponse{
		Offer:           &gatewayv1.BulkOffer{Host: t.Host(), Port: t.Port(), Ticket: t.ID()},
		MaxRequestBytes: SmallReadsMaxRequest,
		IdleTimeoutMs:   uint64(idle / time.Millisecond),
		LifetimeMs:      uint64(lifetime / time.Millisecond),
	}, nil
}

// serveSmallReads waits for the ticket's connection, then answers its
// requests in turn until the client closes it, it idles, sends a frame it
// cannot take, has lived its time or the server drains.
func (s *Server) serveSmallReads(t *bulk.Ticket, base context.Context) {
	c, err := t.Wait(context.Background())
	if err != nil {
		return
	}
	defer c.Close()
	// The reads recover from their panics (the server's interceptors);
	// this is for the connection's own handling, outside any call.
	defer func() {
		if p := recover(); p != nil {
			slog.Error("small-reads connection: panic (server bug), connection closed", "panic", p, "stack", string(debug.Stack()))
		}
	}()
	sr := &s.small
	sc := &smallConn{}
	sr.mu.Lock()
	if sr.draining {
		sr.mu.Unlock()
		return
	}
	if sr.conns == nil {
		sr.conns = map[net.Conn]*smallConn{}
	}
	sr.conns[c] = sc
	sr.mu.Unlock()
	defer func() {
		sr.mu.Lock()
		delete(sr.conns, c)
		sr.mu.Unlock()
	}()
	idle, lifetime := sr.terms()
	born := time.Now()
	r, w := bulk.NewReader(c, SmallReadsMaxRequest), bulk.NewWriter(c)
	for time.Since(born) < lifetime {
		sc.mu.Lock()
		if sc.closing {
			sc.mu.Unlock()
			return
		}
		sc.reading = true
		c.SetReadDeadline(time.Now().Add(idle))
		sc.mu.Unlock()
		n, err := r.Begin()
		var b []byte
		if err == nil && n > 0 {
			b, err = r.Rest(false)
		}
		sc.mu.Lock()
		sc.reading = false
		sc.mu.Unlock()
		if err != nil || n == 0 {
			return // closed, idle, too large, or the client's end frame
		}
		out := s.smallRead(base, b)
		c.SetWriteDeadline(time.Now().Add(idle))
		if err := w.Write(out, nil); err != nil {
			return
		}
	}
}

// smallRead answers one request frame.
func (s *Server) smallRead(base context.Context, frame []byte) *gatewayv1.SmallReadsResponse {
	fail := func(err error) *gatewayv1.SmallReadsResponse {
		st := status.Convert(err)
		return &gatewayv1.SmallReadsResponse{Code: uint32(st.Code()), Message: st.Message()}
	}
	var req gatewayv1.SmallReadsRequest
	if err := proto.Unmarshal(frame, &req); err != nil {
		return fail(status.Errorf(codes.InvalidArgument, "small reads: the request frame is not a SmallReadsRequest: %v", err))
	}
	if req.GetRead() == nil {
		return fail(status.Error(codes.InvalidArgument, "small reads: the request has no read"))
	}
	ctx := base
	if ms := req.GetTimeoutMs(); ms > 0 {
		d := smallReadsMaxTimeout
		if ms < uint64(d/time.Millisecond) {
			d = time.Duration(ms) * time.Millisecond
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	resp, err := s.small.local.CallLocal(ctx, gatewayv1.ArrayService_ReadSlabSmall_FullMethodName, req.GetRead(), len(frame),
		func(resp any) int { return proto.Size(resp.(*gatewayv1.ReadSlabSmallResponse)) },
		func(ctx context.Context, req any) (any, error) {
			return s.ReadSlabSmall(ctx, req.(*gatewayv1.ReadSlabSmallRequest))
		})
	if err != nil {
		return fail(err)
	}
	r, ok := resp.(*gatewayv1.ReadSlabSmallResponse)
	if !ok || r == nil {
		return fail(status.Error(codes.Internal, "small reads: internal error (server bug): the read returned no response"))
	}
	return &gatewayv1.SmallReadsResponse{Read: r}
}
