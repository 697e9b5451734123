// Package tlsconf makes the TLS configurations of zarrgate's listeners and
// of its connections between tiers from PEM files, and reloads those files
// when they change, so certificates are rotated without a restart.
//
// A reloading file is looked at again on a handshake at most every
// ReloadEvery: when its modification time or size changed it is read
// anew. A new key pair that does not load (half written, key not
// matching the certificate, garbage) or a CA bundle without a
// certificate is logged as an error and the old one is kept, so a
// rotation caught half way never takes a server down; the next
// handshake after the files are complete picks them up.
//
// No gRPC here: the transport wraps these configurations in its
// credentials (internal/rpc).
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// ReloadEvery is how often, at most, the files are checked for changes.
var ReloadEvery = time.Second

// MinVersion is the oldest TLS version accepted: 1.2 (1.3 is preferred,
// and chosen whenever both sides speak it).
const MinVersion = tls.VersionTLS12

// stamp identifies a file's content cheaply.
type stamp struct {
	mtime time.Time
	size  int64
}

func stat(path string) (stamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return stamp{}, err
	}
	return stamp{fi.ModTime(), fi.Size()}, nil
}

// reloader holds a value loaded from files, loading it again when the
// files' stamps change.
type reloader[T any] struct {
	what   string // for logs: "certificate cert.pem / key.pem"
	files  []string
	load   func() (T, error)
	logger *slog.Logger

	mu      sync.Mutex
	val     T
	stamps  []stamp // of the files val or the last failed load was read at
	checked time.Time
}

func newReloader[T any](what string, logger *slog.Logger, load func() (T, error), files ...string) (*reloader[T], error) {
	if logger == nil {
		logger = slog.Default()
	}
	r := &reloader[T]{what: what, files: files, load: load, logger: logger}
	stamps, err := r.stat()
	if err != nil {
		return nil, err
	}
	v, err := load()
	if err != nil {
		return nil, err
	}
	r.val, r.stamps, r.checked = v, stamps, time.Now()
	return r, nil
}

func (r *reloader[T]) stat() ([]stamp, error) {
	s := make([]stamp, len(r.files))
	for i, f := range r.files {
		var err error
		if s[i], err = stat(f); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func sameStamps(a, b []stamp) bool {
	for i := range a {
		if !a[i].mtime.Equal(b[i].mtime) || a[i].size != b[i].size {
			return false
		}
	}
	return true
}

// get returns the current value, reloading it first if the files changed
// (checked at most every ReloadEvery).
func (r *reloader[T]) get() T {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.checked) < ReloadEvery {
		return r.val
	}
	r.checked = time.Now()
	stamps, err := r.stat()
	if err != nil {
		r.logger.Error("TLS files unreadable; keeping the loaded ones", "files", r.what, "error", err)
		return r.val
	}
	if sameStamps(stamps, r.stamps) {
		return r.val
	}
	// Whether it loads or not, these stamps are dealt with: a failure is
	// logged once per change of the files, not on every handshake.
	r.stamps = stamps
	v, err := r.load()
	if err != nil {
		r.logger.Error("TLS files changed but do not load; keeping the loaded ones", "files", r.what, "error", err)
		return r.val
	}
	r.val = v
	r.logger.Info("TLS files reloaded", "files", r.what)
	return v
}

func loadPair(certFile, keyFile string) func() (*tls.Certificate, error) {
	return func() (*tls.Certificate, error) {
		c, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("key pair %s, %s: %w", certFile, keyFile, err)
		}
		return &c, nil
	}
}

func loadPool(file string) func() (*x509.CertPool, error) {
	return func() (*x509.CertPool, error) {
		pem, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		p := x509.NewCertPool()
		if !p.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA bundle %s: no PEM certificate in it", file)
		}
		return p, nil
	}
}

// LoadPool reads a CA bundle (PEM) once.
func LoadPool(file string) (*x509.CertPool, error) { return loadPool(file)() }

// Server returns the configuration of a TLS listener presenting the key
// pair in certFile and keyFile. With clientCAFile, clients must present a
// certificate that verifies against that bundle (mTLS). All three files
// are reloaded when they change. nextProtos are the ALPN protocols to
// offer ("h2" for gRPC).
func Server(certFile, keyFile, clientCAFile string, logger *slog.Logger, nextProtos ...string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("a TLS listener needs both a certificate and a key file")
	}
	pair, err := newReloader("certificate "+certFile+", key "+keyFile, logger, loadPair(certFile, keyFile), certFile, keyFile)
	if err != nil {
		return nil, err
	}
	var cas *reloader[*x509.CertPool]
	if clientCAFile != "" {
		if cas, err = newReloader("client CA "+clientCAFile, logger, loadPool(clientCAFile), clientCAFile); err != nil {
			return nil, err
		}
	}
	base := &tls.Config{MinVersion: MinVersion, NextProtos: nextProtos}
	if cas != nil {
		base.ClientAuth = tls.RequireAndVerifyClientCert
	}
	cfg := base.Clone()
	// Every handshake gets the current pair and client CAs.
	cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		c := base.Clone()
		c.Certificates = []tls.Certificate{*pair.get()}
		if cas != nil {
			c.ClientCAs = cas.get()
		}
		return c, nil
	}
	return cfg, nil
}

// Client returns the configuration of a connection that verifies the
// server against the CA bundle in caFile (the system's roots when empty)
// and, with certFile and keyFile, presents that key pair (reloaded when
// its files change). serverName, when set, is the name the server's
// certificate must hold instead of the host dialled. The CA bundle is
// read once: ClientReloading reloads it too.
func Client(caFile, certFile, keyFile, serverName string, logger *slog.Logger) (*tls.Config, error) {
	get, err := ClientReloading(caFile, certFile, keyFile, serverName, logger)
	if err != nil {
		return nil, err
	}
	return get(), nil
}

// ClientReloading is Client for connections made again and again (the
// gateway's to its workers): it returns what makes the configuration of
// each new connection, with the CA bundle in force, read again when its
// file changed (checked at most every ReloadEvery, as the key pair). So
// the workers' CA can be rotated without restarting the gateway, as the
// client CA of a listener can (Server). A go-tls client has no hook that
// picks the roots per handshake (GetConfigForClient is the server's), so
// the caller asks for a configuration per connection instead.
func ClientReloading(caFile, certFile, keyFile, serverName string, logger *slog.Logger) (func() *tls.Config, error) {
	base := &tls.Config{MinVersion: MinVersion, ServerName: serverName}
	var cas *reloader[*x509.CertPool]
	if caFile != "" {
		var err error
		if cas, err = newReloader("CA "+caFile, logger, loadPool(caFile), caFile); err != nil {
			return nil, err
		}
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("a client certificate needs both its certificate and its key file")
	}
	if certFile != "" {
		pair, err := newReloader("certificate "+certFile+", key "+keyFile, logger, loadPair(certFile, keyFile), certFile, keyFile)
		if err != nil {
			return nil, err
		}
		base.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return pair.get(), nil
		}
	}
	return func() *tls.Config {
		c := base.Clone()
		if cas != nil {
			c.RootCAs = cas.get()
		}
		return c
	}, nil
}
