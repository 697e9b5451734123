package file_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/file"
	"github.com/zarrgate/zarrgate/storesvc/storetest"
)

func newStore(t *testing.T) *file.Store {
	s, err := file.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storesvc.Store { return newStore(t) })
}

var ctx = context.Background()

// The file store's key layout is the file system store spec's: key "a/b/c"
// is the file a/b/c under the root.
func TestKeyLayout(t *testing.T) {
	fs := newStore(t)
	s := storesvc.Wrap(fs)
	if _, err := s.Set(ctx, "g/arr/c/0/1", strings.NewReader("chunk"), storesvc.Condition{}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(fs.Dir(), "g", "arr", "c", "0", "1"))
	if err != nil || string(b) != "chunk" {
		t.Fatalf("file content %q, %v", b, err)
	}
	// A file put there by another tool is a key.
	if err := os.WriteFile(filepath.Join(fs.Dir(), "g", "zarr.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	v, _, err := storesvc.ReadAll(ctx, s, "g/zarr.json")
	if err != nil || string(v) != "{}" {
		t.Fatalf("ReadAll = %q, %v", v, err)
	}
}

// No key, and no symlink planted inside the root, lets the store read or
// write outside it.
func TestSymlinkEscape(t *testing.T) {
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	fs := newStore(t)
	s := storesvc.Wrap(fs)
	if err := os.Symlink(outside, filepath.Join(fs.Dir(), "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(fs.Dir(), "filelink")); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"link/secret", "filelink"} {
		if _, err := s.Get(ctx, key, storesvc.ByteRange{}); err == nil {
			t.Errorf("Get(%q) read outside the root", key)
		}
	}
	if _, err := s.Set(ctx, "link/planted", strings.NewReader("x"), storesvc.Condition{}); err == nil {
		t.Error("Set through a symlink wrote outside the root")
	}
	if _, err := os.Stat(filepath.Join(outside, "planted")); !errors.Is(err, os.ErrNotExist) {
		t.Error("a file appeared outside the root")
	}
	if err := s.ErasePrefix(ctx, "link/"); err != nil {
		t.Logf("ErasePrefix through a symlink: %v", err)
	}
	if _, err := os.Stat(secret); err != nil {
		t.Errorf("ErasePrefix removed a file outside the root: %v", err)
	}
	if err := s.Erase(ctx, "link/secret", storesvc.Condition{}); err == nil {
		if _, err := os.Stat(secret); err != nil {
			t.Error("Erase removed a file outside the root")
		}
	}
}

// A crash mid-write leaves only a temporary file, which is neither listed
// nor read as a value.
func TestTempFilesHidden(t *testing.T) {
	fs := newStore(t)
	s := storesvc.Wrap(fs)
	if _, err := s.Set(ctx, "a/b", strings.NewReader("v"), storesvc.Condition{}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(fs.Dir(), "a", ".zarrgate-tmp-deadbeef"), []byte("torn"), 0o644); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k, err := range s.ListPrefix(ctx, "") {
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	if len(keys) != 1 || keys[0] != "a/b" {
		t.Fatalf("keys = %q, want [a/b]", keys)
	}
	if _, err := s.Set(ctx, "a/.zarrgate-tmp-x", strings.NewReader("v"), storesvc.Condition{}); !errors.Is(err, storesvc.ErrInvalidKey) {
		t.Fatalf("Set of a reserved name: %v", err)
	}
}

// Conditional writes are atomic between processes sharing the directory:
// helper processes increment one counter with read-modify-write under
// generation checks, and no increment is lost.
func TestConditionalWritesAcrossProcesses(t *testing.T) {
	if os.Getenv("ZARRGATE_COUNTER_DIR") != "" {
		counterWorker(t)
		return
	}
	dir := t.TempDir()
	s, err := file.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := storesvc.Wrap(s).Set(ctx, "n", strings.NewReader("0"), storesvc.Condition{}); err != nil {
		t.Fatal(err)
	}
	const procs, incs = 3, 20
	var cmds []*exec.Cmd
	for range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^TestConditionalWritesAcrossProcesses$")
		cmd.Env = append(os.Environ(), "ZARRGATE_COUNTER_DIR="+dir)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
		t.Cleanup(func() {
			if t.Failed() {
				t.Log(out.String())
			}
		})
	}
	for _, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("worker: %v", err)
		}
	}
	v, _, err := storesvc.ReadAll(ctx, storesvc.Wrap(s), "n")
	if err != nil || string(v) != "60" {
		t.Fatalf("counter = %q, %v; want %d", v, err, procs*incs)
	}
}

func counterWorker(t *testing.T) {
	s, err := file.New(os.Getenv("ZARRGATE_COUNTER_DIR"))
	if err != nil {
		t.Fatal(err)
	}
	p := storesvc.Wrap(s)
	for range 20 {
		for {
			v, gen, err := storesvc.ReadAll(ctx, p, "n")
			if err != nil {
				t.Fatal(err)
			}
			n, err := strconv.Atoi(string(v))
			if err != nil {
				t.Fatal(err)
			}
			_, err = p.Set(ctx, "n", strings.NewReader(strconv.Itoa(n+1)), storesvc.Condition{IfGenerationMatch: gen})
			if err == nil {
				break
			}
			if !errors.Is(err, storesvc.ErrPrecondition) {
				t.Fatal(err)
			}
		}
	}
}

// CleanTemps removes the temporary files of dead writers (old, unlocked),
// keeps a live writer's (flocked) and recent ones, and no call reaches any
// of them meanwhile.
func TestCleanTemps(t *testing.T) {
	fs := newStore(t)
	s := storesvc.Wrap(fs)
	root := fs.Dir()
	old := time.Now().Add(-time.Hour)
	plant := func(rel string, mtime time.Time) string {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("torn"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if _, err := s.Set(ctx, "a/v", strings.NewReader("value"), storesvc.Condition{}); err != nil {
		t.Fatal(err)
	}
	dead1 := plant("x/y/.zarrgate-tmp-dead1", old)
	dead2 := plant("a/.zarrgate-tmp-dead2", old)
	young := plant("a/.zarrgate-tmp-young", time.Now())

	// No call reaches a temporary file, through the portable layer or not.
	for _, st := range []storesvc.Store{s, fs} {
		if _, err := st.Get(ctx, "a/.zarrgate-tmp-dead2", storesvc.ByteRange{}); !errors.Is(err, storesvc.ErrInvalidKey) {
			t.Errorf("Get of a temporary file: %v, want ErrInvalidKey", err)
		}
		if err := st.Erase(ctx, "a/.zarrgate-tmp-young", storesvc.Condition{}); !errors.Is(err, storesvc.ErrInvalidKey) {
			t.Errorf("Erase of a temporary file: %v, want ErrInvalidKey", err)
		}
	}

	// A write in progress: its temporary file is flocked while it streams.
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := s.Set(ctx, "a/w", pr, storesvc.Condition{})
		done <- err
	}()
	pw.Write([]byte("first half,"))
	var live string
	for deadline := time.Now().Add(5 * time.Second); live == "" && time.Now().Before(deadline); {
		matches, _ := filepath.Glob(filepath.Join(root, "a", ".zarrgate-tmp-*"))
		for _, m := range matches {
			if m != dead2 && m != young {
				live = m
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if live == "" {
		t.Fatal("the write's temporary file did not appear")
	}
	if err := os.Chtimes(live, old, old); err != nil { // a slow writer, idle for an hour
		t.Fatal(err)
	}

	st, err := fs.CleanTemps(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if st != (file.TempStats{Removed: 2, Live: 1, Young: 1}) {
		t.Errorf("CleanTemps = %+v, want 2 removed, 1 live, 1 young", st)
	}
	for _, p := range []string{dead1, dead2, filepath.Join(root, "x")} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there after CleanTemps: %v", p, err)
		}
	}
	for _, p := range []string{young, live} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s removed: %v", p, err)
		}
	}

	// With the serving commands' age (none), the young unlocked file goes
	// too: the lock alone tells a live writer's file.
	if st, err := fs.CleanTemps(ctx, file.StaleTempAge); err != nil || st != (file.TempStats{Removed: 1, Live: 1}) {
		t.Errorf("CleanTemps(StaleTempAge) = %+v, %v, want 1 removed, 1 live", st, err)
	}
	if _, err := os.Stat(young); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still there: %v", young, err)
	}

	// The live write completes intact.
	pw.Write([]byte("second half"))
	pw.Close()
	if err := <-done; err != nil {
		t.Fatalf("the write in progress failed: %v", err)
	}
	if v, _, err := storesvc.ReadAll(ctx, s, "a/w"); err != nil || string(v) != "first half,second half" {
		t.Fatalf("a/w = %q, %v", v, err)
	}
}
