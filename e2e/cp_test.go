package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// The tests of `zarrgate cp` keep its copy records in a directory of their
// own: $XDG_CACHE_HOME is where cp keeps them by default.
func isolateCopyRecords(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", dir)
	return dir
}

// writeTree writes files (relative path → content) under dir.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for rel, v := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// readTree reads every file under dir but the file store's temporary ones.
func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(d.Name(), ".zarrgate-tmp-") {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(rel)] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// chunkTree is a small array's worth of keys: 40 chunks of 1 KiB and a
// metadata document.
func chunkTree() map[string]string {
	files := map[string]string{"arr/zarr.json": `{"zarr_format":3,"node_type":"array"}`}
	for i := range 40 {
		files[fmt.Sprintf("arr/c/%d/%d", i/10, i%10)] = strings.Repeat(string(rune('a'+i%26)), 1024)
	}
	return files
}

func wantLines(t *testing.T, out string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(out, l+"\n") {
			t.Errorf("output lacks the line %q:\n%s", l, out)
		}
	}
}

func sameTrees(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	if !maps.Equal(got, want) {
		for k := range maps.Keys(want) {
			if got[k] != want[k] {
				t.Errorf("%s: %s differs (%d bytes, want %d)", what, k, len(got[k]), len(want[k]))
			}
		}
		for k := range maps.Keys(got) {
			if _, ok := want[k]; !ok {
				t.Errorf("%s: %s should not be there", what, k)
			}
		}
	}
}

// TestCLICopyDetectsSameSizeChanges copies a server's store into a
// directory, then changes values without changing their sizes: at the
// source (through the server) and in the backup. The next copy rewrites
// both keys (sizes alone would skip them and leave the backup stale), a
// copy with nothing changed skips every key by its recorded generations,
// and one without a record compares contents by SHA-256.
func TestCLICopyDetectsSameSizeChanges(t *testing.T) {
	isolateCopyRecords(t)
	srcDir, dst := t.TempDir(), t.TempDir()
	writeTree(t, srcDir, chunkTree())
	s := startServer(t, "--root", srcDir)
	src := "grpc://" + s.addr

	out := mustZg(t, "", "cp", src, dst)
	wantLines(t, out, "copied 41 keys (40.0 KiB): 41 new", "skipped 0 keys unchanged")
	sameTrees(t, "first copy", readTree(t, dst), readTree(t, srcDir))

	// Same size, new content: at the source through the server, and in
	// the backup behind cp's back.
	mustZg(t, strings.Repeat("Z", 1024), "put", "--addr="+s.addr, "arr/c/0/0")
	writeTree(t, dst, map[string]string{"arr/c/3/9": strings.Repeat("Y", 1024)})

	out = mustZg(t, "", "cp", "-v", src, dst)
	wantLines(t, out,
		"copied 2 keys (2.0 KiB): 2 content differs",
		"skipped 39 keys unchanged: 39 same generation as when last copied",
		"copy   content differs  arr/c/0/0",
		"copy   content differs  arr/c/3/9",
		"skip   same generation  arr/c/1/1",
	)
	sameTrees(t, "after the changes", readTree(t, dst), readTree(t, srcDir))

	out = mustZg(t, "", "cp", src, dst)
	wantLines(t, out, "copied 0 keys (0 B)", "skipped 41 keys unchanged: 41 same generation as when last copied")

	// Without a record (another machine, a lost cache), contents decide.
	isolateCopyRecords(t)
	mustZg(t, strings.Repeat("X", 1024), "put", "--addr="+s.addr, "arr/c/2/2")
	out = mustZg(t, "", "cp", src, dst)
	wantLines(t, out, "copied 1 key (1.0 KiB): 1 content differs", "skipped 40 keys unchanged: 40 same SHA-256")
	sameTrees(t, "without a record", readTree(t, dst), readTree(t, srcDir))
	// --checksum compares by content although the record now matches.
	out = mustZg(t, "", "cp", "--checksum", src, dst)
	wantLines(t, out, "copied 0 keys (0 B)", "skipped 41 keys unchanged: 41 same SHA-256")
}

