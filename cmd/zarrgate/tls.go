// TLS of the serving commands (--tls-cert, --tls-key, --client-ca,
// --insecure), of the gateway's connections to its workers (--peer-*), and
// of the client commands (--tls-ca, --tls-cert, --tls-key, --tls).

package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"google.golang.org/grpc"

	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/internal/security"
	"github.com/zarrgate/zarrgate/internal/tlsconf"
)

// listenTLSFlags are a listener's TLS flags.
type listenTLSFlags struct {
	cert, key, clientCA *string
	insecure            *bool
}

func addListenTLSFlags(fs *flag.FlagSet) listenTLSFlags {
	f := listenTLSFlags{
		cert:     fs.String("tls-cert", "", "serve TLS (1.2 or newer) with this PEM certificate (chain); reloaded when the file changes"),
		key:      fs.String("tls-key", "", "the PEM private key of --tls-cert; reloaded when the file changes"),
		clientCA: fs.String("client-ca", "", "mTLS: require client certificates that verify against this PEM CA bundle (needs --tls-cert); reloaded when the file changes"),
		insecure: fs.Bool("insecure", false, "allow plaintext on an address other hosts can reach (without TLS, only loopback addresses and unix sockets are served)"),
	}
	afterParse(fs, func() error {
		if (*f.cert == "") != (*f.key == "") {
			return usageError{errors.New("--tls-cert and --tls-key go together")}
		}
		if *f.clientCA != "" && *f.cert == "" {
			return usageError{errors.New("--client-ca needs --tls-cert and --tls-key: client certificates are checked in a TLS handshake")}
		}
		return nil
	})
	return f
}

// checkPlaintext refuses serving plaintext at the --listen address spec
// when it may reach other hosts, unless --insecure.
func (f listenTLSFlags) checkPlaintext(spec string) error {
	if *f.cert != "" || *f.insecure || !mayReachOthers(spec) {
		return nil
	}
	return usageError{fmt.Errorf("--listen %s reaches other hosts: serve it with TLS (--tls-cert and --tls-key), or pass --insecure to serve plaintext anyway", spec)}
}

// mayReachOthers reports whether a --listen address may take connections
// from other hosts: a TCP address whose host is empty, unspecified
// (0.0.0.0, ::), not a loopback address, or a name that does not resolve
// to loopback addresses only. Unix sockets do not.
func mayReachOthers(spec string) bool {
	if strings.HasPrefix(spec, "unix:") {
		return false
	}
	host, _, err := net.SplitHostPort(spec)
	if err != nil {
		return false // listen names the error
	}
	if host == "localhost" {
		return false
	}
	if ip := net.ParseIP(host); ip != nil {
		return !ip.IsLoopback()
	}
	if host == "" {
		return true
	}
	ips, err := net.LookupIP(host)
	if err != nil || len(ips) == 0 {
		return true
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return true
		}
	}
	return false
}

// serverOptions returns the options that serve lis with TLS, or none for
// plaintext, which is refused on an address other hosts can reach unless
// --insecure says so (and then logged as a warning).
func (f listenTLSFlags) serverOptions(logger *slog.Logger, lis net.Listener) ([]grpc.ServerOption, []any, error) {
	if *f.cert == "" {
		if rpc.IsLoopback(lis.Addr()) {
			return nil, []any{"tls", false}, nil
		}
		if !*f.insecure {
			return nil, nil, usageError{fmt.Errorf("--listen address %s reaches other hosts: serve it with TLS (--tls-cert and --tls-key), or pass --insecure to serve plaintext anyway", lis.Addr())}
		}
		logger.Warn("serving plaintext on an address other hosts can reach (--insecure): anyone who reaches it can read and write the data unencrypted", "addr", lis.Addr().String())
		return nil, []any{"tls", false, "insecure", true}, nil
	}
	opts, err := security.TLS{CertFile: *f.cert, KeyFile: *f.key, ClientCAFile: *f.clientCA}.ServerOptions(logger)
	if err != nil {
		return nil, nil, usageError{fmt.Errorf("--tls-cert/--tls-key/--client-ca: %w", err)}
	}
	return opts, []any{"tls", true, "mtls", *f.clientCA != ""}, nil
}

// peerTLSFlags adds the gateway's flags for its connections to workers and
// returns their configuration once parsed: nil for plaintext.
func peerTLSFlags(fs *flag.FlagSet) func(*slog.Logger) (func() *tls.Config, error) {
	ca := fs.String("peer-ca", "", "dial the store and codec workers with TLS, verifying their certificates against this PEM CA bundle; reloaded when the file changes")
	cert := fs.String("peer-cert", "", "mTLS to the workers: the PEM certificate presented to them (needs --peer-ca); reloaded when the file changes")
	key := fs.String("peer-key", "", "the PEM private key of --peer-cert; reloaded when the file changes")
	name := fs.String("peer-server-name", "", "the name the workers' certificates must hold (default: the host each is dialled at)")
	afterParse(fs, func() error {
		if (*cert == "") != (*key == "") {
			return usageError{errors.New("--peer-cert and --peer-key go together")}
		}
		if *ca == "" && (*cert != "" || *name != "") {
			return usageError{errors.New("--peer-cert, --peer-key and --peer-server-name need --peer-ca (the CA the workers' certificates verify against)")}
		}
		return nil
	})
	return func(logger *slog.Logger) (func() *tls.Config, error) {
		if *ca == "" {
			return nil, nil
		}
		cfg, err := tlsconf.ClientReloading(*ca, *cert, *key, *name, logger)
		if err != nil {
			return nil, usageError{fmt.Errorf("--peer-ca/--peer-cert/--peer-key: %w", err)}
		}
		return cfg, nil
	}
}
