// Package rpc builds zarrgate's gRPC servers and client connections in one
// place: interceptors (an access log line per call, request ids, traces, panic
// recovery), health and
// reflection, and the window and message sizes that large streamed values
// need.
package rpc

import (
	"context"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/zarrgate/zarrgate/internal/tracing"
	"github.com/zarrgate/zarrgate/internal/wire"
)

// Sizes tuned for streaming 1 MiB frames on loopback and LAN: a larger
// flow-control window keeps several frames in flight, and large receive
// limits let one GetPartialValues or SetPartialValues carry thousands of
// ranges.
const (
	MaxMessageSize    = 64 << 20
	streamWindow      = 8 << 20
	connWindow        = 32 << 20
	readWriteBufBytes = 256 << 10
)

// Server is a gRPC server with health and reflection registered. Register
// services on the Server itself (it is a grpc.ServiceRegistrar), not on the
// embedded grpc.Server, so that malformed requests get InvalidArgument and
// streams get their default deadline.
type Server struct {
	*grpc.Server
	Health *health.Server

	logger                      *slog.Logger
	streaming                   map[string]bool            // full method names of streaming methods
	streamTimeout, unaryTimeout atomic.Int64               // time.Duration
	chain                       atomic.Pointer[unaryChain] // see CallLocal

	drainMu sync.Mutex
	onDrain []func() // see OnDrain
}

// NewServer returns a server with logging, recovery and error-checking
// interceptors, default deadlines (DefaultStreamTimeout,
// DefaultUnaryTimeout; see SetDefaultTimeouts), the gRPC health service
// (serving) and reflection, so that grpcurl works.
//
// Every call's error leaves as a status with a code that says whose
// mistake it was: malformed requests are InvalidArgument, and what a
// handler returns without a code is Internal and logged as a server bug
// (so is a panic, which is recovered).
func NewServer(logger *slog.Logger, extra ...grpc.ServerOption) *Server {
	s := &Server{logger: logger, streaming: make(map[string]bool)}
	s.SetDefaultTimeouts(DefaultStreamTimeout, DefaultUnaryTimeout)
	recoverOpts := []recovery.Option{recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		return recovered(ctx, logger, p)
	})}
	var opts []grpc.ServerOption
	// Traces first: the access log (observer) takes a traced call's trace
	// id for its request id.
	if h := tracing.ServerHandler(); h != nil {
		opts = append(opts, grpc.StatsHandler(h))
	}
	opts = append(opts,
		// The access log: request ids, bytes, the final status (observe.go).
		grpc.StatsHandler(observer{logger}),
		grpc.ChainUnaryInterceptor(requestIDUnary),
		grpc.ChainStreamInterceptor(requestIDStream),
		// Outermost first: the guard sits next to the handler, so a
		// recovered panic is not taken for a handler's error.
		grpc.ChainUnaryInterceptor(recovery.UnaryServerInterceptor(recoverOpts...), s.unaryGuard),
		grpc.ChainStreamInterceptor(recovery.StreamServerInterceptor(recoverOpts...), s.streamGuard),
		grpc.InTapHandle(s.tap),
		grpc.MaxRecvMsgSize(MaxMessageSize),
		// Large values (chunks, blocks) are sent by reference and received
		// with one copy instead of three. The tap marks every call as using
		// this codec (wire.Send relies on it): an extra option forcing
		// another codec would break the services' sends.
		grpc.ForceServerCodecV2(wire.Codec),
		grpc.InitialWindowSize(streamWindow),
		grpc.InitialConnWindowSize(connWindow),
		grpc.ReadBufferSize(readWriteBufBytes),
		grpc.WriteBufferSize(readWriteBufBytes),
		// Clients (package client) ping idle connections every 30s.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		// Ping idle connections, so that the calls of a client whose host
		// vanished (no FIN, no RST) end within a minute and a half instead
		// of the kernel's two hours.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: time.Minute, Timeout: 20 * time.Second}),
		// Calls run on long-lived workers (one per processor; a call that
		// finds them all busy gets a goroutine of its own, as without
		// them) whose stacks have grown already: a new goroutine per call
		// grew its stack through the interceptors and the engine on every
		// small read (runtime.morestack: 5 % of a random 64×64 read's CPU,
		// issue 20).
		grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))),
	)
	s.Server = grpc.NewServer(append(opts, extra...)...)
	s.Health = health.NewServer()
	healthpb.RegisterHealthServer(s, s.Health)
	reflection.Register(s.Server)
	return s
}

// codeToLevel logs client mistakes at debug level and server trouble as
// warnings or errors.
func codeToLevel(c codes.Code) slog.Level {
	switch c {
	case codes.OK, codes.NotFound, codes.Canceled, codes.InvalidArgument, codes.OutOfRange,
		codes.FailedPrecondition, codes.AlreadyExists, codes.Aborted:
		return slog.LevelDebug
	case codes.Unknown, codes.Internal, codes.DataLoss, codes.Unimplemented:
		return slog.LevelError
	}
	return slog.LevelWarn
}

// DialOptions are the client options matching the server's sizes.
func DialOptions() []grpc.DialOption {
	opts := []grpc.DialOption{
		// The request id of the call a client call is made for goes along.
		grpc.WithChainUnaryInterceptor(forwardUnary),
		grpc.WithChainStreamInterceptor(forwardStream),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageSize), grpc.MaxCallSendMsgSize(MaxMessageSize), grpc.ForceCodecV2(wire.Codec)),
		grpc.WithInitialWindowSize(streamWindow),
		grpc.WithInitialConnWindowSize(connWindow),
		grpc.WithReadBufferSize(readWriteBufBytes),
		grpc.WithWriteBufferSize(readWriteBufBytes),
	}
	if h := tracing.ClientHandler(); h != nil {
		opts = append(opts, grpc.WithStatsHandler(h))
	}
	return opts
}

// Dial connects to addr (host:port or any gRPC target) with DialOptions
// plus extra.
func Dial(addr string, extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, append(DialOptions(), extra...)...)
}
