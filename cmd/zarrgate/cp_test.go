package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zarrgate/zarrgate/storesvc"
)

func fileStore(t *testing.T, dir string) *storesvc.Portable {
	t.Helper()
	s, err := openStore(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return storesvc.Wrap(s)
}

// copyOnce runs copyStore between two directories with the record at
// recPath, as `zarrgate cp --record recPath` does, and returns the stats
// and the warnings.
func copyOnce(t *testing.T, srcDir, dstDir, recPath string, checksum bool) (*cpStats, string) {
	t.Helper()
	var warn, out bytes.Buffer
	o := &cpOptions{workers: 4, checksum: checksum, out: &out}
	o.record = openRecord(recPath, srcDir, dstDir, "", &warn)
	st, err := copyStore(context.Background(), fileStore(t, srcDir), fileStore(t, dstDir), o)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.record.save(); err != nil {
		t.Fatal(err)
	}
	return st, warn.String()
}

// A copy record is a cache: one that is corrupt or belongs to another pair
// of stores is ignored with a warning, and contents are compared instead.
// It never makes a copy skip a changed key.
func TestCopyRecordIgnoredWhenForeignOrCorrupt(t *testing.T) {
	srcDir, dstDir, otherDir := t.TempDir(), t.TempDir(), t.TempDir()
	rec := filepath.Join(t.TempDir(), "record.jsonl.gz")
	for i := range 20 {
		p := filepath.Join(srcDir, "c", fmt.Sprint(i))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, bytes.Repeat([]byte{byte(i)}, 100), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if st, _ := copyOnce(t, srcDir, dstDir, rec, false); st.copiedNew.Load() != 20 {
		t.Fatalf("first copy: %d new", st.copiedNew.Load())
	}
	if st, _ := copyOnce(t, srcDir, dstDir, rec, false); st.skippedGen.Load() != 20 {
		t.Fatalf("second copy: %d skipped by generation", st.skippedGen.Load())
	}

	// The same file named for another source: not used.
	st, warn := copyOnce(t, otherDir, dstDir, rec, false)
	if !strings.Contains(warn, "records a copy from") || st.skippedGen.Load() != 0 {
		t.Fatalf("a record of another copy: warning %q, %d skipped by generation", warn, st.skippedGen.Load())
	}

	// Corrupt: ignored, contents compared.
	copyOnce(t, srcDir, dstDir, rec, false)
	if err := os.WriteFile(rec, []byte("not gzip"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(srcDir, "c", "3"), bytes.Repeat([]byte{99}, 100), 0o644)
	st, warn = copyOnce(t, srcDir, dstDir, rec, false)
	if !strings.Contains(warn, "ignoring the copy record") || st.skippedSum.Load() != 19 || st.copiedContent.Load() != 1 {
		t.Fatalf("corrupt record: warning %q, %d same SHA-256, %d content differs", warn, st.skippedSum.Load(), st.copiedContent.Load())
	}
	// And rewritten: the next copy skips by generation again.
	if st, _ := copyOnce(t, srcDir, dstDir, rec, false); st.skippedGen.Load() != 20 {
		t.Fatalf("after rewriting the record: %d skipped by generation", st.skippedGen.Load())
	}
}

// Locations are recorded however the command line spelled them.
func TestCanonicalLocation(t *testing.T) {
	wd, _ := os.Getwd()
	for in, want := range map[string]string{
		"backup":                      "file://" + filepath.Join(wd, "backup"),
		"./backup/":                   "file://" + filepath.Join(wd, "backup"),
		"grpc://127.0.0.1:50051/":     "grpc://127.0.0.1:50051",
		"s3://bucket/prefix?region=x": "s3://bucket/prefix?region=x",
	} {
		if got := canonicalLocation(in); got != want {
			t.Errorf("canonicalLocation(%q) = %q, want %q", in, got, want)
		}
	}
}
