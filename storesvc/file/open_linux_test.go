package file

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