// TestCLICopyDelete copies a directory into a server's store. Keys absent
// at the source stay in the destination and are counted as kept, unless
// --delete removes them, and then only under --prefix.
func TestCLICopyDelete(t *testing.T) {
	isolateCopyRecords(t)
	srcDir, dstDir := t.TempDir(), t.TempDir()
	writeTree(t, srcDir, chunkTree())
	writeTree(t, srcDir, map[string]string{"zarr.json": `{"zarr_format":3,"node_type":"group"}`})
	s := startServer(t, "--root", dstDir)
	dst, a := "grpc://"+s.addr, "--addr="+s.addr

	wantLines(t, mustZg(t, "", "cp", srcDir, dst), "copied 42 keys (40.1 KiB): 42 new")
	if err := os.Remove(filepath.Join(srcDir, "arr", "c", "1", "1")); err != nil {
		t.Fatal(err)
	}
	mustZg(t, "extra", "put", a, "arr/extra")
	mustZg(t, "other", "put", a, "other/x")

	out := mustZg(t, "", "cp", "-v", srcDir, dst)
	wantLines(t, out,
		"copied 0 keys (0 B)",
		"skipped 41 keys unchanged: 41 same generation as when last copied",
		"kept 3 keys absent at the source (--delete removes them)",
		"keep   absent at source arr/c/1/1",
	)
	if got := mustZg(t, "", "get", a, "arr/c/1/1"); len(got) != 1024 {
		t.Fatalf("arr/c/1/1 was removed without --delete: %q", got)
	}

	out = mustZg(t, "", "cp", "--delete", "--prefix", "arr", srcDir, dst)
	wantLines(t, out,
		"copied 0 keys (0 B)",
		"skipped 40 keys unchanged: 40 same generation as when last copied",
		"deleted 2 keys absent at the source",
	)
	for _, k := range []string{"arr/c/1/1", "arr/extra"} {
		if _, errOut, code := zg(t, "", "get", a, k); code != 1 || !strings.Contains(errOut, "not found") {
			t.Errorf("%s after cp --delete: exit %d %s", k, code, errOut)
		}
	}
	if got := mustZg(t, "", "get", a, "other/x"); got != "other" {
		t.Errorf("other/x, outside --prefix, after cp --delete: %q", got)
	}

	out = mustZg(t, "", "cp", "--delete", srcDir, dst)
	wantLines(t, out, "copied 0 keys (0 B)", "skipped 41 keys unchanged: 41 same generation as when last copied", "deleted 1 key absent at the source")
	sameTrees(t, "after cp --delete", readTree(t, dstDir), readTree(t, srcDir))
}

// TestCLICopyDryRun changes, adds and removes keys at the source, and
// checks that cp --dry-run --delete lists exactly what a copy would do,
// changes neither the destination nor the copy record, and that the copy
// then does it.
func TestCLICopyDryRun(t *testing.T) {
	cache := isolateCopyRecords(t)
	srcDir, dst := t.TempDir(), t.TempDir()
	writeTree(t, srcDir, chunkTree())
	s := startServer(t, "--root", srcDir)
	src, a := "grpc://"+s.addr, "--addr="+s.addr
	mustZg(t, "", "cp", src, dst)

	mustZg(t, strings.Repeat("Z", 1024), "put", a, "arr/c/0/0")
	mustZg(t, "new value", "put", a, "arr/new")
	mustZg(t, "", "rm", a, "arr/c/0/1")
	before := readTree(t, dst)
	records := readTree(t, cache)
	if len(records) != 1 {
		t.Fatalf("copy records: %v", slices.Sorted(maps.Keys(records)))
	}

	out := mustZg(t, "", "cp", "--dry-run", "--delete", src, dst)
	want := "copy   content differs  arr/c/0/0\n" +
		"copy   new              arr/new\n" +
		"delete absent at source arr/c/0/1\n" +
		"would copy 2 keys (1.0 KiB): 1 new, 1 content differs\n" +
		"skipped 39 keys unchanged: 39 same generation as when last copied\n" +
		"would delete 1 key absent at the source\n" +
		"dry run: nothing was changed\n"
	if out != want {
		t.Errorf("cp --dry-run --delete printed\n%s\nwant\n%s", out, want)
	}
	sameTrees(t, "destination after --dry-run", readTree(t, dst), before)
	sameTrees(t, "copy record after --dry-run", readTree(t, cache), records)

	out = mustZg(t, "", "cp", "--delete", src, dst)
	wantLines(t, out,
		"copied 2 keys (1.0 KiB): 1 new, 1 content differs",
		"skipped 39 keys unchanged: 39 same generation as when last copied",
		"deleted 1 key absent at the source",
	)
	sameTrees(t, "after cp --delete", readTree(t, dst), readTree(t, srcDir))
}

// TestCLICopyProgressOnlyOnTerminal: the progress line, redrawn with "\r",
// is drawn when stderr is a terminal (a pseudo-terminal here) and left out
// of pipes and log files.
func TestCLICopyProgressOnlyOnTerminal(t *testing.T) {
	isolateCopyRecords(t)
	srcDir := t.TempDir()
	writeTree(t, srcDir, chunkTree())

	_, errOut, code := zg(t, "", "cp", srcDir, t.TempDir())
	if code != 0 || errOut != "" {
		t.Fatalf("cp with stderr a pipe: exit %d, stderr %q", code, errOut)
	}

	ptm, pts := openPTY(t)
	cmd := exec.Command(bin, "cp", srcDir, t.TempDir())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, pts
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pts.Close() // the child holds it; the master reads EIO once it exits
	screen, err := io.ReadAll(ptm)
	if errors.Is(err, syscall.EIO) {
		err = nil
	}
	if werr := cmd.Wait(); werr != nil || err != nil {
		t.Fatalf("cp with stderr a terminal: %v, %v\n%s%s", werr, err, out.String(), screen)
	}
	if !strings.Contains(string(screen), "copying 40.0 KiB / 40.0 KiB") || !strings.Contains(string(screen), "ETA") {
		t.Errorf("no progress line on the terminal: %q", screen)
	}
	if strings.Contains(out.String(), "ETA") || !strings.Contains(out.String(), "copied 41 keys") {
		t.Errorf("stdout: %q", out.String())
	}
}

// openPTY opens a pseudo-terminal pair: the master to read what is
// written to the slave.
func openPTY(t *testing.T) (ptm, pts *os.File) {
	t.Helper()
	ptm, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	t.Cleanup(func() { ptm.Close() })
	fd := int(ptm.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	pts, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	return ptm, pts
}
