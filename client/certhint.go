package client

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"sync"

	"github.com/zarrgate/zarrgate/internal/tlsbatch"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

// A server that requires client certificates (mTLS) refuses a client
// without one with a "certificate required" alert; in TLS 1.3 the client's
// handshake is over before the server checks, so the alert arrives on the
// connection's first read, and what gRPC reports is whatever the
// transport hit first: "write: broken pipe", "connection reset by peer",
// "error reading server preface". certHint notices instead that the server
// asked for a certificate this client does not have, and that the
// connection ended before the server sent anything; calls failing then get
// an error that says what is wrong.

// missingCertMessage is the message of such calls.
const missingCertMessage = "the server requires a client certificate (mTLS) and none was presented: give one (client.LoadTLS with certFile and keyFile; zarrgate's --tls-cert and --tls-key, or ZARRGATE_TLS_CERT and ZARRGATE_TLS_KEY)"

// certHint follows the last connection whose handshake completed. (Not
// the one under way: gRPC reconnects at once after a refused connection,
// and a call that failed on it must still be explained while the next
// handshake runs.)
type certHint struct {
	mu       sync.Mutex
	pending  bool // the handshake under way was asked for a certificate
	asked    bool // the server asked for a certificate and none was sent
	accepted bool // the server then sent data: it took the connection
}

// credentials returns cfg's transport credentials, noting whether the
// server asks for a certificate cfg does not provide. A cfg that provides
// one (Certificates, GetClientCertificate) is used as it is.
func (h *certHint) credentials(cfg *tls.Config) credentials.TransportCredentials {
	if len(cfg.Certificates) > 0 || cfg.GetClientCertificate != nil {
		return tlsbatch.Credentials(cfg)
	}
	cfg = cfg.Clone()
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		h.mu.Lock()
		h.pending = true
		h.mu.Unlock()
		return &tls.Certificate{}, nil // no certificate, as without this function
	}
	return &hintCreds{TransportCredentials: tlsbatch.Credentials(cfg), h: h}
}

// refused reports whether the last connection was one the server asked a
// certificate on and never took.
func (h *certHint) refused() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.asked && !h.accepted
}

type hintCreds struct {
	credentials.TransportCredentials
	h *certHint
}

func (c *hintCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c.h.mu.Lock()
	c.h.pending = false
	c.h.mu.Unlock()
	conn, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, raw)
	if err != nil {
		return conn, info, err
	}
	c.h.mu.Lock()
	c.h.asked, c.h.accepted = c.h.pending, false
	c.h.mu.Unlock()
	return &hintConn{Conn: conn, h: c.h}, info, nil
}

func (c *hintCreds) Clone() credentials.TransportCredentials {
	return &hintCreds{TransportCredentials: c.TransportCredentials.Clone(), h: c.h}
}

// hintConn notes the server's first data.
type hintConn struct {
	net.Conn
	h    *certHint
	seen bool // only the connection's reader goroutine reads
}

func (c *hintConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.seen {
		c.seen = true
		c.h.mu.Lock()
		c.h.accepted = true
		c.h.mu.Unlock()
	}
	return n, err
}

// explain replaces the error of a call that failed on a connection the
// server refused for want of a client certificate.
// The server's alert itself, when the transport got to read it, says so
// too: that is checked as well.
func (h *certHint) explain(err error) error {
	if err == nil || status.Code(err) != codes.Unavailable {
		return err
	}
	if !h.refused() && !strings.Contains(status.Convert(err).Message(), "tls: certificate required") {
		return err
	}
	return status.Errorf(codes.Unauthenticated, "%s (%s)", missingCertMessage, status.Convert(err).Message())
}

func (h *certHint) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return h.explain(invoker(ctx, method, req, reply, cc, opts...))
}

func (h *certHint) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, h.explain(err)
	}
	return &hintStream{ClientStream: s, h: h}, nil
}

type hintStream struct {
	grpc.ClientStream
	h *certHint
}

func (s *hintStream) SendMsg(m any) error { return s.h.explain(s.ClientStream.SendMsg(m)) }
func (s *hintStream) RecvMsg(m any) error { return s.h.explain(s.ClientStream.RecvMsg(m)) }
func (s *hintStream) CloseSend() error    { return s.h.explain(s.ClientStream.CloseSend()) }
