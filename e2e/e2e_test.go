// Package e2e runs the real zarrgate binary and talks to it like users do:
// grpcurl, the Go remote store, signals.
package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// bin is the zarrgate binary built once for the package's tests.
var bin string

func TestMain(m *testing.M) {
	if addr := os.Getenv(bigReadEnv); addr != "" {
		os.Exit(bigReader(addr))
	}
	dir, err := os.MkdirTemp("", "zarrgate-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// $ZARRGATE_E2E_BIN runs the suite against a binary built elsewhere
	// (make test-cgocodecs: the container image's static cgocodecs
	// build); by default it builds the pure-Go one.
	bin = os.Getenv("ZARRGATE_E2E_BIN")
	if bin == "" {
		bin = filepath.Join(dir, "zarrgate")
		build := exec.Command("go", "build", "-o", bin, "../cmd/zarrgate")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building zarrgate:", err)
			os.Exit(1)
		}
	} else if bin, err = filepath.Abs(bin); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// server is a running `zarrgate serve`.
type server struct {
	cmd  *exec.Cmd
	addr string
	logs *syncLog
	done chan error
}

// addrRE finds the address in a text (addr=...) or JSON ("addr":"...")
// log line.
var addrRE = regexp.MustCompile(`addr=(\S+)|"addr":"([^"]+)"`)

// syncLog collects a server's log lines from its reader goroutine while
// tests read them.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) WriteString(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.WriteString(s)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startServer runs `zarrgate serve --listen 127.0.0.1:0 args...` and waits
// for the address it logs.
func startServer(t testing.TB, args ...string) *server {
	t.Helper()
	return startCommand(t, "serve", args...)
}

// startCommand runs a serving subcommand on a free loopback port.
func startCommand(t testing.TB, sub string, args ...string) *server {
	t.Helper()
	return startCmd(t, exec.Command(bin, append([]string{sub, "--listen", "127.0.0.1:0"}, args...)...))
}

// startCmd starts a serving command made ready to run (with its own
// environment, say) and waits for the address it logs.
func startCmd(t testing.TB, cmd *exec.Cmd) *server {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &server{cmd: cmd, logs: &syncLog{}, done: make(chan error, 1)}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			s.logs.WriteString(line + "\n")
			if m := addrRE.FindStringSubmatch(line); m != nil && strings.Contains(line, "serving") {
				found <- m[1] + m[2]
			}
		}
		s.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		if t.Failed() {
			t.Logf("server log:\n%s", s.logs.String())
		}
	})
	select {
	case s.addr = <-found:
	case err := <-s.done:
		t.Fatalf("server exited early: %v\n%s", err, s.logs.String())
	case <-time.After(30 * time.Second):
		t.Fatal("server did not report its address")
	}
	return s
}

// toolsModfile is the dev tools' module (buf, grpcurl, protoc plugins),
// kept apart from the product's go.mod so that their dependencies never
// enter it; tests run from the package directory, hence the "..".
const toolsModfile = "../tools/go.mod"

