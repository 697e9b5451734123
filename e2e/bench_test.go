package e2e

import (
	"bufio"
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/file"
	"github.com/zarrgate/zarrgate/storesvc/remote"
)

// BenchmarkServeStream256MiB streams a 256 MiB value out of a separate
// `zarrgate serve` process and, beside it, reads the same file directly
// through the file store. It reports the server's peak resident memory
// growth while streaming (VmHWM minus VmRSS before), the bound being
// 32 MiB.
func BenchmarkServeStream256MiB(b *testing.B) {
	const size = 256 << 20
	root := b.TempDir()
	if err := os.WriteFile(filepath.Join(root, "big"), make([]byte, size), 0o644); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	buf := make([]byte, 1<<20)
	read := func(b *testing.B, s storesvc.Store) {
		obj, err := s.Get(ctx, "big", storesvc.ByteRange{})
		if err != nil {
			b.Fatal(err)
		}
		defer obj.Close()
		if n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{obj}, buf); err != nil || n != size {
			b.Fatalf("read %d bytes: %v", n, err)
		}
	}

	b.Run("file", func(b *testing.B) {
		fs, err := file.New(root)
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(size)
		for b.Loop() {
			read(b, fs)
		}
	})

	b.Run("remote", func(b *testing.B) {
		srv := startServer(b, "--root", root)
		cc, err := rpc.Dial(srv.addr)
		if err != nil {
			b.Fatal(err)
		}
		defer cc.Close()
		s, err := remote.New(ctx, cc)
		if err != nil {
			b.Fatal(err)
		}
		before := procStatus(b, srv.cmd.Process.Pid, "VmRSS")
		b.SetBytes(size)
		for b.Loop() {
			read(b, s)
		}
		peak := procStatus(b, srv.cmd.Process.Pid, "VmHWM")
		b.ReportMetric(float64(peak-before)/1024, "server-peak-rss-growth-MiB")
	})
}

// procStatus reads a kB field of /proc/PID/status.
func procStatus(b *testing.B, pid int, field string) int64 {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
