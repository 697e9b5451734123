package e2e

import (
	"os/exec"
	"strings"
	"testing"
)

// --durability: by default a directory store fsyncs what a write stores
// before the write returns (each chunk's file, and its directory, once per
// group of concurrent renames), and says so in
// zarrgate_file_store_fsyncs_total; with --durability none (or
// ZARRGATE_DURABILITY=none) it makes no fsync, and the data reads back
// the same.
func TestDurability(t *testing.T) {
	const files = `zarrgate_file_store_fsyncs_total{kind="file"}`
	const dirs = `zarrgate_file_store_fsyncs_total{kind="dir"}`
	const sets = `zarrgate_store_calls_total{backend="file", code="OK", op="set"}`
	for _, c := range []struct {
		name string
		args []string
		env  string
		sync bool
	}{
		{"default", nil, "", true},
		{"flag fsync", []string{"--durability", "fsync"}, "", true},
		{"flag none", []string{"--durability", "none"}, "", false},
		{"env none", nil, "none", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.env != "" {
				t.Setenv("ZARRGATE_DURABILITY", c.env)
			}
			p := startWithAdmin(t, "serve", true, append([]string{"--root", t.TempDir()}, c.args...)...)
			scrape := func() []map[string]float64 { return []map[string]float64{p.scrape(t)} }
			b, w, _ := writeAndRead(t, p.addr, scrape)
			before, after := b[0], w[0]
			nset := delta(before, after, sets)
			if nset != 16 {
				t.Fatalf("%v chunk sets, want 16", nset)
			}
			nf, nd := delta(before, after, files), delta(before, after, dirs)
			if c.sync {
				if nf != nset || nd < 1 || nd > nset {
					t.Fatalf("16 chunks written: %v file and %v directory fsyncs; want 16, and 1 to 16", nf, nd)
				}
				t.Logf("16 chunks: %v file fsyncs, %v directory fsyncs", nf, nd)
			} else if after[files] != 0 || after[dirs] != 0 {
				t.Fatalf("--durability none: %v file and %v directory fsyncs, want none", after[files], after[dirs])
			}
		})
	}
	// Anything else is a usage error, on serve and store-worker alike.
	for _, sub := range []string{"serve", "store-worker"} {
		out, err := exec.Command(bin, sub, "--root", t.TempDir(), "--listen", "127.0.0.1:0", "--durability", "sometimes").CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "--durability sometimes: want fsync or none") {
			t.Errorf("%s --durability sometimes: %v\n%s", sub, err, out)
		}
	}
}
