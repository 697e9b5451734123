// The admin endpoint of the serving commands (--admin-listen): Prometheus
// metrics, pprof, liveness, readiness and the version, over HTTP on an
// address of its own.

package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/internal/metrics"
	"github.com/zarrgate/zarrgate/internal/tlsconf"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/storeurl"
)

// Bounds of the admin server: it serves a few small documents, and
// profiles that run for their ?seconds= (30 s by default, so writes get
// a deadline past that).
const (
	adminReadHeaderTimeout = 5 * time.Second
	adminReadTimeout       = 10 * time.Second
	adminWriteTimeout      = 5 * time.Minute // a CPU profile or trace of up to ~4 min
	adminIdleTimeout       = time.Minute
	adminMaxHeaderBytes    = 16 << 10
)

// Phases of a serving process, for /readyz.
const (
	phaseStarting int32 = iota // opening stores, waiting for the store tier
	phaseServing
	phaseDraining // SIGTERM: finishing in-flight calls
)

// adminState is what the admin endpoint reports on: created with the
// server flags (shared by their copies), filled in as the process starts.
type adminState struct {
	listen *string
	reg    *metrics.Registry // nil without --admin-listen: nothing is measured
	phase  atomic.Int32

	mu     sync.Mutex
	checks []func() error // readiness of what serving needs (the gateway's tiers)
}

// addCheck adds a condition of readiness: nil when met, else why not.
func (a *adminState) addCheck(f func() error) {
	a.mu.Lock()
	a.checks = append(a.checks, f)
	a.mu.Unlock()
}

// ready returns nil when the process serves and everything it needs is
// ready, else the reason.
func (a *adminState) ready() error {
	switch a.phase.Load() {
	case phaseStarting:
		return errors.New("starting: not serving yet")
	case phaseDraining:
		return errors.New("draining: shutting down")
	}
	a.mu.Lock()
	checks := a.checks
	a.mu.Unlock()
	var why []error
	for _, c := range checks {
		if err := c(); err != nil {
			why = append(why, err)
		}
	}
	return errors.Join(why...)
}

// adminAddr is the address --admin-listen names: a bare :PORT (or an
// empty host) is loopback, so that turning the endpoint on does not
// expose profiles and metrics to other hosts; 0.0.0.0:PORT says so.
func adminAddr(spec string) (string, error) {
	host, port, err := net.SplitHostPort(spec)
	if err != nil {
		return "", usageError{fmt.Errorf("--admin-listen %q: want host:port or :port", spec)}
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// startAdmin serves the admin endpoint when --admin-listen is set (and
// makes the process's metrics registry), until ctx is done. It runs
// before the process opens its stores or waits for workers, so that
// /healthz answers and /readyz says why it is not ready yet. A
// non-loopback address needs TLS (--tls-cert, --tls-key) or --insecure,
// as the gRPC listener does.
func (f serverFlags) startAdmin(ctx context.Context, logger *slog.Logger) error {
	a := f.admin
	if *a.listen == "" || a.reg != nil {
		return nil
	}
	addr, err := adminAddr(*a.listen)
	if err != nil {
		return err
	}
	if err := f.tls.checkAdminPlaintext(addr); err != nil {
		return err
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--admin-listen %s: %w", addr, err)
	}
	scheme := "http"
	if *f.tls.cert != "" {
		// No client certificates here even with --client-ca: probes and
		// scrapers present none. Protect the port by where it listens.
		cfg, err := tlsconf.Server(*f.tls.cert, *f.tls.key, "", logger, "h2", "http/1.1")
		if err != nil {
			lis.Close()
			return usageError{fmt.Errorf("--tls-cert/--tls-key: %w", err)}
		}
		lis, scheme = tlsListener(lis, cfg), "https"
	} else if mayReachOthers(addr) {
		logger.Warn("serving the admin endpoint in plaintext on an address other hosts can reach (--insecure): anyone who reaches it can read metrics and take profiles", "addr", lis.Addr().String())
	}
	a.reg = metrics.New()
	b := buildOf()
	a.reg.BuildInfo(b.version, b.revision, b.goVersion, codecsvc.Libraries())
	srv := &http.Server{
		Handler:           adminMux(a),
		ReadHeaderTimeout: adminReadHeaderTimeout,
		ReadTimeout:       adminReadTimeout,
		WriteTimeout:      adminWriteTimeout,
		IdleTimeout:       adminIdleTimeout,
		MaxHeaderBytes:    adminMaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("admin endpoint stopped", "error", err)
		}
	}()
	go func() {
		<-ctx.Done()
		// After the gRPC server's drain and grace: /readyz says draining
		// meanwhile (the process exits earlier when its calls finish).
		time.Sleep(*f.drainDelay + *f.shutdownGrace)
		srv.Close()
	}()
	// Logged as a URL, not as addr=: tools that look for the gRPC
	// address in the "serving" line must not take this one.
	logger.Info("admin endpoint up", "admin_url", scheme+"://"+lis.Addr().String())
	return nil
}

// adminMux routes the admin endpoint: its own mux, never
// http.DefaultServeMux, so that nothing else a library registers there is
// served.
func adminMux(a *adminState) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", a.reg.Handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := a.ready(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %v\n", err)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /version", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{"version": versionString(), "go": runtime.Version(), "codecs": codecsvc.Libraries()})
	})
	// pprof, by hand rather than by importing net/http/pprof for its side
	// effect on http.DefaultServeMux. Profiles cost CPU while they run
	// (docs/operations.md): this is an operator's port.
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// checkAdminPlaintext refuses a plaintext admin endpoint at an address
// other hosts can reach, unless --insecure: the rule of --listen.
func (f listenTLSFlags) checkAdminPlaintext(addr string) error {
	if *f.cert != "" || *f.insecure || !mayReachOthers(addr) {
		return nil
	}
	return usageError{fmt.Errorf("--admin-listen %s reaches other hosts: serve it with TLS (--tls-cert and --tls-key), or pass --insecure to serve plaintext anyway", addr)}
}

// tlsListener serves TLS on lis.
func tlsListener(lis net.Listener, cfg *tls.Config) net.Listener { return tls.NewListener(lis, cfg) }

// storeObserverOpts are the portable layer's options that measure a store
// of the named backend into reg (none without metrics).
func storeObserverOpts(reg *metrics.Registry, backend string) []storesvc.Option {
	if reg == nil {
		return nil
	}
	return []storesvc.Option{storesvc.WithObserver(reg.StoreObserver(backend))}
}

// backendOf is the backend label of a store named by root.
func backendOf(root string) string {
	loc, err := storeurl.Parse(root)
	if err != nil {
		return "file"
	}
	return string(loc.Backend)
}
