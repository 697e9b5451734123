package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
)

// TestBulkListenAddr: --bulk-listen's values, and auto's choice from
// --listen (a loopback TCP address only).
func TestBulkListenAddr(t *testing.T) {
	for _, c := range []struct {
		def, listen, bulk, want string
	}{
		{"auto", "127.0.0.1:50051", "auto", "127.0.0.1:0"},
		{"auto", "localhost:7", "auto", "localhost:0"},
		{"auto", "[::1]:50051", "auto", "[::1]:0"},
		{"auto", "0.0.0.0:50051", "auto", ""},
		{"auto", ":50051", "auto", ""},
		{"auto", "unix:///tmp/zg.sock", "auto", ""},
		{"auto", "127.0.0.1:50051", "off", ""},
		{"off", "127.0.0.1:50051", "off", ""},
		{"off", "127.0.0.1:50051", "127.0.0.1:9000", "127.0.0.1:9000"},
	} {
		fs := newFlags("bulktest", io.Discard)
		sf := addServerFlags(fs, "127.0.0.1:50051")
		bf := addBulkFlags(fs, sf, c.def)
		if err := parseFlags(fs, []string{"--insecure", "--listen", c.listen, "--bulk-listen", c.bulk}); err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if got, err := bf.addr(); err != nil || got != c.want {
			t.Errorf("--listen %s --bulk-listen %s: %q, %v; want %q", c.listen, c.bulk, got, err, c.want)
		}
	}
	// Mistakes are usage errors (exit code 2), before anything starts.
	for _, args := range [][]string{
		{"--bulk-listen", "nowhere"},
		{"--bulk-listen", "0.0.0.0:0"},
	} {
		var stderr bytes.Buffer
		code := run(context.Background(), append([]string{"serve", "--root", t.TempDir(), "--listen", "127.0.0.1:0"}, args...), io.Discard, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), "--bulk-listen") {
			t.Errorf("serve %v: exit %d\n%s", args, code, stderr.String())
		}
	}
}
