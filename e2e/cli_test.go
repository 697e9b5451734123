package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// zg runs the zarrgate binary and returns its stdout, stderr and exit code.
func zg(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	return zgEnv(t, nil, stdin, args...)
}

func mustZg(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, errOut, code := zg(t, stdin, args...)
	if code != 0 {
		t.Fatalf("zarrgate %q: exit %d\n%s%s", args, code, out, errOut)
	}
	return out
}

func TestCLIRawKeysAndHierarchy(t *testing.T) {
	s := startServer(t, "--root", t.TempDir())
	a := "--addr=" + s.addr

	out := mustZg(t, "", "mkarray", a, "g/temp", "--shape", "20,30", "--dtype", "int16", "--chunks", "10,10", "--dims", "y,x", "--attrs", `{"units":"K"}`)
	if !strings.Contains(out, "created /g/temp") {
		t.Fatalf("mkarray: %s", out)
	}
	out = mustZg(t, "", "ls", a, "-r")
	if !strings.Contains(out, "g/temp") || !strings.Contains(out, "int16") {
		t.Fatalf("ls -r: %s", out)
	}
	out = mustZg(t, "", "info", a, "g/temp")
	for _, want := range []string{"shape:       [20 30]", "dimensions:  y, x", "zstd", `"units":"K"`, "stored:"} {
		if !strings.Contains(out, want) {
			t.Errorf("info lacks %q:\n%s", want, out)
		}
	}

	mustZg(t, "hello zarr", "put", a, "raw/key")
	if out := mustZg(t, "", "get", a, "raw/key"); out != "hello zarr" {
		t.Fatalf("get = %q", out)
	}
	_, errOut, code := zg(t, "again", "put", a, "raw/key", "--if-absent")
	if code != 1 || !strings.Contains(errOut, "already exists") {
		t.Fatalf("put --if-absent over a key: exit %d: %s", code, errOut)
	}
	mustZg(t, "", "rm", a, "raw/key")
	_, errOut, code = zg(t, "", "get", a, "raw/key")
	if code != 1 || !strings.Contains(errOut, "raw/key") || !strings.Contains(errOut, "not found") {
		t.Fatalf("get after rm: exit %d: %s", code, errOut)
	}
	_, errOut, code = zg(t, "", "get", a, "../escape")
	if code != 1 || !strings.Contains(errOut, "invalid") {
		t.Fatalf("get of an invalid key: exit %d: %s", code, errOut)
	}
	_, errOut, code = zg(t, "", "mkarray", a, "bad", "--shape", "x")
	if code != 2 || !strings.Contains(errOut, "--shape") {
		t.Fatalf("mkarray with a bad shape: exit %d: %s", code, errOut)
	}
	mustZg(t, "", "rm", a, "-r", "g")
	if out := mustZg(t, "", "ls", a, "-r"); strings.TrimSpace(out) != "" {
		t.Fatalf("ls after rm -r: %q", out)
	}
}

// TestCLICopyResumes interrupts a copy from a server into a directory and
// runs it again: the second run skips what the first one copied and the
// result is complete.
func TestCLICopyResumes(t *testing.T) {
	isolateCopyRecords(t)
	srcDir := t.TempDir()
	const keys = 300
	payload := bytes.Repeat([]byte("0123456789abcdef"), 16<<10) // 256 KiB
	for i := range keys {
		p := filepath.Join(srcDir, "arr", "c", fmt.Sprint(i/10), fmt.Sprint(i%10))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, append([]byte(fmt.Sprint(i)), payload...), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := startServer(t, "--root", srcDir)
	dst := t.TempDir()

	cmd := exec.Command(bin, "cp", "-j", "1", "grpc://"+s.addr, dst)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for countFiles(dst) < 20 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	first := countFiles(dst)
	if err == nil && first == keys {
		t.Skipf("the copy finished before it could be interrupted (%d keys)", first)
	}
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(errb.String(), "resume") {
		t.Fatalf("interrupted cp: %v\n%s%s", err, out.String(), errb.String())
	}
	if first == 0 || first >= keys {
		t.Fatalf("interrupted after %d of %d keys", first, keys)
	}

	out2 := mustZg(t, "", "cp", "-q", "grpc://"+s.addr, dst)
	var copied, skipped int
	fmt.Sscanf(out2, "copied %d keys", &copied)
	if i := strings.Index(out2, "skipped "); i >= 0 {
		fmt.Sscanf(out2[i:], "skipped %d", &skipped)
	}
	if skipped < first-1 || copied+skipped != keys {
		t.Fatalf("resumed cp after %d keys: %q", first, out2)
	}
	for i := range keys {
		rel := filepath.Join("arr", "c", fmt.Sprint(i/10), fmt.Sprint(i%10))
		a, _ := os.ReadFile(filepath.Join(srcDir, rel))
		b, err := os.ReadFile(filepath.Join(dst, rel))
		if err != nil || !bytes.Equal(a, b) {
			t.Fatalf("%s differs after the resumed copy: %v", rel, err)
		}
	}
	// stderr is a pipe: no progress line (TestCLICopyProgressOnlyOnTerminal).
	if strings.Contains(errb.String(), "ETA") {
		t.Errorf("a progress line on stderr, which is not a terminal: %q", errb.String())
	}
}

func countFiles(dir string) int {
	n := 0
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasPrefix(d.Name(), ".zarrgate-tmp-") {
			n++
		}
		return nil
	})
	return n
}

