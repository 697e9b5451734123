package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "zarrgate.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// testFlags is a command's flag set as newFlags makes it (with --config),
// with four flags to set from each source.
func testFlags() (*flag.FlagSet, map[string]*string) {
	fs := newFlags("test", io.Discard)
	v := map[string]*string{}
	for _, n := range []string{"from-file", "from-env", "from-flag", "untouched"} {
		v[n] = fs.String(n, "def", "")
	}
	return fs, v
}

// TestConfigPrecedence: the command line beats the environment, which
// beats the file, which beats the default, whichever of them set a flag.
func TestConfigPrecedence(t *testing.T) {
	path := writeConfig(t, "from-file: file\nfrom-env: file\nfrom-flag: file\n")
	t.Setenv("ZARRGATE_FROM_ENV", "env")
	t.Setenv("ZARRGATE_FROM_FLAG", "env")
	for _, cfgArgs := range [][]string{{"--config", path}, {"--config=" + path}, nil} {
		if cfgArgs == nil {
			t.Setenv("ZARRGATE_CONFIG", path) // the file named by the environment
		}
		scratch, _ := testFlags()
		full, src, err := assembleArgs(scratch, append(cfgArgs, "--from-flag", "flag"))
		if err != nil {
			t.Fatal(err)
		}
		fs, v := testFlags()
		if err := parseFlags(fs, full); err != nil {
			t.Fatalf("%q: %v", full, err)
		}
		for name, want := range map[string]string{"from-file": "file", "from-env": "env", "from-flag": "flag", "untouched": "def"} {
			if *v[name] != want {
				t.Errorf("%v: --%s = %q, want %q (args %q)", cfgArgs, name, *v[name], want, full)
			}
		}
		for name, want := range map[string]string{"from-file": fromFile, "from-env": fromEnv, "from-flag": fromFlag, "untouched": fromDefault} {
			if got := src.of(name); got != want {
				t.Errorf("%v: source of --%s = %q, want %q", cfgArgs, name, got, want)
			}
		}
		if src.file != path {
			t.Errorf("config file %q, want %q", src.file, path)
		}
	}
}

// TestConfigFileMistakes: every mistake in a file is a usage error naming
// the key and its line, not a setting silently left at its default.
func TestConfigFileMistakes(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"from-file: a\nfrom_env: b\n", `line 2: unknown key "from_env": zarrgate test has no flag --from_env (did you mean "from-env"?)`},
		{"from-fiel: a\n", `unknown key "from-fiel"`},
		{"from-file: a\nfrom-env: b\nfrom-file: c\n", `line 3: key "from-file" repeats the one on line 1`},
		{"from-file: [a, b]\n", `line 1: key "from-file": want a single value`},
		{"from-file:\n", `key "from-file": want a single value`},
		{"config: other.yaml\n", `key "config": a configuration file cannot name another`},
		{"- from-file\n", "want a mapping of flag names to values"},
		{"from-file: a\n---\nfrom-env: b\n", "want one YAML document"},
		{"from-file: [a\n", "yaml"},
	} {
		fs, _ := testFlags()
		_, _, err := assembleArgs(fs, []string{"--config", writeConfig(t, c.text)})
		if !errors.As(err, new(usageError)) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want a usage error with %q", c.text, err, c.want)
		}
	}
	fs, _ := testFlags()
	if _, _, err := assembleArgs(fs, []string{"--config", filepath.Join(t.TempDir(), "missing.yaml")}); !errors.As(err, new(usageError)) {
		t.Errorf("missing file: %v, want a usage error", err)
	}
	// An empty file or document sets nothing.
	for _, text := range []string{"", "# nothing\n", "---\n"} {
		fs, _ := testFlags()
		if full, _, err := assembleArgs(fs, []string{"--config", writeConfig(t, text)}); err != nil || len(full) != 2 {
			t.Errorf("%q: %q, %v", text, full, err)
		}
	}
}

// TestConfigValuesChecked: a value the flag refuses is named with the
// file's line; values of every type are taken as written.
func TestConfigValuesChecked(t *testing.T) {
	fs := newFlags("serve", io.Discard)
	gatewayFlags(fs)
	_, _, err := assembleArgs(fs, []string{"--config", writeConfig(t, "memory-wait: 3s\nmemory-limit: lots\n")})
	if !errors.As(err, new(usageError)) || !strings.Contains(err.Error(), `line 2: memory-limit: "lots": want a size`) {
		t.Errorf("bad size: %v", err)
	}
	fs = newFlags("serve", io.Discard)
	gatewayFlags(fs)
	full, _, err := assembleArgs(fs, []string{"--config", writeConfig(t, "memory-limit: 2GiB\nshared-memory: false\nmetadata-ttl: 0\nparallelism: 3\nspill-dir: \"/tmp/a b\"\n")})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"--memory-limit=2GiB", "--shared-memory=false", "--metadata-ttl=0", "--parallelism=3", "--spill-dir=/tmp/a b"}
	if strings.Join(full[:len(want)], " ") != strings.Join(want, " ") {
		t.Errorf("args %q, want %q first", full, want)
	}
}

