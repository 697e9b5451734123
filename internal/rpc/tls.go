package rpc

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/zarrgate/zarrgate/internal/tlsbatch"
)

// ServerTLS is the server option that serves over TLS with cfg (from
// tlsconf.Server: it reloads its files), for NewServer's extra options.
func ServerTLS(cfg *tls.Config) grpc.ServerOption {
	return grpc.Creds(tlsbatch.Credentials(cfg))
}

// WithTLS is the dial option that connects over TLS with cfg (from
// tlsconf.Client), for Dial and DialWorkers.
func WithTLS(cfg *tls.Config) grpc.DialOption {
	return grpc.WithTransportCredentials(tlsbatch.Credentials(cfg))
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
	config     func() *tls.Config // each handshake's configuration (its CA bundle may have been reloaded)
	*lastErr                      // shared by clones
	serverName string             // the name workers' certificates hold, if not the address's
}

type lastErr struct {
	mu   sync.Mutex
	err  error
	when time.Time
}

func (h *handshakeErrors) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if h.serverName != "" {
		authority = h.serverName
	}
	creds := h.TransportCredentials
	if h.config != nil {
		creds = tlsbatch.Credentials(h.config())
	}
	c, info, err := creds.ClientHandshake(ctx, authority, raw)
	if err != nil {
		h.set(err)
		return c, info, err
	}
	// With TLS 1.3 the client's handshake is over before the server
	// checks the client's certificate: a refusal comes as an alert on the
	// first read. So the last error is cleared only once the server has
	// sent data (it accepted us), not by a handshake that merely looks
	// done: a reconnect must not erase the reason the previous connection
	// was refused before a call reports it.
	return &alertConn{Conn: c, lastErr: h.lastErr}, info, nil
}

func (h *lastErr) set(err error) {
	h.mu.Lock()
	h.err = err
	if err != nil {
		h.when = time.Now()
	}
	h.mu.Unlock()
}

// alertConn records a TLS alert the server sends (such as "certificate
// required" or "bad certificate") as the tier's last handshake error.
type alertConn struct {
	net.Conn
	*lastErr
	seen atomic.Bool
}

func (c *alertConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	var op *net.OpError
	switch {
	case err != nil && errors.As(err, &op) && op.Op == "remote error" && !c.seen.Swap(true):
		c.set(err)
	case err == nil && n > 0 && !c.seen.Swap(true):
		c.set(nil) // the server accepted the handshake
	}
	return n, err
}

func (h *handshakeErrors) Clone() credentials.TransportCredentials {
	return &handshakeErrors{TransportCredentials: h.TransportCredentials.Clone(), config: h.config, lastErr: h.lastErr, serverName: h.serverName}
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
