package rpc

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/base"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/dns"
	"google.golang.org/grpc/serviceconfig"
)

// DefaultRefresh is how often a worker pool's target is resolved again
// (DNS names looked up, a file of addresses read again), so that workers
// added behind it are found while the existing ones stay healthy: gRPC
// itself resolves again only when a connection fails.
const DefaultRefresh = 5 * time.Second

// poolBalancer is the name of the balancer DialPool installs: gRPC's base
// balancer (a subconnection per address, health-checked) with a picker
// that places a call on the worker its context names (Pool.On), else on
// the ready worker with the fewest calls open (ties in turn).
const poolBalancer = "zarrgate_workers"

func init() {
	balancer.Register(poolBuilder{})
	// gRPC's DNS resolver answers a request to resolve again at most every
	// 30 s by default; a pool asks every Refresh (DefaultRefresh), and
	// this bound only guards against a storm of requests. It must be set
	// before any resolution, hence here.
	dns.SetMinResolutionInterval(time.Second)
}

// pools are the pools by id, for the balancer of each connection to find
// its own (named in the connection's service config). A pool stays for the
// life of the process: a connection's balancer is built again when it
// leaves idleness, and a process dials a pool per tier.
var (
	pools  sync.Map // uint64 → *Pool
	poolID atomic.Uint64
)

// Pool is the set of workers behind a connection DialPool made: which of
// them are ready now (connected, and their health service serving), and a
// way to place a call on one of them. A client that keeps long-lived
// streams (the codec tier's Process streams) follows it, so that its
// streams cover every ready worker, including one added while it works,
// and leave a worker that is removed or drains. Safe for concurrent use.
type Pool struct {
	id      uint64
	refresh time.Duration

	mu      sync.Mutex
	ready   []string // sorted
	version uint64
}

// Ready returns the addresses of the ready workers, sorted, and a version
// that changes whenever they do.
func (p *Pool) Ready() ([]string, uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ready, p.version
}

func (p *Pool) setReady(addrs []string) {
	slices.Sort(addrs)
	p.mu.Lock()
	defer p.mu.Unlock()
	if !slices.Equal(addrs, p.ready) {
		p.ready = addrs
		p.version++
	}
}

// pin is a call's wish to go to one worker, and where it went.
type pin struct {
	want string
	got  atomic.Pointer[string]
}

type pinKey struct{}

// On returns ctx for a call to be placed on the worker at addr (one of
// Ready's addresses), and a function that tells, once the call has
// started, which worker it was placed on: addr, or another ready worker
// when addr was no longer ready ("" before the call is placed).
func (p *Pool) On(ctx context.Context, addr string) (context.Context, func() string) {
	pn := &pin{want: addr}
	return context.WithValue(ctx, pinKey{}, pn), func() string {
		if g := pn.got.Load(); g != nil {
			return *g
		}
		return ""
	}
}

// poolConfig names the pool a connection's balancer serves.
type poolConfig struct {
	serviceconfig.LoadBalancingConfig
	Pool uint64 `json:"pool"`
}

type poolBuilder struct{}

func (poolBuilder) Name() string { return poolBalancer }

func (poolBuilder) ParseConfig(js json.RawMessage) (serviceconfig.LoadBalancingConfig, error) {
	var c poolConfig
	if err := json.Unmarshal(js, &c); err != nil {
		return nil, fmt.Errorf("%s: %v", poolBalancer, err)
	}
	return &c, nil
}

func (poolBuilder) Build(cc balancer.ClientConn, opts balancer.BuildOptions) balancer.Balancer {
	pb := &pickerBuilder{open: make(map[balancer.SubConn]*atomic.Int64)}
	b := &refreshing{pb: pb, cc: cc, stop: make(chan struct{})}
	b.Balancer = base.NewBalancerBuilder(poolBalancer, pb, base.Config{HealthCheck: true}).Build(failing{cc, pb}, opts)
	return b
}

// failing is the base balancer's view of the connection: when every
// worker has failed, the base balancer builds no picker (it fails calls
// itself), so the pool is told here that none is ready.
type failing struct {
	balancer.ClientConn
	pb *pickerBuilder
}

