package rpc

import (
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// Watch starts following the tier's connection at once, rather than at
// its first call, and leaves the idle state, so that Ready reflects the
// workers from the start (a readiness probe asks before any call). cc is
// the connection DialWorkers made with the tier's DialOptions.
func (t *Tier) Watch(cc *grpc.ClientConn) {
	t.mu.Lock()
	t.cc = cc
	t.mu.Unlock()
	cc.Connect()
	t.once.Do(func() {
		t.mu.Lock()
		if s := cc.GetState(); s != connectivity.Ready && s != connectivity.Idle {
			t.downSince = time.Now()
		}
		t.mu.Unlock()
		go t.watch(cc)
	})
}

// Ready returns nil while the tier has a ready worker (the pool balancer
// over health-checked workers is Ready when one is; an idle connection,
// which connects on the next call, is not taken for a down one), else
// why not: for a readiness probe. It needs Watch first.
func (t *Tier) Ready() error {
	t.mu.Lock()
	cc, since := t.cc, t.downSince
	t.mu.Unlock()
	if cc == nil {
		return fmt.Errorf("%s tier %s: not connected yet", t.Name, t.Target)
	}
	switch s := cc.GetState(); s {
	case connectivity.Ready:
		return nil
	case connectivity.Idle:
		cc.Connect()
		return nil
	default:
		why := fmt.Sprintf("no ready %s worker at %s (%s", t.Name, t.Target, s)
		if !since.IsZero() {
			why += fmt.Sprintf(" for %v", time.Since(since).Round(time.Second))
		}
		if hs := t.handshakes.last(since.Add(-t.Wait)); hs != nil {
			why += fmt.Sprintf("; TLS handshake failed: %v", hs)
		}
		return fmt.Errorf("%s)", why)
	}
}
