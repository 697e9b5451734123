package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/zarrgate/zarrgate/gateway"
	"github.com/zarrgate/zarrgate/gateway/httpslab"
	"github.com/zarrgate/zarrgate/internal/httpapi"
	"github.com/zarrgate/zarrgate/internal/security"
	"github.com/zarrgate/zarrgate/internal/tlsconf"
	"github.com/zarrgate/zarrgate/internal/webui"
	"github.com/zarrgate/zarrgate/storesvc"
)

// httpFlags are the flags of the store over HTTP (serve and gateway:
// internal/httpapi, docs/http.md).
type httpFlags struct {
	listen, cors, cacheControl *string
	writes, consolidate        *bool
	maxBody                    *int64
	// store is the store to serve, set by the command's register
	// function (the gateway's raw store, which drops cached metadata
	// after writes).
	store storesvc.Store
	// gw, set with store, serves the slab endpoint (/slab/) and the
	// browser view (/ui/) beside it: the gRPC ArrayService's gateway, so
	// that limits, memory budget and metadata cache are shared.
	gw *gateway.Gateway
}

func addHTTPFlags(fs *flag.FlagSet, tlsf listenTLSFlags) *httpFlags {
	f := &httpFlags{
		listen:       fs.String("http-listen", "", "also serve the store over HTTP at host:port (GET/HEAD /zarr/<key> with ranges, for zarrita.js, fsspec, tensorstore: docs/http.md); a bare :port is loopback; off by default; TLS, authentication and the policy as on --listen; another host needs TLS or --insecure"),
		cors:         fs.String("http-cors-origins", "", "comma-separated origins browsers may read the HTTP store from (* for any); empty: no CORS headers"),
		cacheControl: fs.String("http-cache-control", "", "Cache-Control header of values served over HTTP (e.g. \"public, max-age=60\"); empty: none"),
		writes:       fs.Bool("http-writes", false, "allow PUT and DELETE over HTTP (conditional with If-Match / If-None-Match: *), still subject to --policy and --read-only"),
		consolidate:  fs.Bool("http-consolidate", false, "serve every group's zarr.json over HTTP with consolidated metadata describing the nodes below it, so that readers that cannot list (zarr-python's open_group over HTTP) find them; costs a listing of the group's keys per request"),
		maxBody:      sizeFlag(fs, "http-max-body-bytes", httpapi.DefaultMaxBodyBytes, "largest body of an HTTP PUT"),
	}
	afterParse(fs, func() error {
		if *f.listen == "" {
			return nil
		}
		if *f.maxBody <= 0 {
			return usageError{errors.New("--http-max-body-bytes must be positive")}
		}
		addr, err := httpAddr(*f.listen)
		if err != nil {
			return err
		}
		if *tlsf.cert == "" && !*tlsf.insecure && mayReachOthers(addr) {
			return usageError{fmt.Errorf("--http-listen %s reaches other hosts: serve it with TLS (--tls-cert and --tls-key), or pass --insecure to serve plaintext anyway", addr)}
		}
		return nil
	})
	return f
}

func httpAddr(spec string) (string, error) {
	host, port, err := net.SplitHostPort(spec)
	if err != nil {
		return "", usageError{fmt.Errorf("--http-listen %q: want host:port or :port", spec)}
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// startHTTP serves the store over HTTP when --http-listen is set, with
// the server's TLS and security stack. When ctx is done it shuts down as
// the gRPC server does: it keeps serving for drainDelay, then stops taking
// requests and gives those in flight grace to finish. The returned wait
// blocks until then (or, when the gRPC server stopped on its own, closes
// the endpoint at once).
func (f serverFlags) startHTTP(ctx context.Context, logger *slog.Logger, st *security.Stack, drainDelay, grace time.Duration) (wait func(), err error) {
	h := f.http
	if h == nil || *h.listen == "" {
		return func() {}, nil
	}
	if h.store == nil {
		return nil, errors.New("--http-listen: this command has no store to serve")
	}
	addr, err := httpAddr(*h.listen)
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--http-listen %s: %w", addr, err)
	}
	scheme := "http"
	if *f.tls.cert != "" {
		cfg, err := tlsconf.Server(*f.tls.cert, *f.tls.key, *f.tls.clientCA, logger, "http/1.1")
		if err != nil {
			lis.Close()
			return nil, usageError{fmt.Errorf("--tls-cert/--tls-key: %w", err)}
		}
		lis, scheme = tlsListener(lis, cfg), "https"
	} else if mayReachOthers(addr) {
		logger.Warn("serving the store over HTTP in plaintext on an address other hosts can reach (--insecure)", "addr", lis.Addr().String())
	}
	var origins []string
	for o := range strings.SplitSeq(*h.cors, ",") {
		if o = strings.TrimSpace(o); o != "" {
			origins = append(origins, o)
		}
	}
	api := httpapi.New(h.store, httpapi.Options{
		CORSOrigins:       origins,
		CacheControl:      *h.cacheControl,
		Writes:            *h.writes,
		ConsolidateGroups: *h.consolidate,
		Authenticator:     st.Authenticator,
		Policy:            st.Policy,
		Audit:             st.Audit,
		MaxBodyBytes:      *h.maxBody,
		Logger:            logger,
	})
	if h.gw != nil {
		slab := httpslab.Handler(h.gw, httpslab.Options{Authorize: api.Authorize("GET /slab")})
		api.Mount("/slab/", http.StripPrefix("/slab", slab))
		ui := webui.Handler(h.gw, webui.Options{Authorize: api.Authorize("GET /ui")})
		// The page's own files (HTML, script, style: no data) need no
		// credentials, so that a browser can load it and then send a
		// token with the data requests under /ui/api/.
		api.MountPublic("/ui/", http.StripPrefix("/ui", ui), webui.Public)
	}
	srv := httpapi.NewHTTPServer(api, logger)
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("HTTP store endpoint stopped", "error", err)
		}
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		time.Sleep(drainDelay)
		sctx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		if srv.Shutdown(sctx) != nil {
			srv.Close()
		}
	}()
	logger.Info("HTTP store endpoint up", "http_url", scheme+"://"+lis.Addr().String()+httpapi.Prefix, "writes", *h.writes, "cors_origins", origins)
	return func() {
		if ctx.Err() == nil {
			srv.Close()
			return
		}
		<-done
	}, nil
}
