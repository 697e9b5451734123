package rpc

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/zarrgate/zarrgate/internal/tlsbatch"
)

// DefaultTierWait is how long a call waits for a ready worker of a tier
// that has none before it fails with Unavailable.
const DefaultTierWait = 5 * time.Second

// tierWarnEvery spaces out the warnings of a tier that stays down.
const tierWarnEvery = 10 * time.Second

// Tier guards the calls to one pool of workers (the store tier, the codec
// tier): a call made while no worker is ready waits for one at most Wait,
// counted from when the tier lost its last ready worker, then fails with
// Unavailable naming the tier and its target, and the failure is logged as
// a warning. So a gateway whose workers are down answers within Wait
// instead of hanging until they come back, and calls made after the tier
// has been down for Wait fail at once (a caller that retries does not wait
// Wait again per attempt).
type Tier struct {
	Name, Target string
	Wait         time.Duration
	Logger       *slog.Logger
	// TLS, when set, makes the configuration each connection to the
	// tier's workers is dialled with (tlsconf.ClientReloading: the CA
	// their certificates must verify against, the certificate presented
	// to them, both reloaded when their files change); nil dials
	// plaintext. A call failing for want of a ready worker names the last
	// failed handshake.
	TLS func() *tls.Config

	handshakes *lastErr

	once sync.Once
	cc   *grpc.ClientConn // set by Watch, for Ready
	mu   sync.Mutex
	// downSince is when the connection left Ready (zero while ready or
	// idle: an idle connection is not down, it connects on the next call).
	downSince time.Time
	// failed counts calls failed since the last warning; warned is when
	// that was.
	failed int
	warned time.Time

	retries atomic.Uint64
}

// Retries is how many calls to the tier's workers gRPC itself made again:
// transparent retries (the call never reached a worker: it was placed on
// a connection the worker had just closed with GOAWAY); the service
// config has no retry policy (the gateway is the one layer that retries,
// within its budget). Each is logged as a warning. The gateway's own retries of failed calls
// are not counted here (they are new calls, logged by the gateway).
func (t *Tier) Retries() uint64 { return t.retries.Load() }

// attemptsKey carries a call's *callAttempts from the Tier's interceptors
// to its stats handler, which sees every attempt of the call.
type attemptsKey struct{}

type callAttempts struct {
	method string
	n      atomic.Int32
}

// attempts is the stats handler that counts the attempts of each call.
type attempts struct{ t *Tier }

func (attempts) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (attempts) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (attempts) HandleConn(context.Context, stats.ConnStats) {}

func (a attempts) HandleRPC(ctx context.Context, s stats.RPCStats) {
	b, ok := s.(*stats.Begin)
	if !ok || !b.Client {
		return
	}
	ca, _ := ctx.Value(attemptsKey{}).(*callAttempts)
	if ca == nil {
		return
	}
	if n := ca.n.Add(1); n > 1 {
		a.t.retries.Add(1)
		a.t.Logger.WarnContext(ctx, "gRPC retried a call to a worker", "tier", a.t.Name, "method", ca.method,
			"attempt", n, "transparent", b.IsTransparentRetryAttempt)
	}
}

// DialOptions are the options that install the guard on a connection,
// for DialWorkers.
func (t *Tier) DialOptions() []grpc.DialOption {
	opts := []grpc.DialOption{grpc.WithChainUnaryInterceptor(t.unary), grpc.WithChainStreamInterceptor(t.stream),
		grpc.WithStatsHandler(attempts{t})}
	if t.TLS != nil {
		t.handshakes = &lastErr{}
		cfg := t.TLS()
		creds := &handshakeErrors{TransportCredentials: tlsbatch.Credentials(cfg), config: t.TLS, lastErr: t.handshakes, serverName: cfg.ServerName}
		opts = append(opts, grpc.WithTransportCredentials(creds))
	}
	return opts
}

