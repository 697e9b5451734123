package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigFileAndPrecedence runs `zarrgate serve` with a --config file,
// environment variables and flags that set the same settings, and reads
// the effective configuration it logs at debug level: the command line
// wins over the environment, the environment over the file, the file over
// the default.
func TestConfigFileAndPrecedence(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "zarrgate.yaml")
	if err := os.WriteFile(cfg, []byte(`# serve's flags, by name
log-level: debug
root: `+filepath.Join(dir, "data")+`
memory-limit: 64MiB
metadata-ttl: 5s
max-write-attempts: 7
parallelism: 3
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--config", cfg, "--parallelism", "5")
	cmd.Env = append(os.Environ(), "ZARRGATE_MAX_WRITE_ATTEMPTS=9", "ZARRGATE_PARALLELISM=4", "ZARRGATE_TOKEN=", "ZARRGATE_CONFIG=")
	s := startCmd(t, cmd)
	logs := s.logs.String()
	for _, want := range []string{
		"msg=\"effective configuration\" config_file=" + cfg,
		"parallelism.value=5 parallelism.from=flag",
		"max-write-attempts.value=9 max-write-attempts.from=env",
		"metadata-ttl.value=5s metadata-ttl.from=file",
		"memory-limit.value=67108864 memory-limit.from=file",
		"log-level.value=debug log-level.from=file",
		"max-slab-chunks.value=1048576 max-slab-chunks.from=default",
		"listen.value=127.0.0.1:0 listen.from=flag",
		"config.value=" + cfg + " config.from=flag",
		"msg=\"memory budget\" bytes=67108864",
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q", want)
		}
	}
	// The file's root is the one served.
	if _, err := os.Stat(filepath.Join(dir, "data")); err != nil {
		t.Errorf("the file's --root was not used: %v", err)
	}
}

// TestConfigFileMistakesExit2: unknown and repeated keys, and values a
// flag refuses, are usage errors (exit 2) naming the key, on stderr.
func TestConfigFileMistakesExit2(t *testing.T) {
	dir := t.TempDir()
	for i, c := range []struct{ text, want string }{
		{"memory-limit: 1GiB\nmemroy-wait: 5s\n", `line 2: unknown key "memroy-wait"`},
		{"metadata-ttl: 1s\nmetadata-ttl: 2s\n", `line 2: key "metadata-ttl" repeats the one on line 1`},
		{"memory-limit: plenty\n", `line 1: memory-limit: "plenty": want a size`},
		{"tokens: [a, b]\n", `key "tokens": want a single value`},
	} {
		p := filepath.Join(dir, string(rune('a'+i))+".yaml")
		if err := os.WriteFile(p, []byte(c.text), 0o600); err != nil {
			t.Fatal(err)
		}
		// From the flag and from ZARRGATE_CONFIG alike.
		for _, env := range [][]string{nil, {"ZARRGATE_CONFIG=" + p}} {
			args := []string{"gateway", "--store", "127.0.0.1:1"}
			if env == nil {
				args = append(args, "--config", p)
			}
			out, errOut, code := zgEnv(t, env, "", args...)
			if code != 2 || !strings.Contains(errOut, c.want) || out != "" {
				t.Errorf("%q (env %q): exit %d, stdout %q, stderr %q; want exit 2 naming %q", c.text, env, code, out, errOut, c.want)
			}
		}
	}
	// Help is on stdout, and names --config and the precedence.
	out, _, code := zg(t, "", "help", "serve")
	if code != 0 || !strings.Contains(out, "--config string") || !strings.Contains(out, "the environment over the file") {
		t.Errorf("help: exit %d\n%s", code, out)
	}
}
