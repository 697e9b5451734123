package file

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/storesvc"
)

// TestGetOpensBeneath: on Linux, Get opens values with openat2 from the
// root's directory (not os.Root's walk): values read back, missing keys
// and keys under a file are NotFound, and symlinks out of the root
// (absolute, relative through "..", to a directory or a file) are
// PermissionDenied, as os.Root has them.
func TestGetOpensBeneath(t *testing.T) {
	ctx := context.Background()
	s, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Set(ctx, "a/c/0/1", strings.NewReader("value"), storesvc.Condition{}); err != nil {
		t.Fatal(err)
	}
	obj, err := s.Get(ctx, "a/c/0/1", storesvc.Bounded(1, 3))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(obj)
	obj.Close()
	if string(got) != "alu" || obj.Size != 5 {
		t.Fatalf("Get read %q of a value of %d bytes", got, obj.Size)
	}
	if s.beneath.dir == nil || s.beneath.off.Load() {
		t.Fatal("Get did not open with openat2")
	}
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"abs": outside, "absfile": filepath.Join(outside, "secret"), "a/up": "../.."} {
		if err := os.Symlink(target, filepath.Join(s.Dir(), link)); err != nil {
			t.Fatal(err)
		}
	}
	for key, code := range map[string]errs.Code{
		"a/c/0/2": errs.CodeNotFound, "a/c/0/1/x": errs.CodeNotFound,
		"abs/secret": errs.CodePermissionDenied, "absfile": errs.CodePermissionDenied, "a/up/" + filepath.Base(outside) + "/secret": errs.CodePermissionDenied,
	} {
		if _, err := s.Get(ctx, key, storesvc.ByteRange{}); errs.CodeOf(err) != code {
			t.Errorf("Get(%q): %v, want %v", key, err, code)
		}
	}
	if s.beneath.off.Load() {
		t.Error("openat2 was turned off")
	}
}

// fileInfo is an fs.FileInfo without a Stat_t (as on other systems).
type fileInfo struct {
	fs.FileInfo
}

func (fileInfo) Sys() any { return nil }

// TestGenerationFormat: generation is "%x.%x.%x" of the inode, the mtime
// in nanoseconds and the size (without an inode: of the mtime and the
// size), mtimes before 1970 included: generations stored by earlier
// versions stay valid conditions.
func TestGenerationFormat(t *testing.T) {
	p := filepath.Join(t.TempDir(), "v")
	if err := os.WriteFile(p, []byte("12345"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, mtime := range []time.Time{time.Unix(1_700_000_000, 123456789), time.Unix(-100, 5), time.Unix(0, 0)} {
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if got, want := generation(fi), fmt.Sprintf("%x.%x.%x", st.Ino, fi.ModTime().UnixNano(), fi.Size()); got != want {
			t.Errorf("generation %q, want %q", got, want)
		}
		if got, want := generation(fileInfo{fi}), fmt.Sprintf("%x.%x", fi.ModTime().UnixNano(), fi.Size()); got != want {
			t.Errorf("generation without an inode %q, want %q", got, want)
		}
	}
}
