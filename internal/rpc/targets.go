package rpc

import (
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	_ "google.golang.org/grpc/health" // client-side health checking of workers
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// workerServiceConfig spreads calls over every worker behind a target with
// round_robin, and takes a worker out while its health service says it is
// not serving (and back in when it is). It has no retryPolicy: the gateway
// is the one layer that retries calls to its workers, within each tier's
// retry budget (gateway/retry.go); a gRPC retry under it would multiply
// its attempts (5 × 6 per call, before the store's own retries). gRPC's
// transparent retries (a call that never reached a worker) remain.
const workerServiceConfig = `{
  "loadBalancingConfig": [{"round_robin": {}}],
  "healthCheckConfig": {"serviceName": ""}
}`

var manualSeq atomic.Uint64

// DialWorkers connects to a pool of workers. target is a comma-separated
// list of host:port addresses, or any gRPC target such as
// dns:///name:port (a Kubernetes headless Service resolves to every pod).
// Calls wait for a ready worker as long as their context allows; pass a
// Tier's DialOptions to bound that wait.
func DialWorkers(target string, extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	target = strings.TrimSpace(target)
	if target == "" {
		return nil, fmt.Errorf("empty worker target")
	}
	opts := append(DialOptions(), grpc.WithDefaultServiceConfig(workerServiceConfig),
		// Wait for a ready worker rather than failing while one reconnects;
		// the caller's deadline still bounds the wait.
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true)),
		// Reconnect to a worker that dropped quickly (gRPC's default first
		// backoff is a second).
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 3 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}))
	if !strings.Contains(target, "://") {
		var addrs []resolver.Address
		for _, a := range strings.Split(target, ",") {
			if a = strings.TrimSpace(a); a != "" {
				// The address is also the name a worker's TLS certificate
				// must hold (the target's own name is made up).
				addrs = append(addrs, resolver.Address{Addr: a, ServerName: a})
			}
		}
		r := manual.NewBuilderWithScheme(fmt.Sprintf("zarrgate-workers-%d", manualSeq.Add(1)))
		r.InitialState(resolver.State{Addresses: addrs})
		opts = append(opts, grpc.WithResolvers(r))
		target = r.Scheme() + ":///workers"
	}
	return grpc.NewClient(target, append(opts, extra...)...)
}
