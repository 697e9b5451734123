package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/zarrgate/zarrgate/internal/testenv"
)

// httpURLRE finds the store's URL in the "HTTP store endpoint up" line.
var httpURLRE = regexp.MustCompile(`http_url=(\S+)`)

// startHTTPServer runs `zarrgate serve --http-listen` on a free port over
// root, read-only, and returns the store's URL (http://host:port/zarr/).
func startHTTPServer(t *testing.T, root string, args ...string) (*server, string) {
	t.Helper()
	s := startServer(t, append([]string{"--root", root, "--read-only", "--http-listen", "127.0.0.1:0"}, args...)...)
	m := httpURLRE.FindStringSubmatch(s.logs.String())
	if m == nil {
		t.Fatalf("no http_url in the log:\n%s", s.logs.String())
	}
	return s, m[1]
}

// clientResult is what e2e/http's client scripts print.
type clientResult struct {
	Client   string   `json:"client"`
	Read     []string `json:"read"`
	Mismatch []string `json:"mismatch"`
	Skipped  []string `json:"skipped"`
}

func runClient(t *testing.T, cmd *exec.Cmd) clientResult {
	t.Helper()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var r clientResult
	if jerr := json.Unmarshal(bytes.TrimSpace(out), &r); jerr != nil || err != nil {
		t.Fatalf("%v: %v\nstdout: %s\nstderr: %s", cmd.Args, err, out, stderr.String())
	}
	if len(r.Mismatch) > 0 {
		t.Fatalf("%s read values that differ from the fixtures' (or failed): %v", r.Client, r.Mismatch)
	}
	return r
}

// needPython returns the test venv's python if it imports modules.
func needPython(t *testing.T, modules string) string {
	py := testenv.Python(t)
	if out, err := exec.Command(py, "-c", "import "+modules).CombinedOutput(); err != nil {
		if os.Getenv("ZARRGATE_INTEROP_REQUIRED") != "" {
			t.Fatalf("%s missing from %s but the interop checks are required: %s", modules, py, out)
		}
		t.Skipf("%s missing from %s: run scripts/deps.sh", modules, py)
	}
	return py
}

// npmCI installs e2e/http's node_modules as its package-lock.json pins
// them, unless a stamp says they already are (offline from then on).
func npmCI(t *testing.T, dir string) {
	t.Helper()
	if _, err := exec.LookPath("npm"); err != nil {
		if os.Getenv("ZARRGATE_INTEROP_REQUIRED") != "" {
			t.Fatal("node and npm are missing but the interop checks are required")
		}
		t.Skip("node and npm are missing")
	}
	h := sha256.New()
	for _, f := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		h.Write(b)
	}
	want := hex.EncodeToString(h.Sum(nil))
	stamp := filepath.Join(dir, "node_modules", ".zarrgate-lock-stamp")
	if got, _ := os.ReadFile(stamp); string(got) == want {
		return
	}
	cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
	}
	if err := os.WriteFile(stamp, []byte(want), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Unmodified HTTP Zarr readers — zarr-python through fsspec's HTTP
// filesystem, tensorstore's http kvstore, zarrita.js's FetchStore under
// Node — read the arrays zarr-python wrote (testdata/zarrpython) from
// `zarrgate serve --http-listen`, and get the values zarr-python recorded.
func TestHTTPClientsReadFixtures(t *testing.T) {
	fx, err := filepath.Abs(fixtures)
	if err != nil {
		t.Fatal(err)
	}
	_, url := startHTTPServer(t, filepath.Join(fx, "data"))
	mustRead := func(t *testing.T, r clientResult, min int, paths ...string) {
		t.Helper()
		if len(r.Read) < min {
			t.Errorf("%s read only %d arrays, want at least %d: %v", r.Client, len(r.Read), min, r.Read)
		}
		for _, p := range paths {
			if !slices.Contains(r.Read, p) {
				t.Errorf("%s did not read %s", r.Client, p)
			}
		}
		t.Logf("%s read %d arrays (skipped as unsupported by the client: %v)", r.Client, len(r.Read), r.Skipped)
	}
	t.Run("zarr-python/fsspec", func(t *testing.T) {
		py := needPython(t, "zarr, fsspec, aiohttp")
		r := runClient(t, exec.Command(py, "http/read_python.py", "zarr", url, fx))
		// Every v3 array, strings and sharding included, and a group's
		// members found through the virtual consolidated metadata.
		mustRead(t, r, 56, "v3/dtypes/string", "v3/shard/strings", "v3/shard/nested", "v3/shard/partial[corner]", "v3/codecs/blosc-zstd-bitshuffle",
			"v3/shard?consolidated:end,nested,partial,start,strings")
	})
	t.Run("tensorstore", func(t *testing.T) {
		py := needPython(t, "tensorstore")
		r := runClient(t, exec.Command(py, "http/read_python.py", "tensorstore", url, fx))
		mustRead(t, r, 49, "v3/dtypes/float64", "v3/shard/start", "v3/shard/start[corner]", "v3/shard/nested", "v3/codecs/zstd-checksum")
	})
	t.Run("zarrita.js", func(t *testing.T) {
		npmCI(t, "http")
		r := runClient(t, exec.Command("node", "http/read_zarrita.mjs", url, fx))
		mustRead(t, r, 42, "v3/dtypes/string", "v3/shard/strings", "v3/shard/end", "v3/codecs/transpose", "v3/dtypes/int64")
	})
}
