package e2e

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/client"
	"github.com/zarrgate/zarrgate/internal/auth"
	"github.com/zarrgate/zarrgate/internal/testcerts"
	"github.com/zarrgate/zarrgate/internal/tlsconf"
)

// BenchmarkGatewaySecureReads measures what TLS, a token and a policy
// cost a user's full read (issue 15): the Go client reads a 128 MiB
// uncompressed array from a real `zarrgate serve` on loopback, once in
// plaintext and once from a second server on the same directory with
// `--tls-cert --tls-key --tokens --policy`, each through shared memory
// (the default on the gateway's host: block data bypasses the socket)
// and through the socket (as a client on another host reads). Besides the
// best read (best-MB/s, as BenchmarkGatewaySlabs), it reports the CPU
// time each side spends per read: on this shared 2-core machine, wall
// time varies by tens of percent from run to run, CPU time much less.
//
//	go test -run '^$' -bench GatewaySecureReads -benchtime 5x ./e2e/
func BenchmarkGatewaySecureReads(b *testing.B) {
	const rows, cols, chunk = 8192, 4096, 256
	dir, root := b.TempDir(), b.TempDir()
	ca := testcerts.NewCA(b, "bench CA")
	caFile := ca.WriteCA(b, dir, "ca.pem")
	cert, key := ca.Issue(b, testcerts.Server("127.0.0.1")).Write(b, dir)
	token, hash, err := auth.NewToken()
	if err != nil {
		b.Fatal(err)
	}
	line, err := auth.TokenLine(hash, "bench", nil)
	if err != nil {
		b.Fatal(err)
	}
	tokens, policy := filepath.Join(dir, "tokens"), filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(tokens, []byte(line+"\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(policy, []byte("rules:\n  - principals: [user:bench]\n    permissions: [read]\n    prefixes: [a]\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	plain := startServer(b, "--root", root)
	secure := startServer(b, "--root", root, "--tls-cert", cert, "--tls-key", key, "--tokens", tokens, "--policy", policy)

	ctx := context.Background()
	data := make([]float32, rows*cols)
	for i := range data {
		data[i] = benchValue(i/cols, i%cols)
	}
	w, err := client.Dial(ctx, plain.addr)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	a, err := w.CreateArray(ctx, "a", client.ArraySpec{Shape: []int64{rows, cols}, DataType: "float32",
		ChunkShape: []int64{chunk, chunk}, Codecs: benchLayouts[0].codecs})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := client.Write(ctx, a, nil, data); err != nil {
		b.Fatal(err)
	}
	tlsCfg, err := tlsconf.Client(caFile, "", "", "", nil)
	if err != nil {
		b.Fatal(err)
	}
	got := make([]float32, len(data))
	for _, srv := range []struct {
		name string
		s    *server
		opts []client.Option
	}{
		{"plaintext", plain, nil},
		{"tls+token+policy", secure, []client.Option{client.WithTLS(tlsCfg), client.WithToken(token)}},
	} {
		for _, path := range []struct {
			name   string
			shared bool
		}{{"shared-memory", true}, {"socket", false}} {
			c, err := client.Dial(ctx, srv.s.addr, append(slices.Clone(srv.opts), client.WithSharedMemory(path.shared))...)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ra, err := c.OpenArray(ctx, "a")
			if err != nil {
				b.Fatal(err)
			}
			b.Run(srv.name+"/"+path.name, func(b *testing.B) { cpuTimedReads(b, srv.s.cmd.Process.Pid, ra, got, data) })
		}
	}
}

// cpuTimedReads is timedReads, and reports the CPU time per read of
// this process (the client) and of the server's.
func cpuTimedReads(b *testing.B, pid int, a *client.Array, got, want []float32) {
	ctx := context.Background()
	b.SetBytes(int64(len(want)) * 4)
	if err := client.ReadInto(ctx, a, nil, got); err != nil {
		b.Fatal(err)
	}
	best := time.Duration(math.MaxInt64)
	c0, s0 := selfCPU(b), serverCPU(b, pid)
	for b.Loop() {
		t0 := time.Now()
		if err := client.ReadInto(ctx, a, nil, got); err != nil {
			b.Fatal(err)
		}
		best = min(best, time.Since(t0))
	}
	c1, s1 := selfCPU(b), serverCPU(b, pid)
	b.ReportMetric(float64(len(want))*4/best.Seconds()/1e6, "best-MB/s")
	b.ReportMetric(float64((c1-c0).Microseconds())/1e3/float64(b.N), "client-cpu-ms/op")
	b.ReportMetric(float64((s1-s0).Microseconds())/1e3/float64(b.N), "server-cpu-ms/op")
	if !slices.Equal(got, want) {
		b.Fatal("read back differs")
	}
}

func selfCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func serverCPU(b *testing.B, pid int) time.Duration {
	d, err := cpuTime(pid)
	if err != nil {
		b.Fatal(err)
	}
	return d
}
