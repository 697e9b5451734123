// Package testenv finds the external tools interop tests run against: the
// pinned Python venv (zarr-python, numcodecs) and netCDF's ncgen/ncdump.
// `make test` provides them and sets ZARRGATE_INTEROP_REQUIRED, so a
// missing tool fails CI instead of quietly skipping; a developer without
// them gets a skip that says how to get them.
package testenv

import (
	"os"
	"os/exec"
	"testing"
)

func missing(t testing.TB, what, how string) {
	t.Helper()
	if os.Getenv("ZARRGATE_INTEROP_REQUIRED") != "" {
		t.Fatalf("%s is missing but the interop checks are required: %s", what, how)
	}
	t.Skipf("%s is missing: %s (make test does)", what, how)
}

// Python returns $ZARRGATE_PYTHON, a python with the pinned zarr-python and
// numcodecs.
func Python(t testing.TB) string {
	t.Helper()
	py := os.Getenv("ZARRGATE_PYTHON")
	if py == "" {
		missing(t, "ZARRGATE_PYTHON", "run scripts/deps.sh and set it to the venv's python")
	}
	return py
}

// Tool returns the path of a command such as ncgen or ncdump.
func Tool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		missing(t, name, "apt-get install netcdf-bin")
	}
	return p
}

// Chromium returns the path of Debian's chromium (scripts/deps.sh
// installs it), for tests that load the browser view headless.
func Chromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	missing(t, "chromium", "apt-get install chromium (scripts/deps.sh does)")
	return ""
}