func (t *Tier) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if err := t.ready(ctx, cc); err != nil {
		return err
	}
	ctx = context.WithValue(ctx, attemptsKey{}, &callAttempts{method: method})
	// A worker is ready: fail fast if it goes away before the call is
	// placed (gRPC retries reads on Unavailable, callers retry too), rather
	// than wait unboundedly for the next one.
	return invoker(ctx, method, req, reply, cc, append(opts, grpc.WaitForReady(false))...)
}

func (t *Tier) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if err := t.ready(ctx, cc); err != nil {
		return nil, err
	}
	ctx = context.WithValue(ctx, attemptsKey{}, &callAttempts{method: method})
	return streamer(ctx, desc, cc, method, append(opts, grpc.WaitForReady(false))...)
}

// watch follows the connection's state, noting when it leaves Ready, until
// the connection is closed.
func (t *Tier) watch(cc *grpc.ClientConn) {
	for {
		s := cc.GetState()
		t.mu.Lock()
		switch s {
		case connectivity.Ready, connectivity.Idle:
			if !t.warned.IsZero() {
				t.Logger.Info("worker tier ready again", "tier", t.Name, "target", t.Target)
			}
			t.downSince, t.failed, t.warned = time.Time{}, 0, time.Time{}
		default:
			if t.downSince.IsZero() {
				t.downSince = time.Now()
			}
		}
		t.mu.Unlock()
		if s == connectivity.Shutdown {
			return
		}
		cc.WaitForStateChange(context.Background(), s)
	}
}

// ready returns nil once the connection has a ready worker, or Unavailable
// when the tier has had none for Wait (or the context's error first).
func (t *Tier) ready(ctx context.Context, cc *grpc.ClientConn) error {
	t.once.Do(func() {
		// The first state is noted before any call waits on it.
		t.mu.Lock()
		if s := cc.GetState(); s != connectivity.Ready && s != connectivity.Idle {
			t.downSince = time.Now()
		}
		t.mu.Unlock()
		go t.watch(cc)
	})
	for {
		s := cc.GetState()
		switch s {
		case connectivity.Ready:
			return nil
		case connectivity.Idle:
			cc.Connect()
		case connectivity.Shutdown:
			return status.Errorf(codes.Unavailable, "%s tier %s: connection closed", t.Name, t.Target)
		}
		t.mu.Lock()
		since := t.downSince
		t.mu.Unlock()
		if since.IsZero() {
			since = time.Now() // Idle or just left Ready: the watcher notes it in a moment
		}
		wctx, cancel := context.WithDeadline(ctx, since.Add(t.Wait))
		changed := cc.WaitForStateChange(wctx, s)
		cancel()
		if changed {
			continue
		}
		if err := ctx.Err(); err != nil {
			return status.FromContextError(err).Err()
		}
		if cc.GetState() == connectivity.Ready {
			return nil
		}
		return t.fail(ctx)
	}
}

// fail logs (at most every tierWarnEvery) and returns the Unavailable
// error of a call that found no ready worker.
func (t *Tier) fail(ctx context.Context) error {
	t.mu.Lock()
	t.failed++
	var n int
	var down time.Duration
	if time.Since(t.warned) >= tierWarnEvery {
		n, t.failed, t.warned = t.failed, 0, time.Now()
		down = time.Since(t.downSince).Round(time.Millisecond)
	}
	since := t.downSince
	t.mu.Unlock()
	why := ""
	hsErr := t.handshakes.last(since.Add(-t.Wait))
	if hsErr != nil {
		why = fmt.Sprintf(": TLS handshake with a worker failed: %v", hsErr)
	}
	if n > 0 {
		attrs := []any{"tier", t.Name, "target", t.Target, "wait", t.Wait, "down_for", down, "failed_calls", n}
		if hsErr != nil {
			attrs = append(attrs, "tls_error", hsErr)
		}
		t.Logger.WarnContext(ctx, "no ready worker: failing calls", attrs...)
	}
	return status.Errorf(codes.Unavailable, "no ready %s worker at %s after %v%s", t.Name, t.Target, t.Wait, why)
}
