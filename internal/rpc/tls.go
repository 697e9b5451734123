package rpc

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// ServerTLS is the server option that serves over TLS with cfg (from
// tlsconf.Server: it reloads its files), for NewServer's extra options.
func ServerTLS(cfg *tls.Config) grpc.ServerOption {
	return grpc.Creds(credentials.NewTLS(cfg))
}

// WithTLS is the dial option that connects over TLS with cfg (from
// tlsconf.Client), for Dial and DialWorkers.
func WithTLS(cfg *tls.Config) grpc.DialOption {
	return grpc.WithTransportCredentials(credentials.NewTLS(cfg))
}

// IsLoopback reports whether a listener only takes connections from this
// host: a unix socket, or TCP bound to a loopback address (not to every
// address, 0.0.0.0 or ::).
func IsLoopback(addr net.Addr) bool {
	switch a := addr.(type) {
	case *net.UnixAddr:
		return true
	case *net.TCPAddr:
		return a.IP.IsLoopback()
	}
	return false
}

// handshakeErrors remembers the last failed TLS handshake with a tier's
// workers, so that a call failing for want of a ready worker says why
// (a worker whose certificate does not verify is not a worker that is
// down).
type handshakeErrors struct {
	credentials.TransportCredentials
	*lastErr // shared by clones
}

type lastErr struct {
	mu   sync.Mutex
	err  error
	when time.Time
}

func (h *handshakeErrors) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c, info, err := h.TransportCredentials.ClientHandshake(ctx, authority, raw)
	h.mu.Lock()
	if err != nil {
		h.err, h.when = err, time.Now()
	} else {
		h.err = nil
	}
	h.mu.Unlock()
	return c, info, err
}

func (h *handshakeErrors) Clone() credentials.TransportCredentials {
	return &handshakeErrors{TransportCredentials: h.TransportCredentials.Clone(), lastErr: h.lastErr}
}

// last returns the last handshake's error if it failed after since.
func (h *lastErr) last(since time.Time) error {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil || h.when.Before(since) {
		return nil
	}
	return h.err
}
