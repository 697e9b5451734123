package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWithDefaultPort(t *testing.T) {
	for in, want := range map[string]string{
		"localhost":            "localhost:50051",
		"10.0.0.5":             "10.0.0.5:50051",
		"::1":                  "[::1]:50051",
		"[::1]":                "[::1]:50051",
		"localhost:7000":       "localhost:7000",
		"[::1]:7000":           "[::1]:7000",
		"unix:///tmp/zg.sock":  "unix:///tmp/zg.sock",
		"unix:zg.sock":         "unix:zg.sock",
		"dns:///gw.example:80": "dns:///gw.example:80",
		"":                     "",
	} {
		if got := withDefaultPort(in); got != want {
			t.Errorf("withDefaultPort(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestTextString(t *testing.T) {
	for in, want := range map[string]string{
		"plain": "plain", "ünï✓": "ünï✓", "": `""`, "a b": `"a b"`, "a\tb": `"a\tb"`, "a\nb": `"a\nb"`,
		`"q"`: `"\"q\""`, `x"y`: `"x\"y"`, `a\b`: `"a\\b"`, "\xff": `"\xff"`, "nbsp\u00a0": `"nbsp\u00a0"`,
	} {
		if got := textString(in); got != want {
			t.Errorf("textString(%q) = %s, want %s", in, got, want)
		}
	}
}

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
