// Package client is the Go client of a zarrgate gateway: groups and arrays,
// typed reads and writes of hyperslabs, streaming block iteration for slabs
// larger than memory, and the raw store.
//
//	c, err := client.Dial(ctx, "127.0.0.1:50051")
//	a, err := c.OpenArray(ctx, "climate/temperature")
//	vals, shape, err := client.Read[float32](ctx, a, client.MustParseSelection("0:10,5:20:2"))
//
// Errors keep their gRPC codes and match the store's sentinels:
// errors.Is(err, storesvc.ErrNotFound) holds for a missing array.
package client

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/retry"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/grpcerr"
	"github.com/zarrgate/zarrgate/internal/retrybudget"
	"github.com/zarrgate/zarrgate/internal/tlsconf"
	"github.com/zarrgate/zarrgate/internal/wire"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/remote"
)

// MaxMessageSize is the largest message the client sends or receives.
const MaxMessageSize = 64 << 20

type options struct {
	tls      *tls.Config
	retries  uint
	backoff  time.Duration
	dialOpts []grpc.DialOption
	shared   *bool
	bulk     *bool
	token    *string
	conns    int
}

// Option configures Dial.
type Option func(*options)

// WithTLS connects with TLS (the default is plaintext, for loopback and
// trusted networks). LoadTLS makes cfg from PEM files: the CA bundle the
// server's certificate verifies against, and for servers that require
// client certificates (mTLS), the client's own.
func WithTLS(cfg *tls.Config) Option { return func(o *options) { o.tls = cfg } }

// LoadTLS returns the TLS configuration that verifies the server against
// the PEM CA bundle caFile (the system's roots when empty) and, with
// certFile and keyFile, presents that PEM certificate and key to servers
// requiring client certificates; they are read again when the files
// change, so a long-lived client follows their rotation. TLS 1.2 is the
// oldest version accepted.
func LoadTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg, err := tlsconf.Client(caFile, certFile, keyFile, "", nil)
	if err != nil {
		return nil, errs.Wrap(errs.InvalidArgument, err, "TLS files")
	}
	return cfg, nil
}

// WithRetries sets how often unary calls other than creations are retried
// when the server is unavailable (default 4), and the first backoff
// (default 100ms, doubling with jitter).
func WithRetries(n uint, backoff time.Duration) Option {
	return func(o *options) { o.retries, o.backoff = n, backoff }
}

// WithSharedMemory turns shared-memory reads on or off. With them, reads
// of at least 256 Ki elements (ReadInto, ReadBytes, Read, Blocks) ask the
// gateway to pass block data through a shared-memory segment instead of
// the socket, 2.4–3.4 times as fast for typed reads; this works when
// client and gateway run on one Linux host as one user, and falls back to
// the socket otherwise. The default is on for loopback and unix://
// addresses, off for others.
func WithSharedMemory(on bool) Option { return func(o *options) { o.shared = &on } }

// WithConnections sets how many HTTP/2 connections the client opens to
// the gateway (default 1). With n > 1, typed reads through the socket
// (ReadInto, ReadBytes, Read; not shared memory, not Blocks or strings)
// of at least 4 Mi elements are split into up to n bands along the first
// dimension, cut at chunk (shard) boundaries, each read by its own
// ReadSlab call on its own connection, so that both ends' HTTP/2 framing
// and socket reads run in parallel. Each band is one call to the gateway:
// the gateway's memory budget bounds them all together, but its fair
// scheduler gives a split read one share of the processors per band.
// Other calls use the first connection.
func WithConnections(n int) Option { return func(o *options) { o.conns = n } }

// WithDialOptions adds raw gRPC dial options.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOpts = append(o.dialOpts, opts...) }
}

// Client is a connection to a zarrgate gateway. It is safe for concurrent
// use.
type Client struct {
	cc     *grpc.ClientConn
	arrays gatewayv1.ArrayServiceClient
	// more connections for split reads (WithConnections), and their
	// ArrayService clients: band i of a split read goes to bands[i].
	more   []*grpc.ClientConn
	bands  []gatewayv1.ArrayServiceClient
	shared atomic.Bool // try ReadSlabShared for large reads
	small  atomic.Bool // try ReadSlabSmall for small reads (small.go)
	maps   mappings    // of the gateway's shared-memory segments
	bulk   *bulkState  // reads over bulk connections (bulk.go)
	smalls *smallPool  // small reads over bulk connections (smallconn.go)
}