// Store URLs work wherever a store is named.
func TestServeStoreURLs(t *testing.T) {
	for _, root := range []string{"memory://", "zip://" + filepath.Join(t.TempDir(), "data.zip"), "file://" + t.TempDir()} {
		s := startServer(t, "--root", root)
		a := "--addr=" + s.addr
		mustZg(t, "payload", "put", a, "k/v")
		if out := mustZg(t, "", "get", a, "k/v"); out != "payload" {
			t.Errorf("%s: get = %q", root, out)
		}
	}
	_, errOut, code := zg(t, "", "serve", "--root", "s4://nope", "--listen", "127.0.0.1:0")
	if code != 1 || !strings.Contains(errOut, "s4") {
		t.Errorf("serve with a bad URL: exit %d: %s", code, errOut)
	}
}

func TestCLICat(t *testing.T) {
	s := startServer(t, "--root", t.TempDir())
	a := "--addr=" + s.addr
	mustZg(t, "", "mkarray", a, "m", "--shape", "3,4", "--dtype", "int16", "--chunks", "2,2", "--fill", "7")
	mustZg(t, "", "mkarray", a, "names", "--shape", "2", "--dtype", "string")
	out := mustZg(t, "", "cat", a, "m")
	if out != "7 7 7 7\n7 7 7 7\n7 7 7 7\n" {
		t.Fatalf("cat = %q", out)
	}
	out = mustZg(t, "", "cat", a, "--format", "csv", "m", "0:3:2,1:4:2")
	if out != "7,7\n7,7\n" {
		t.Fatalf("cat csv of a strided selection = %q", out)
	}
	npy := filepath.Join(t.TempDir(), "m.npy")
	mustZg(t, "", "cat", a, "--format", "npy", "-o", npy, "m")
	b, err := os.ReadFile(npy)
	if err != nil || !bytes.HasPrefix(b, []byte("\x93NUMPY\x01\x00")) || !bytes.Contains(b, []byte("'descr': '<i2'")) || !bytes.Contains(b, []byte("'shape': (3, 4)")) || len(b)%64 != 24%64 {
		t.Fatalf(".npy = %q", b)
	}
	if py := os.Getenv("ZARRGATE_PYTHON"); py != "" {
		out, err := exec.Command(py, "-c", "import numpy,sys; a=numpy.load(sys.argv[1]); print(a.dtype, a.shape, int(a.sum()))", npy).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "int16 (3, 4) 84" {
			t.Fatalf("numpy reads the .npy as %q: %v", out, err)
		}
	}
	if out := mustZg(t, "", "cat", a, "names"); out != `"" ""`+"\n" {
		t.Fatalf("cat of a fresh string array (two empty strings) = %q", out)
	}
	_, errOut, code := zg(t, "", "cat", a, "m", "0:9,0:1")
	if code != 2 || !strings.Contains(errOut, "dimension 0") {
		t.Fatalf("cat out of bounds: exit %d: %s", code, errOut)
	}
	_, errOut, code = zg(t, "", "cat", a, "m", "0:1:0,0:1")
	if code != 2 || !strings.Contains(errOut, "step") {
		t.Fatalf("cat with step 0: exit %d: %s", code, errOut)
	}
}