func (f failing) UpdateState(s balancer.State) {
	if s.ConnectivityState == connectivity.TransientFailure {
		if p := f.pb.pool.Load(); p != nil {
			p.setReady(nil)
		}
	}
	f.ClientConn.UpdateState(s)
}

// refreshing is the base balancer, which also has the target resolved
// again every refresh interval.
type refreshing struct {
	balancer.Balancer
	pb      *pickerBuilder
	cc      balancer.ClientConn
	started bool
	stop    chan struct{}
}

func (b *refreshing) UpdateClientConnState(s balancer.ClientConnState) error {
	if c, ok := s.BalancerConfig.(*poolConfig); ok && b.pb.pool.Load() == nil {
		if p, ok := pools.Load(c.Pool); ok {
			b.pb.pool.Store(p.(*Pool))
		}
	}
	if p := b.pb.pool.Load(); p != nil && !b.started && p.refresh > 0 {
		b.started = true
		go func() {
			t := time.NewTicker(p.refresh)
			defer t.Stop()
			for {
				select {
				case <-b.stop:
					return
				case <-t.C:
					b.cc.ResolveNow(resolver.ResolveNowOptions{})
				}
			}
		}()
	}
	return b.Balancer.UpdateClientConnState(s)
}

func (b *refreshing) Close() {
	close(b.stop)
	if p := b.pb.pool.Load(); p != nil {
		p.setReady(nil)
	}
	b.Balancer.Close()
}

// pickerBuilder tells the pool which workers are ready and builds the
// picker; it keeps each subconnection's count of open calls across
// pickers. Build is called by the balancer only, one call at a time.
type pickerBuilder struct {
	pool atomic.Pointer[Pool]
	open map[balancer.SubConn]*atomic.Int64
}

func (pb *pickerBuilder) Build(info base.PickerBuildInfo) balancer.Picker {
	p := &picker{byAddr: make(map[string]int, len(info.ReadySCs))}
	for sc, sci := range info.ReadySCs {
		p.byAddr[sci.Address.Addr] = len(p.scs)
		p.scs = append(p.scs, sc)
		p.addrs = append(p.addrs, sci.Address.Addr)
		n := pb.open[sc]
		if n == nil {
			n = new(atomic.Int64)
			pb.open[sc] = n
		}
		p.open = append(p.open, n)
	}
	for sc := range pb.open {
		if _, ok := info.ReadySCs[sc]; !ok {
			delete(pb.open, sc) // its calls' Done still hold the counter
		}
	}
	if pool := pb.pool.Load(); pool != nil {
		pool.setReady(slices.Clone(p.addrs))
	}
	if len(p.scs) == 0 {
		return base.NewErrPicker(balancer.ErrNoSubConnAvailable)
	}
	return p
}

type picker struct {
	scs   []balancer.SubConn
	addrs []string
	open  []*atomic.Int64
	// byAddr finds a ready worker's index by its address.
	byAddr map[string]int
	next   atomic.Uint32
}

// Pick places a call on the worker its context names when that one is
// ready, else on the ready worker with the fewest calls open, starting
// the search at the next worker in turn so that ties are spread.
func (p *picker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	pn, _ := info.Ctx.Value(pinKey{}).(*pin)
	i, ok := 0, false
	if pn != nil {
		i, ok = p.byAddr[pn.want]
	}
	if !ok {
		start := int(p.next.Add(1)) % len(p.scs)
		i = start
		least := p.open[i].Load()
		for k := 1; k < len(p.scs) && least > 0; k++ {
			j := (start + k) % len(p.scs)
			if n := p.open[j].Load(); n < least {
				i, least = j, n
			}
		}
	}
	if pn != nil {
		pn.got.Store(&p.addrs[i])
	}
	n := p.open[i]
	n.Add(1)
	return balancer.PickResult{SubConn: p.scs[i], Done: func(balancer.DoneInfo) { n.Add(-1) }}, nil
}
