package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zarrgate/zarrgate/internal/testenv"
)

// A netCDF dataset made with the CLI alone in netCDF-C 4.9.0's form
// (mkgroup --format nczarr-4.9) reads in Debian's ncdump 4.9.0 with its
// groups, dimensions and variables: the subgroup and the array inside take
// the root's form although they ask for plain nczarr, and a group made with
// missing parents gets them in its form.
func TestNcdumpReadsCLINCZarrLegacy(t *testing.T) {
	ncdump := testenv.Tool(t, "ncdump")
	root := filepath.Join(t.TempDir(), "ds.ncz")
	s := startServer(t, "--root", root)
	a := "--addr=" + s.addr

	if out := mustZg(t, "", "mkgroup", a, "/", "--format", "nczarr-4.9", "--dims", "x=3", "--attrs", `{"title": "cli"}`); strings.TrimSpace(out) != "created group / (nczarr-4.9)" {
		t.Fatalf("mkgroup /: %q", out)
	}
	mustZg(t, "", "mkgroup", a, "sub", "--format", "nczarr", "--dims", "level=2")
	// Uncompressed: Debian's netCDF 4.9.0 has no filter plugins.
	mustZg(t, "", "mkarray", a, "sub/v", "--format", "nczarr", "--shape", "3,2", "--dtype", "int32", "--dims", "x,level",
		"--fill", "-1", "--codecs", `[{"name":"bytes","configuration":{"endian":"little"}}]`)
	mustZg(t, "", "mkgroup", a, "model/run1", "--format", "nczarr")

	out, err := exec.Command(ncdump, "-h", "file://"+root+"#mode=nczarr,file").CombinedOutput()
	if err != nil {
		t.Fatalf("ncdump: %v\n%s", err, out)
	}
	text := strings.Join(strings.Fields(string(out)), " ")
	for _, w := range []string{
		"dimensions: x = 3 ;", `:title = "cli" ;`,
		"group: sub { dimensions: level = 2 ; variables: int v(x, level) ; } // group sub",
		"group: model { group: run1 {",
	} {
		if !strings.Contains(text, w) {
			t.Errorf("ncdump output lacks %q", w)
		}
	}
	for _, bad := range []string{"_nczarr", "_NCZARR", "_Anonymous"} {
		if strings.Contains(text, bad) {
			t.Errorf("ncdump output has %q", bad)
		}
	}
	if t.Failed() {
		t.Logf("ncdump output:\n%s", out)
	}

	// Dimensions are NCZarr's: asking for them in v3 is a usage error.
	if _, errOut, code := zg(t, "", "mkgroup", a, "other", "--dims", "x=3"); code != 2 || !strings.Contains(errOut, "nczarr") {
		t.Errorf("mkgroup --dims in v3: exit %d: %s", code, errOut)
	}
}