// grpcurl runs the grpcurl pinned in tools/go.mod.
func grpcurl(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	modfile, err := filepath.Abs(toolsModfile)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "go", append([]string{"tool", "-modfile=" + modfile, "grpcurl"}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestServeAnswersGrpcurl(t *testing.T) {
	root := t.TempDir()
	s := startServer(t, "--root", root)

	out, err := grpcurl(t, "", "-plaintext", s.addr, "list")
	if err != nil {
		t.Fatalf("grpcurl list: %v\n%s", err, out)
	}
	for _, want := range []string{"zarrgate.store.v1.StoreService", "zarrgate.gateway.v1.ArrayService", "grpc.health.v1.Health"} {
		if !strings.Contains(out, want) {
			t.Errorf("grpcurl list lacks %s:\n%s", want, out)
		}
	}

	out, err = grpcurl(t, "", "-plaintext", s.addr, "grpc.health.v1.Health/Check")
	if err != nil || !strings.Contains(out, "SERVING") {
		t.Fatalf("health check: %v\n%s", err, out)
	}

	// Set through grpcurl (client streaming: header, then data), then read
	// the file the store wrote and Get it back.
	set := `{"header": {"key": "g/zarr.json"}} {"data": "eyJ6YXJyX2Zvcm1hdCI6M30="}`
	out, err = grpcurl(t, set, "-plaintext", "-d", "@", s.addr, "zarrgate.store.v1.StoreService/Set")
	if err != nil || !strings.Contains(out, "generation") {
		t.Fatalf("Set: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(root, "g", "zarr.json"))
	if err != nil || string(b) != `{"zarr_format":3}` {
		t.Fatalf("stored file = %q, %v", b, err)
	}
	out, err = grpcurl(t, "", "-plaintext", "-d", `{"key": "g/zarr.json", "range": {"suffix_length": 2}}`, s.addr, "zarrgate.store.v1.StoreService/Get")
	if err != nil || !strings.Contains(out, `"data": "M30="`) { // base64 of "3}"
		t.Fatalf("Get suffix: %v\n%s", err, out)
	}

	// Bad input gets the right code with a message naming the key, and the
	// server keeps serving.
	out, err = grpcurl(t, "", "-plaintext", "-d", `{"key": "../etc/passwd"}`, s.addr, "zarrgate.store.v1.StoreService/Get")
	if err == nil || !strings.Contains(out, "InvalidArgument") || !strings.Contains(out, "../etc/passwd") {
		t.Fatalf("Get of an escaping key: %v\n%s", err, out)
	}
	out, err = grpcurl(t, "", "-plaintext", "-d", `{"key": "missing"}`, s.addr, "zarrgate.store.v1.StoreService/Get")
	if err == nil || !strings.Contains(out, "NotFound") {
		t.Fatalf("Get of a missing key: %v\n%s", err, out)
	}
	out, err = grpcurl(t, "", "-plaintext", "-d", `{"key": "g/zarr.json", "range": {"bounded": {"offset": 10, "length": 100}}}`, s.addr, "zarrgate.store.v1.StoreService/Get")
	if err == nil || !strings.Contains(out, "OutOfRange") {
		t.Fatalf("Get past the end: %v\n%s", err, out)
	}
	out, err = grpcurl(t, `{"data": "eA=="}`, "-plaintext", "-d", "@", s.addr, "zarrgate.store.v1.StoreService/Set")
	if err == nil || !strings.Contains(out, "InvalidArgument") {
		t.Fatalf("Set without header: %v\n%s", err, out)
	}
	out, err = grpcurl(t, "", "-plaintext", "-d", `{"prefix": ""}`, s.addr, "zarrgate.store.v1.StoreService/ListPrefix")
	if err != nil || !strings.Contains(out, "g/zarr.json") {
		t.Fatalf("ListPrefix after bad calls: %v\n%s", err, out)
	}
}

func TestServeReadOnly(t *testing.T) {
	s := startServer(t, "--root", t.TempDir(), "--read-only")
	out, err := grpcurl(t, `{"header": {"key": "k"}}`, "-plaintext", "-d", "@", s.addr, "zarrgate.store.v1.StoreService/Set")
	if err == nil || !strings.Contains(out, "FailedPrecondition") || !strings.Contains(out, "read-only") {
		t.Fatalf("Set on a read-only server: %v\n%s", err, out)
	}
}

func TestServeGracefulShutdown(t *testing.T) {
	s := startServer(t, "--root", t.TempDir())
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-s.done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, s.logs.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("server did not stop after SIGTERM")
	}
	if !strings.Contains(s.logs.String(), "stopped") {
		t.Errorf("no shutdown log:\n%s", s.logs.String())
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{{}, {"nonsense"}, {"serve", "--bogus"}, {"serve", "--log-level", "loud"}, {"serve", "--listen", "unix:"}} {
		cmd := exec.Command(bin, args...)
		out, err := cmd.CombinedOutput()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 2 {
			t.Errorf("zarrgate %q: %v, want exit code 2\n%s", args, err, out)
		}
		if len(out) == 0 {
			t.Errorf("zarrgate %q printed nothing", args)
		}
	}
}

func TestGatewayHierarchyOverGrpcurl(t *testing.T) {
	root := t.TempDir()
	s := startServer(t, "--root", root)
	call := func(method, body string) string {
		t.Helper()
		out, err := grpcurl(t, "", "-plaintext", "-d", body, s.addr, "zarrgate.gateway.v1.ArrayService/"+method)
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", method, body, err, out)
		}
		return out
	}
	call("CreateGroup", `{"path": "", "attributes_json": "{\"title\": \"demo\"}"}`)
	call("CreateArray", `{"path": "temp", "shape": [100, 200], "data_type": "float32", "chunk_shape": [10, 20], "dimension_names": ["y", "x"]}`)
	out := call("GetNode", `{"path": "temp"}`)
	for _, want := range []string{`"NODE_KIND_ARRAY"`, `"FORMAT_ZARR_V3"`, `"float32"`, `"y"`} {
		if !strings.Contains(out, want) {
			t.Errorf("GetNode lacks %s:\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "temp", "zarr.json")); err != nil {
		t.Errorf("array metadata not on disk: %v", err)
	}
	out = call("ListChildren", `{"path": ""}`)
	if !strings.Contains(out, `"path": "temp"`) {
		t.Errorf("ListChildren lacks the array:\n%s", out)
	}
	out, err := grpcurl(t, "", "-plaintext", "-d", `{"path": "temp", "shape": [1, 2], "data_type": "float32"}`, s.addr, "zarrgate.gateway.v1.ArrayService/CreateArray")
	if err == nil || !strings.Contains(out, "AlreadyExists") {
		t.Errorf("creating twice: %v\n%s", err, out)
	}
}
