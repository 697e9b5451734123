package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCheckRoot(t *testing.T) {
	base := t.TempDir()
	for _, c := range []struct {
		root   string
		create bool
		ok     bool
	}{
		{base, false, true},
		{filepath.Join(base, "new"), false, true},     // parent exists
		{filepath.Join(base, "a", "b"), false, false}, // parent missing
		{filepath.Join(base, "a", "b"), true, true},   // --create
		{"file://" + filepath.Join(base, "x", "y"), false, false},
		{"memory://", false, true},
	} {
		if err := checkRoot(c.root, c.create); (err == nil) != c.ok {
			t.Errorf("checkRoot(%q, %v) = %v", c.root, c.create, err)
		}
	}
	if _, err := os.Stat(filepath.Join(base, "a")); !os.IsNotExist(err) {
		t.Errorf("checkRoot created a directory")
	}
}
