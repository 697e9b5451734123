package client_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/zarrgate/zarrgate/client"
	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/gateway"
	"github.com/zarrgate/zarrgate/gateway/arrayserver"
	"github.com/zarrgate/zarrgate/internal/auth"
	"github.com/zarrgate/zarrgate/internal/auth/authgrpc"
	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/internal/tlsconf"
	"github.com/zarrgate/zarrgate/storesvc/memory"
)

// tokenServer serves a gateway that requires a token of a token file
// (with TLS when certFile is set), and counts the calls that arrived
// carrying an authorization header at all.
func tokenServer(t *testing.T, certFile, keyFile string) (addr, token string, sent *atomic.Int32) {
	t.Helper()
	tok, hash, _ := auth.NewToken()
	line, _ := auth.TokenLine(hash, "alice", nil)
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	w, err := auth.NewTokenWatcher(path, logger)
	if err != nil {
		t.Fatal(err)
	}
	sent = new(atomic.Int32)
	count := func(ctx context.Context) {
		if md, _ := metadata.FromIncomingContext(ctx); len(md.Get("authorization")) > 0 {
			sent.Add(1)
		}
	}
	opts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			count(ctx)
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			count(ss.Context())
			return h(srv, ss)
		}),
	}
	if certFile != "" {
		cfg, err := tlsconf.Server(certFile, keyFile, "", logger, "h2")
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, rpc.ServerTLS(cfg))
	}
	opts = append(opts, authgrpc.ServerOptions(&auth.Authenticator{Tokens: w.Tokens})...)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(logger, opts...)
	arrayserver.NewServer(gateway.New(memory.New(), codecsvc.NewLocal(), gateway.Config{})).Register(srv)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String(), tok, sent
}

// TestWithToken: the token authenticates the client's calls, over
// plaintext to a loopback address and over TLS to any; Dial refuses to
// send it in plaintext to an address that is not this host's, and the
// token never leaves on a plaintext connection that dial options slipped
// in.
func TestWithToken(t *testing.T) {
	addr, tok, plainSent := tokenServer(t, "", "")
	checkCall(t, "no token", dialT(t, addr), codes.Unauthenticated)
	checkCall(t, "token, loopback", dialT(t, addr, client.WithToken(tok)), codes.OK)
	checkCall(t, "wrong token", dialT(t, addr, client.WithToken("zg_not-the-token")), codes.Unauthenticated)
	for name, bad := range map[string]string{"empty": "", "with Bearer": "Bearer " + tok, "newline": tok + "\n"} {
		if _, err := client.Dial(context.Background(), addr, client.WithToken(bad)); !errors.Is(err, errs.InvalidArgument) {
			t.Errorf("token %s: Dial: %v", name, err)
		}
	}

	// dns:///127.0.0.1:port reaches this host, but is not an address
	// Dial can tell is loopback: it counts as another host.
	p := newPKI(t)
	taddr, ttok, sent := tokenServer(t, p.srvCert, p.srvKey)
	remoteName := "dns:///" + taddr
	if _, err := client.Dial(context.Background(), remoteName, client.WithToken(ttok)); !errors.Is(err, errs.InvalidArgument) {
		t.Fatalf("token in plaintext to another host: Dial: %v", err)
	}
	cfg, err := client.LoadTLS(p.caFile, "", "")
	if err != nil {
		t.Fatal(err)
	}
	checkCall(t, "token over TLS", dialT(t, remoteName, client.WithTLS(cfg), client.WithToken(ttok)), codes.OK)
	if sent.Load() == 0 {
		t.Fatal("the token did not reach the server")
	}
	// WithTLS, then a dial option that replaces the TLS credentials by
	// plaintext ones, to the plaintext server: the call fails without
	// sending the token.
	plainSent.Store(0)
	c := dialT(t, "dns:///"+addr, client.WithTLS(cfg), client.WithToken(tok), client.WithDialOptions(grpc.WithTransportCredentials(insecure.NewCredentials())))
	if _, err := c.List(context.Background(), "", true); err == nil {
		t.Fatal("the token went over plaintext to another host")
	}
	if n := plainSent.Load(); n != 0 {
		t.Fatalf("the token was sent over plaintext (%d calls)", n)
	}
}
