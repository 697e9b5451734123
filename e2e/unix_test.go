package e2e

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/client"
)

// TestServeUnixSocket serves on a Unix socket, for clients on the same
// host: a stale socket file is replaced, a live one is not taken over, and
// the file goes away when the server stops.
func TestServeUnixSocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "zg.sock")
	// A socket file left by a server that died.
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()
	s := startServer(t, "--root", filepath.Join(dir, "data"), "--listen", "unix://"+sock)
	if s.addr != "unix://"+sock {
		t.Fatalf("serving address %q, want unix://%s", s.addr, sock)
	}
	ctx := context.Background()
	c, err := client.Dial(ctx, s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, err := c.CreateArray(ctx, "a", client.ArraySpec{Shape: []int64{1024, 1024}, DataType: "float64", ChunkShape: []int64{256, 256}})
	if err != nil {
		t.Fatal(err)
	}
	want := make([]float64, 1024*1024)
	for i := range want {
		want[i] = float64(i) / 3
	}
	if _, err := client.Write(ctx, a, nil, want); err != nil {
		t.Fatal(err)
	}
	got, _, err := client.Read[float64](ctx, a, nil)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("read back over the socket differs (%v)", err)
	}

	// A second server must not steal a live socket.
	out, err := exec.Command(bin, "serve", "--root", filepath.Join(dir, "other"), "--listen", "unix://"+sock).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "already listening") {
		t.Fatalf("a second server on a live socket: %v\n%s", err, out)
	}

	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.done:
	case <-time.After(15 * time.Second):
		t.Fatal("server did not stop")
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("socket file left after shutdown: %v", err)
	}
}
