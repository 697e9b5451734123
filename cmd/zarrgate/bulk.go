// ReadSlab's bulk listener (--bulk-listen, --bulk-advertise) of the
// commands that serve the gateway.

package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"github.com/zarrgate/zarrgate/internal/bulk"
	"github.com/zarrgate/zarrgate/internal/metrics"
	"github.com/zarrgate/zarrgate/internal/tlsconf"
)

// bulkFlags are the bulk listener's flags.
type bulkFlags struct {
	listen, advertise *string
	tls               listenTLSFlags
	grpcListen        *string
}

// addBulkFlags adds --bulk-listen and --bulk-advertise. def is the
// default of --bulk-listen: "off" (gateway) or "auto" (serve).
func addBulkFlags(fs *flag.FlagSet, sf serverFlags, def string) bulkFlags {
	f := bulkFlags{
		listen: fs.String("bulk-listen", def, "serve ReadSlab's blocks over a bulk connection (plain TCP, TLS as on --listen; cheaper per byte than the gRPC stream) at host:port, for clients that ask for it (the Go client does by default, and falls back to the stream when it cannot connect); "+
			"off: none; auto: the --listen host with a free port when --listen is a loopback TCP address, else off; another host needs TLS or --insecure"),
		advertise:  fs.String("bulk-advertise", "", "the host the bulk listener's offers name (behind NAT or a proxy); empty: clients connect to the host they reached --listen by"),
		tls:        sf.tls,
		grpcListen: sf.listen,
	}
	afterParse(fs, func() error {
		addr, err := f.addr()
		if err != nil || addr == "" {
			return err
		}
		if *f.tls.cert == "" && !*f.tls.insecure && mayReachOthers(addr) {
			return usageError{fmt.Errorf("--bulk-listen %s reaches other hosts: serve it with TLS (--tls-cert and --tls-key), or pass --insecure to serve plaintext anyway", addr)}
		}
		return nil
	})
	return f
}

// addr is the address to listen on, "" for none.
func (f bulkFlags) addr() (string, error) {
	switch spec := *f.listen; spec {
	case "", "off":
		return "", nil
	case "auto":
		// Only on a loopback --listen: there a client reaches any port of
		// the host, while a free port on an address other hosts reach may
		// well be firewalled, costing each client a failed connection
		// (up to its connect timeout) before it falls back to the stream.
		if strings.HasPrefix(*f.grpcListen, "unix:") || mayReachOthers(*f.grpcListen) {
			return "", nil
		}
		host, _, err := net.SplitHostPort(*f.grpcListen)
		if err != nil {
			return "", nil // --listen names its error
		}
		return net.JoinHostPort(host, "0"), nil
	default:
		if _, _, err := net.SplitHostPort(spec); err != nil {
			return "", usageError{fmt.Errorf("--bulk-listen %q: want host:port, off or auto", spec)}
		}
		return spec, nil
	}
}

// start opens the bulk listener (nil when off), with the gRPC listener's
// TLS, and exports its counts to reg. Its address is logged as
// bulk_listen, not addr: scripts take the first addr= of the log for the
// gRPC listener's.
func (f bulkFlags) start(logger *slog.Logger, reg *metrics.Registry) (*bulk.Listener, error) {
	addr, err := f.addr()
	if err != nil || addr == "" {
		return nil, err
	}
	cfg := bulk.Config{Advertise: *f.advertise, Logger: logger}
	if *f.tls.cert != "" {
		// No ALPN: clients of the bulk protocol may offer their gRPC
		// configuration's "h2", or nothing.
		if cfg.TLS, err = tlsconf.Server(*f.tls.cert, *f.tls.key, *f.tls.clientCA, logger); err != nil {
			return nil, usageError{fmt.Errorf("--tls-cert/--tls-key/--client-ca: %w", err)}
		}
	}
	l, err := bulk.Listen(addr, cfg)
	if err != nil {
		return nil, errors.New(strings.Replace(err.Error(), "bulk listener", "--bulk-listen", 1))
	}
	if reg != nil {
		reg.Bulk(l)
	}
	logger.Info("bulk listener", "bulk_listen", l.Addr().String(), "tls", cfg.TLS != nil, "mtls", *f.tls.clientCA != "", "advertise", *f.advertise)
	return l, nil
}