// TestRunConfigUsageError: the real serve command, given a file with an
// unknown key, exits with 2 and names the key, before serving anything.
func TestRunConfigUsageError(t *testing.T) {
	path := writeConfig(t, "listen: 127.0.0.1:0\nmemroy-limit: 1GiB\n")
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"serve", "--config", path, "--root", "memory://"}, &stdout, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), `unknown key "memroy-limit"`) {
		t.Errorf("exit %d, stderr %q", code, stderr.String())
	}
}

// TestGatewayFlagsConfig: every gateway.Config field a flag sets reaches
// the config, and the defaults are what the zero Config stands for.
func TestGatewayFlagsConfig(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "off") // the budget leaves this process's runtime limit alone
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	fs := newFlags("serve", io.Discard)
	gcfg := gatewayFlags(fs)
	if err := parseFlags(fs, []string{"--memory-limit", "1GiB"}); err != nil {
		t.Fatal(err)
	}
	def, _ := gcfg(logger)
	if def.MetadataTTL != 2*time.Second || def.Parallelism != 0 || def.BackgroundNice != 10 || def.MaxWriteAttempts != 64 || def.MaxSharedReads != 4 ||
		def.SharedMemoryBytes != 32<<20 || !def.SharedMemory || def.WriteBufferBytes != 256<<20 || def.SpillDir != "" ||
		def.MaxSlabBytes != 64<<30 || def.MaxSlabChunks != 1<<20 || def.Budget.Limit() != 1<<30 {
		t.Errorf("defaults: %+v", def)
	}
	fs = newFlags("serve", io.Discard)
	gcfg = gatewayFlags(fs)
	if err := parseFlags(fs, []string{"--memory-limit", "1GiB", "--metadata-ttl", "0", "--parallelism", "3", "--background-nice", "0", "--max-write-attempts", "5",
		"--max-shared-reads", "2", "--shared-memory-bytes", "4MiB", "--spill-dir", "/s", "--write-buffer-bytes", "1MiB"}); err != nil {
		t.Fatal(err)
	}
	c, _ := gcfg(logger)
	if c.MetadataTTL >= 0 || c.Parallelism != 3 || c.BackgroundNice >= 0 || c.MaxWriteAttempts != 5 || c.MaxSharedReads != 2 ||
		c.SharedMemoryBytes != 4<<20 || c.SpillDir != "/s" || c.WriteBufferBytes != 1<<20 {
		t.Errorf("set: %+v", c)
	}
	for _, args := range [][]string{{"--metadata-ttl", "-1s"}, {"--parallelism", "-1"}, {"--background-nice", "-1"}, {"--background-nice", "20"}, {"--max-write-attempts", "0"}, {"--max-shared-reads", "0"}, {"--max-slab-chunks", "0"}} {
		fs := newFlags("serve", io.Discard)
		gatewayFlags(fs)
		if err := parseFlags(fs, args); !errors.As(err, new(usageError)) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
}

// TestEffectiveConfigLog: at debug level every flag is logged with its
// value and source; secrets and URL passwords are not.
func TestEffectiveConfigLog(t *testing.T) {
	fs, _ := testFlags()
	fs.String("token", "", "")
	fs.String("root", "", "")
	if err := fs.Parse([]string{"--from-flag=x", "--token=s3cr3t", "--root=s3://user:hunter2@host/b"}); err != nil {
		t.Fatal(err)
	}
	src := &flagSources{file: "/etc/z.yaml", from: map[string]string{"from-flag": fromFlag, "from-file": fromFile, "token": fromEnv, "root": fromFlag}}
	ctx := context.WithValue(context.Background(), sourcesKey{}, src)
	var buf bytes.Buffer
	logEffectiveConfig(ctx, slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), fs)
	out := buf.String()
	for _, want := range []string{"effective configuration", "config_file=/etc/z.yaml", "from-flag.value=x from-flag.from=flag",
		"from-file.value=def from-file.from=file", "untouched.value=def untouched.from=default", "token.value=REDACTED token.from=env",
		"root.value=s3://user:xxxxx@host/b"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "s3cr3t") || strings.Contains(out, "hunter2") {
		t.Errorf("secret logged:\n%s", out)
	}
	buf.Reset()
	logEffectiveConfig(ctx, slog.New(slog.NewTextHandler(&buf, nil)), fs)
	if buf.Len() != 0 {
		t.Errorf("logged at info level: %s", buf.String())
	}
}
