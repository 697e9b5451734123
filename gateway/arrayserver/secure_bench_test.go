package arrayserver

import (
	"context"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"github.com/zarrgate/zarrgate/gateway"
	"github.com/zarrgate/zarrgate/internal/auth"
	"github.com/zarrgate/zarrgate/internal/auth/authgrpc"
	"github.com/zarrgate/zarrgate/internal/authz"
	"github.com/zarrgate/zarrgate/internal/authz/authzgrpc"
	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/internal/testcerts"
	"github.com/zarrgate/zarrgate/internal/tlsconf"
)

// BenchmarkRPCReadSlabSecure is BenchmarkRPCReadSlab (a 64 MiB
// uncompressed slab through ArrayService on loopback) as a shared tier
// serves it (issue 15): in plaintext; over TLS; and over TLS with a bearer
// token checked against a token file and the read checked against a
// policy, the server's whole security stack. The differences are the
// cost of security on full reads.
func BenchmarkRPCReadSlabSecure(b *testing.B) {
	g := benchGateway(b, plainBytes)
	dir := b.TempDir()
	ca := testcerts.NewCA(b, "bench CA")
	caFile := ca.WriteCA(b, dir, "ca.pem")
	certFile, keyFile := ca.Issue(b, testcerts.Server("127.0.0.1")).Write(b, dir)
	token, hash, err := auth.NewToken()
	if err != nil {
		b.Fatal(err)
	}
	line, err := auth.TokenLine(hash, "bench", nil)
	if err != nil {
		b.Fatal(err)
	}
	tokens, err := auth.ParseTokens(strings.NewReader(line + "\n"))
	if err != nil {
		b.Fatal(err)
	}
	policy, err := authz.Parse([]byte(`{"rules": [{"principals": ["user:bench"], "permissions": ["read"], "prefixes": ["a"]}]}`))
	if err != nil {
		b.Fatal(err)
	}
	// Authentication before authorization, as cmd/zarrgate orders them.
	secured := slices.Concat(
		authgrpc.ServerOptions(&auth.Authenticator{Tokens: func() *auth.Tokens { return tokens }}),
		authzgrpc.ServerOptions(authzgrpc.Config{Policy: func() *authz.Policy { return policy }}),
	)
	for _, tc := range []struct {
		name        string
		tls, secure bool
	}{{"plaintext", false, false}, {"tls", true, false}, {"tls+token+policy", true, true}} {
		var srvOpts []grpc.ServerOption
		var dialOpts []grpc.DialOption
		if tc.tls {
			scfg, err := tlsconf.Server(certFile, keyFile, "", slog.New(slog.NewTextHandler(io.Discard, nil)), "h2")
			if err != nil {
				b.Fatal(err)
			}
			ccfg, err := tlsconf.Client(caFile, "", "", "", nil)
			if err != nil {
				b.Fatal(err)
			}
			srvOpts, dialOpts = append(srvOpts, rpc.ServerTLS(scfg)), append(dialOpts, rpc.WithTLS(ccfg))
		}
		if tc.secure {
			srvOpts = append(srvOpts, secured...)
			dialOpts = append(dialOpts, grpc.WithPerRPCCredentials(bearer(token)))
		}
		c := serveSecure(b, g, srvOpts, dialOpts)
		// drain stops quietly at any error: check once that the whole
		// slab comes (a refused token or policy would time nothing).
		if n, err := slabBytes(c); err != nil || n != benchN*benchN*4 {
			b.Fatalf("%s: read %d bytes: %v", tc.name, n, err)
		}
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(benchN * benchN * 4)
			cpu0, sys0 := processCPU(b)
			for b.Loop() {
				drain(b, c, &gatewayv1.ReadSlabRequest{Path: "a"})
			}
			// Wall time depends on what else runs on the machine; the CPU
			// time both ends spend per read (client and server share this
			// process) is the cost itself, and steadier on a busy host.
			cpu, sys := processCPU(b)
			b.ReportMetric(float64((cpu-cpu0).Microseconds())/1e3/float64(b.N), "cpu-ms/op")
			b.ReportMetric(float64((sys-sys0).Microseconds())/1e3/float64(b.N), "sys-ms/op")
		})
	}
}

// processCPU is the CPU time this process has used: in all (user and
// system), and in the kernel (system calls: socket reads and writes).
func processCPU(b *testing.B) (all, sys time.Duration) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), time.Duration(ru.Stime.Nano())
}

// slabBytes reads all of "a" and counts the block bytes.
func slabBytes(c gatewayv1.ArrayServiceClient) (int, error) {
	rs, err := c.ReadSlab(ctx, &gatewayv1.ReadSlabRequest{Path: "a"})
	if err != nil {
		return 0, err
	}
	n := 0
	for {
		m, err := rs.Recv()
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		n += len(m.GetBlock().GetData())
	}
}

// bearer sends a token as the authorization header of every call.
type bearer string

func (t bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

func (bearer) RequireTransportSecurity() bool { return true }

var _ credentials.PerRPCCredentials = bearer("")

// serveSecure serves g with the extra server options and dials it with
// the extra dial options.
func serveSecure(b *testing.B, g *gateway.Gateway, srvOpts []grpc.ServerOption, dialOpts []grpc.DialOption) gatewayv1.ArrayServiceClient {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)), srvOpts...)
	NewServer(g).Register(srv)
	go srv.Serve(lis)
	cc, err := rpc.Dial(lis.Addr().String(), dialOpts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cc.Close(); srv.Stop() })
	return gatewayv1.NewArrayServiceClient(cc)
}
