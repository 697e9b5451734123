// How client commands reach the gateway: --addr, --timeout and dialing.

package main

import (
	"context"
	"errors"
	"flag"
	"net"
	"strings"
	"time"

	"github.com/zarrgate/zarrgate/client"
)

// serverOpts are the flags every client command takes: where the gateway
// is, and how long the command may take.
type serverOpts struct {
	addr    *string
	timeout *time.Duration
	tls     func() ([]client.Option, error)
	token   func() []client.Option
}

// addrFlag adds the --addr and --timeout flags every client command takes.
func addrFlag(fs *flag.FlagSet) serverOpts {
	return serverOpts{
		addr:    fs.String("addr", DefaultListen, "gateway address: host:port (a host alone: port "+defaultPort+"), unix:///path/to.sock or a gRPC target such as dns:///name:port"),
		timeout: fs.Duration("timeout", 0, "give up after this long (e.g. 30s, 5m); 0: no limit"),
		tls:     clientTLSFlags(fs),
		token:   tokenFlag(fs),
	}
}

// clientTLSFlags adds --tls, --tls-ca, --tls-cert and --tls-key, and
// returns the client options they make once parsed.
func clientTLSFlags(fs *flag.FlagSet) func() ([]client.Option, error) {
	on := fs.Bool("tls", false, "connect with TLS, verifying the server against the system's CA roots (--tls-ca implies --tls; without either: plaintext)")
	ca := fs.String("tls-ca", "", "connect with TLS, verifying the server's certificate against this PEM CA bundle")
	cert := fs.String("tls-cert", "", "PEM client certificate for servers that require one (mTLS; with --tls-key)")
	key := fs.String("tls-key", "", "PEM private key of --tls-cert")
	return func() ([]client.Option, error) {
		if (*cert == "") != (*key == "") {
			return nil, usageError{errors.New("--tls-cert and --tls-key go together")}
		}
		if !*on && *ca == "" && *cert == "" {
			return nil, nil
		}
		cfg, err := client.LoadTLS(*ca, *cert, *key)
		if err != nil {
			return nil, usageError{err}
		}
		return []client.Option{client.WithTLS(cfg)}, nil
	}
}

// withTimeout bounds ctx by d (none for 0), and tells run the limit, for
// its message if the command runs past it.
func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return ctx, func() {}
	}
	if p, ok := ctx.Value(timeoutKey{}).(*time.Duration); ok {
		*p = d
	}
	return context.WithTimeout(ctx, d)
}

// timeoutKey holds, in the context run gives a command, where the command
// notes its --timeout.
type timeoutKey struct{}

// cliClient is a client whose Close also releases the command's deadline.
type cliClient struct {
	*client.Client
	cancel context.CancelFunc
}

func (c cliClient) Close() error {
	c.cancel()
	return c.Client.Close()
}

// dial connects to --addr and returns the context the command runs in,
// bounded by --timeout: the deadline goes with every call to the gateway,
// which stops working on them when it passes.
func dial(ctx context.Context, o serverOpts) (context.Context, cliClient, error) {
	opts, err := o.tls()
	if err != nil {
		return ctx, cliClient{}, err
	}
	opts = append(opts, o.token()...)
	ctx, cancel := withTimeout(ctx, *o.timeout)
	c, err := client.Dial(ctx, withDefaultPort(*o.addr), opts...)
	if err != nil {
		cancel()
		return ctx, cliClient{}, err
	}
	return ctx, cliClient{Client: c, cancel: cancel}, nil
}

// defaultPort is the port of DefaultListen, which clients dial when
// --addr names only a host.
const defaultPort = "50051"

// withDefaultPort adds defaultPort to an address that is a bare host
// ("localhost", "10.0.0.5", "::1"): gRPC would dial port 443 for it, which
// no zarrgate listens on by default. Targets with a scheme (unix:,
// dns:///) and addresses with a port are left alone.
func withDefaultPort(addr string) string {
	if addr == "" || strings.Contains(addr, "/") || strings.HasPrefix(addr, "unix:") {
		return addr
	}
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return addr
	}
	host := strings.TrimSuffix(strings.TrimPrefix(addr, "["), "]")
	if strings.Contains(host, ":") && net.ParseIP(host) == nil {
		return addr // host:port with a bad port, or a scheme gRPC resolves: its error is clearer
	}
	return net.JoinHostPort(host, defaultPort)
}
