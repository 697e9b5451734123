package rpc

import (
	"time"
)

// OnDrain registers f to run when Shutdown begins, while the server still
// serves: services whose calls live as long as their clients (the codec
// worker's Process streams) tell those clients to finish and leave.
func (s *Server) OnDrain(f func()) {
	s.drainMu.Lock()
	defer s.drainMu.Unlock()
	s.onDrain = append(s.onDrain, f)
}

// Shutdown stops the server in three phases, logging each:
//
//  1. Drain: the health service reports NOT_SERVING for every service and
//     the OnDrain functions run, but calls are still served, new ones
//     included, for delay: clients that balance over health-checked
//     workers (the gateway) stop sending new work here, and load
//     balancers take the address out, while nothing arriving meanwhile
//     fails.
//  2. Stop: the server takes no new calls (HTTP/2 GOAWAY: a client that
//     still picks this server opens its call elsewhere) and waits for the
//     calls in flight, for grace at most.
//  3. Hard stop: what is still running when grace is over is cut.
//
// A close of hard (a second signal) ends the wait of any phase and stops
// at once. Shutdown reports whether every call finished by itself.
func (s *Server) Shutdown(delay, grace time.Duration, hard <-chan struct{}) bool {
	start := time.Now()
	s.logger.Info("draining: reporting NOT_SERVING, still serving while clients move away", "drain_delay", delay, "shutdown_grace", grace)
	s.Health.Shutdown()
	s.drainMu.Lock()
	hooks := s.onDrain
	s.drainMu.Unlock()
	for _, f := range hooks {
		f()
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-hard:
			t.Stop()
			s.logger.Warn("stopping now: asked again during the drain")
			s.Stop()
			s.logger.Warn("stopped: calls still in flight were cut", "took", time.Since(start).Round(time.Millisecond))
			return false
		}
	}
	s.logger.Info("stopping: taking no new calls, finishing calls in flight", "shutdown_grace", grace)
	done := make(chan struct{})
	go func() { s.GracefulStop(); close(done) }()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
		s.logger.Info("stopped: every call finished", "took", time.Since(start).Round(time.Millisecond))
		return true
	case <-t.C:
		s.logger.Warn("shutdown grace over: cutting the calls still in flight", "shutdown_grace", grace)
	case <-hard:
		s.logger.Warn("stopping now: asked again while calls were finishing")
	}
	s.Stop()
	<-done
	s.logger.Warn("stopped: calls still in flight were cut", "took", time.Since(start).Round(time.Millisecond))
	return false
}
