package rpc

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	_ "google.golang.org/grpc/health" // client-side health checking of workers
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// workerServiceConfig spreads calls over every worker behind a target
// (the pool balancer, pool.go: a call goes to the worker it names, else to
// the ready worker with the fewest calls open), and takes a worker out
// while its health service says it is not serving (and back in when it
// is). It has no retryPolicy: the gateway
// is the one layer that retries calls to its workers, within each tier's
// retry budget (gateway/retry.go); a gRPC retry under it would multiply
// its attempts (5 × 6 per call, before the store's own retries). gRPC's
// transparent retries (a call that never reached a worker) remain.
const workerServiceConfig = `{
  "loadBalancingConfig": [{"zarrgate_workers": {"pool": %d}}],
  "healthCheckConfig": {"serviceName": ""}
}`

var manualSeq atomic.Uint64

// DialWorkers connects to a pool of workers (DialPool, resolved again
// every DefaultRefresh).
func DialWorkers(target string, extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	cc, _, err := DialPool(target, DefaultRefresh, extra...)
	return cc, err
}

// DialPool connects to a pool of workers. target is a comma-separated
// list of host:port addresses; file:///path, a file listing addresses
// (one per line, or separated by commas or spaces; # starts a comment);
// or any gRPC target such as dns:///name:port (a Kubernetes headless
// Service resolves to every pod). The target is resolved again every
// refresh (0: only when a connection fails), so that workers added
// behind a name or to the file are used and removed ones left. Calls wait
// for a ready worker as long as their context allows; pass a Tier's
// DialOptions to bound that wait. The Pool tells which workers are ready.
func DialPool(target string, refresh time.Duration, extra ...grpc.DialOption) (*grpc.ClientConn, *Pool, error) {
	target = strings.TrimSpace(target)
	if target == "" {
		return nil, nil, fmt.Errorf("empty worker target")
	}
	pool := &Pool{id: poolID.Add(1), refresh: refresh}
	pools.Store(pool.id, pool)
	opts := append(DialOptions(), grpc.WithDefaultServiceConfig(fmt.Sprintf(workerServiceConfig, pool.id)),
		// Wait for a ready worker rather than failing while one reconnects;
		// the caller's deadline still bounds the wait.
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true)),
		// Reconnect to a worker that dropped quickly (gRPC's default first
		// backoff is a second).
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 3 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}))
	if path, ok := strings.CutPrefix(target, "file://"); ok {
		r, err := newFileResolver(path)
		if err != nil {
			return nil, nil, err
		}
		opts = append(opts, grpc.WithResolvers(r))
		target = r.Scheme() + ":///workers"
	} else if !strings.Contains(target, "://") {
		addrs := parseAddrs(target)
		r := manual.NewBuilderWithScheme(fmt.Sprintf("zarrgate-workers-%d", manualSeq.Add(1)))
		r.InitialState(resolver.State{Addresses: addrs})
		opts = append(opts, grpc.WithResolvers(r))
		target = r.Scheme() + ":///workers"
	}
	cc, err := grpc.NewClient(target, append(opts, extra...)...)
	if err != nil {
		return nil, nil, err
	}
	return cc, pool, nil
}

// parseAddrs reads a list of worker addresses: separated by commas, spaces
// or lines, # to the end of a line a comment. The address is also the name
// a worker's TLS certificate must hold (the target's own name is made up).
func parseAddrs(list string) []resolver.Address {
	var addrs []resolver.Address
	for _, line := range strings.Split(list, "\n") {
		line, _, _ = strings.Cut(line, "#")
		for _, a := range strings.FieldsFunc(line, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\r' }) {
			addrs = append(addrs, resolver.Address{Addr: a, ServerName: a})
		}
	}
	return addrs
}

// fileResolver resolves to the addresses listed in a file, read again
// whenever gRPC asks (the pool's refresh, a failed connection). A file
// that cannot be read, or lists no address, leaves the last list in place.
type fileResolver struct {
	*manual.Resolver
	path string
	mu   sync.Mutex
	last []resolver.Address
}

func newFileResolver(path string) (*fileResolver, error) {
	if path == "" || path[0] != '/' {
		return nil, fmt.Errorf("worker list file:///%s: want an absolute path (file:///dir/file)", path)
	}
	fr := &fileResolver{Resolver: manual.NewBuilderWithScheme(fmt.Sprintf("zarrgate-workers-%d", manualSeq.Add(1))), path: path}
	addrs, err := fr.read()
	if err != nil {
		return nil, err
	}
	fr.last = addrs
	fr.InitialState(resolver.State{Addresses: addrs})
	fr.ResolveNowCallback = func(resolver.ResolveNowOptions) {
		// Not under the callback: the manual resolver's UpdateState
		// may call back into the balancer.
		go fr.reread()
	}
	return fr, nil
}

func (fr *fileResolver) read() ([]resolver.Address, error) {
	b, err := os.ReadFile(fr.path)
	if err != nil {
		return nil, fmt.Errorf("worker list: %w", err)
	}
	addrs := parseAddrs(string(b))
	if len(addrs) == 0 {
		return nil, fmt.Errorf("worker list %s: no address", fr.path)
	}
	return addrs, nil
}

func (fr *fileResolver) reread() {
	addrs, err := fr.read()
	if err != nil {
		return
	}
	fr.mu.Lock()
	defer fr.mu.Unlock()
	if slices.EqualFunc(addrs, fr.last, func(a, b resolver.Address) bool { return a.Addr == b.Addr }) {
		return
	}
	fr.last = addrs
	fr.UpdateState(resolver.State{Addresses: addrs})
}