// Dial connects to the gateway at addr (host:port or any gRPC target such
// as dns:///name:port). The connection is made lazily; the first call
// reports an unreachable server.
func Dial(ctx context.Context, addr string, opts ...Option) (*Client, error) {
	o := options{retries: 4, backoff: 100 * time.Millisecond}
	for _, opt := range opts {
		opt(&o)
	}
	creds := insecure.NewCredentials()
	hint := &certHint{}
	if o.tls != nil {
		// Large writes (WriteSlab's blocks) leave in one system call per
		// gRPC flush, not one per TLS record (tlsbatch); the hint explains a
		// refused client certificate.
		creds = hint.credentials(o.tls)
	}
	// The client is the one layer that retries its calls to the gateway,
	// within a retry budget of its own (10 % of its calls, plus a floor),
	// and never a call the gateway says it already retried.
	budget := retrybudget.New("gateway "+addr, 0, 0, 0)
	retryOpts := []retry.CallOption{
		retry.WithMax(o.retries),
		retry.WithBackoff(retry.BackoffExponentialWithJitter(o.backoff, 0.2)),
		retry.WithRetriable(func(err error) bool {
			return status.Code(err) == codes.Unavailable && !grpcerr.Retried(err) && budget.Retry()
		}),
	}
	// Inside the retry interceptor: every attempt is a request of the budget.
	count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		budget.Request()
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	dial := append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageSize), grpc.MaxCallSendMsgSize(MaxMessageSize), grpc.ForceCodecV2(wire.Codec)),
		grpc.WithInitialWindowSize(8 << 20),
		grpc.WithInitialConnWindowSize(32 << 20),
		grpc.WithReadBufferSize(256 << 10),
		grpc.WithWriteBufferSize(256 << 10),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		// Streams are not retried blindly: a partly consumed stream cannot be
		// replayed; unary calls are, when the server was unavailable.
		grpc.WithChainUnaryInterceptor(retry.UnaryClientInterceptor(retryOpts...), count),
	}, o.dialOpts...)
	if o.tls != nil {
		// Inside the retries: a call refused for want of a client
		// certificate is Unauthenticated, and not retried.
		dial = append(dial, grpc.WithChainUnaryInterceptor(hint.unary), grpc.WithChainStreamInterceptor(hint.stream))
	}
	if o.token != nil {
		b, err := newBearer(*o.token, addr, o.tls != nil)
		if err != nil {
			return nil, err
		}
		dial = append(dial, grpc.WithPerRPCCredentials(b))
	}
	cc, err := grpc.NewClient(addr, dial...)
	if err != nil {
		return nil, errs.Wrap(errs.InvalidArgument, err, "dial %s", addr)
	}
	c := &Client{cc: cc, arrays: gatewayv1.NewArrayServiceClient(cc)}
	c.small.Store(true)
	c.bulk = &bulkState{on: o.bulk == nil || *o.bulk, host: targetHost(addr), tls: o.tls}
	c.smalls = &smallPool{bulk: c.bulk}
	c.bands = []gatewayv1.ArrayServiceClient{c.arrays}
	for range max(o.conns, 1) - 1 {
		// Each its own connection: grpc.NewClient shares no transport
		// between clients.
		m, err := grpc.NewClient(addr, dial...)
		if err != nil {
			c.Close()
			return nil, errs.Wrap(errs.InvalidArgument, err, "dial %s", addr)
		}
		c.more = append(c.more, m)
		c.bands = append(c.bands, gatewayv1.NewArrayServiceClient(m))
	}
	if o.shared != nil {
		c.shared.Store(*o.shared)
	} else {
		c.shared.Store(isLocal(addr))
	}
	return c, nil
}

// isLocal reports whether addr names this host: a unix socket or a
// loopback address.
func isLocal(addr string) bool {
	if strings.HasPrefix(addr, "unix:") || strings.HasPrefix(addr, "unix-abstract:") {
		return true
	}
	addr = strings.TrimPrefix(addr, "passthrough:///")
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Close closes the connection.
func (c *Client) Close() error {
	c.maps.close()
	c.smalls.close()
	for _, m := range c.more {
		m.Close()
	}
	return c.cc.Close()
}

// Conn is the underlying gRPC connection, for generated stubs.
func (c *Client) Conn() *grpc.ClientConn { return c.cc }

// Store returns the gateway's raw store (StoreService) as a Go store,
// indistinguishable from a local one.
func (c *Client) Store(ctx context.Context) (*storesvc.Portable, error) {
	return remote.New(ctx, c.cc)
}

// noRetry marks calls that must not be repeated blindly.
var noRetry = retry.Disable()
