package e2e

// The command line's conventions, run against the real binary: help on
// stdout, --version, flags from the environment, NumPy selections and
// their errors, RFC 4180 CSV, --all, put -v, info's wording, --addr with a
// host alone and serve --root on a missing path.

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/client"
)

// zgEnv runs the zarrgate binary with extra environment variables and
// returns its stdout, stderr and exit code.
func zgEnv(t *testing.T, env []string, stdin string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("zarrgate %q: %v", args, err)
	}
	return out.String(), errb.String(), code
}

func TestCLIHelpOnStdout(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		out, errOut, code := zg(t, "", args...)
		if code != 0 || errOut != "" || !strings.Contains(out, "usage: zarrgate <command>") || !strings.Contains(out, "mkarray") {
			t.Errorf("zarrgate %q: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
	catHelp, errOut, code := zg(t, "", "cat", "--help")
	if code != 0 || errOut != "" {
		t.Fatalf("cat --help: exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{
		"usage: zarrgate cat [flags] PATH [SELECTION]\n\nPrint a selection of an array as text, CSV or .npy.\n",
		"\n  --format string\n", "\n  --addr string\n", "\n  --all\n", "\n  -o string\n",
		"ZARRGATE_ADDR", "...", // the selection's forms and the environment are documented
	} {
		if !strings.Contains(catHelp, want) {
			t.Errorf("cat --help lacks %q:\n%s", want, catHelp)
		}
	}
	if strings.Contains(catHelp, "  -format") || strings.Contains(catHelp, "Usage of") {
		t.Errorf("cat --help writes flags as Go does:\n%s", catHelp)
	}
	// help COMMAND is the command's help, not the command list.
	if out, errOut, code := zg(t, "", "help", "cat"); code != 0 || out != catHelp || errOut != "" {
		t.Errorf("help cat: exit %d, stderr %q, stdout differs from cat --help:\n%s", code, errOut, out)
	}
	out, _, code := zg(t, "", "help", "serve")
	if code != 0 || !strings.Contains(out, "usage: zarrgate serve [flags]") || !strings.Contains(out, "\n  --listen string\n") || !strings.Contains(out, "\n  --create\n") {
		t.Errorf("help serve: exit %d:\n%s", code, out)
	}
	// Mistakes go to stderr with exit 2.
	if out, errOut, code := zg(t, ""); code != 2 || out != "" || !strings.Contains(errOut, "usage: zarrgate") {
		t.Errorf("zarrgate alone: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, errOut, code := zg(t, "", "help", "nosuch"); code != 2 || !strings.Contains(errOut, "nosuch") {
		t.Errorf("help nosuch: exit %d, stderr %q", code, errOut)
	}
	out, errOut, code = zg(t, "", "cat", "--bogus", "x")
	if code != 2 || out != "" || !strings.Contains(errOut, "not defined: --bogus") || !strings.Contains(errOut, "zarrgate help cat") {
		t.Errorf("cat --bogus: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// --version and version print the module version, VCS revision (when the
// build recorded one) and Go version that `go version -m` reads from the
// binary, and what does the codec work, as the build's tags say (the
// pure-Go build by default; the image's cgocodecs one under make
// test-cgocodecs, through $ZARRGATE_E2E_BIN).
func TestCLIVersion(t *testing.T) {
	out, errOut, code := zg(t, "", "--version")
	if code != 0 || errOut != "" {
		t.Fatalf("--version: exit %d, stderr %q", code, errOut)
	}
	if out2 := mustZg(t, "", "version"); out2 != out {
		t.Errorf("version = %q, --version = %q", out2, out)
	}
	info, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	modVersion := regexp.MustCompile(`(?m)^\tmod\t\S+\t(\S+)`).FindSubmatch(info)
	if modVersion == nil {
		t.Fatalf("go version -m: no mod line:\n%s", info)
	}
	want := []string{"zarrgate " + string(modVersion[1]), runtime.Version()}
	if rev := regexp.MustCompile(`(?m)^\tbuild\tvcs\.revision=(\S+)`).FindSubmatch(info); rev != nil {
		want = append(want, "revision "+string(rev[1]))
	}
	for _, w := range want {
		if !strings.HasPrefix(out, "zarrgate ") || !strings.Contains(out, w) {
			t.Errorf("--version = %q; lacks %q", out, w)
		}
	}
	// What does the codec work, as the build's tags say it should be.
	codecs := regexp.MustCompile(`^pure Go$`)
	if tags := regexp.MustCompile(`(?m)^\tbuild\t-tags=(\S+)`).FindSubmatch(info); tags != nil && slices.Contains(strings.Split(string(tags[1]), ","), "cgocodecs") {
		codecs = regexp.MustCompile(`^libzstd \d+\.\d+\.\d+, libdeflate \d+\.\d+$`)
	}
	if _, c, ok := strings.Cut(strings.TrimSpace(out), ", codecs: "); !ok || !codecs.MatchString(c) {
		t.Errorf("--version = %q; want its codecs to match %s", out, codecs)
	}
}

// Every flag can come from $ZARRGATE_<FLAG>; the command line wins; a bad
// value is a usage error naming the variable.
func TestCLIFlagsFromEnvironment(t *testing.T) {
	s := startServer(t, "--root", t.TempDir())
	mustZg(t, "", "mkarray", "--addr="+s.addr, "m", "--shape", "2,2", "--dtype", "int8", "--fill", "3")

	env := []string{"ZARRGATE_ADDR=" + s.addr, "ZARRGATE_FORMAT=csv"}
	if out, errOut, code := zgEnv(t, env, "", "cat", "m"); code != 0 || out != "3,3\n3,3\n" {
		t.Fatalf("cat with $ZARRGATE_FORMAT=csv: exit %d, %q %s", code, out, errOut)
	}
	if out, errOut, code := zgEnv(t, env, "", "cat", "m", "--format", "text"); code != 0 || out != "3 3\n3 3\n" {
		t.Fatalf("cat --format text over $ZARRGATE_FORMAT: exit %d, %q %s", code, out, errOut)
	}
	// The command line's --addr wins over a wrong one in the environment.
	env = []string{"ZARRGATE_ADDR=127.0.0.1:1", "ZARRGATE_TIMEOUT=1m"}
	if out, errOut, code := zgEnv(t, env, "", "ls", "--addr", s.addr); code != 0 || !strings.Contains(out, "m ") {
		t.Fatalf("ls --addr over $ZARRGATE_ADDR: exit %d, %q %s", code, out, errOut)
	}
	// Dashes become underscores: --if-absent.
	mustZg(t, "one", "put", "--addr="+s.addr, "raw/k")
	if _, errOut, code := zgEnv(t, []string{"ZARRGATE_IF_ABSENT=true"}, "two", "put", "--addr="+s.addr, "raw/k"); code != 1 || !strings.Contains(errOut, "already exists") {
		t.Fatalf("put with $ZARRGATE_IF_ABSENT over a key: exit %d: %s", code, errOut)
	}
	for _, c := range []struct {
		env  string
		args []string
	}{
		{"ZARRGATE_TIMEOUT=soon", []string{"ls", "--addr=" + s.addr}},
		{"ZARRGATE_R=maybe", []string{"ls", "--addr=" + s.addr}},
		{"ZARRGATE_MAX_SLAB_BYTES=lots", []string{"serve", "--root", t.TempDir(), "--listen", "127.0.0.1:0"}},
	} {
		name := strings.SplitN(c.env, "=", 2)[0]
		out, errOut, code := zgEnv(t, []string{c.env}, "", c.args...)
		if code != 2 || out != "" || !strings.Contains(errOut, name) {
			t.Errorf("%s zarrgate %q: exit %d, stdout %q, stderr %q", c.env, c.args, code, out, errOut)
		}
	}
}

// writeInt16s fills an int16 array with 0, 1, 2, ... through the Go
// client.
func writeInt16s(t *testing.T, addr, path string, shape []int64) {
	t.Helper()
	ctx := context.Background()
	c, err := client.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, err := c.OpenArray(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	vals := make([]int16, n)
	for i := range vals {
		vals[i] = int16(i)
	}
	if _, err := client.Write(ctx, a, nil, vals); err != nil {
		t.Fatal(err)
	}
}

func TestCLISelections(t *testing.T) {
	s := startServer(t, "--root", t.TempDir())
	a := "--addr=" + s.addr
	mustZg(t, "", "mkarray", a, "m", "--shape", "4,5", "--dtype", "int16", "--chunks", "3,2")
	writeInt16s(t, s.addr, "m", []int64{4, 5})
	for sel, want := range map[string]string{
		"-1":       "15 16 17 18 19\n",
		":,-1":     "4\n9\n14\n19\n",
		"...,1:3":  "1 2\n6 7\n11 12\n16 17\n",
		"1:-1,::2": "5 7 9\n10 12 14\n",
		"-2:,-2:":  "13 14\n18 19\n",
		"...":      "0 1 2 3 4\n5 6 7 8 9\n10 11 12 13 14\n15 16 17 18 19\n",
		"-4,...,0": "0\n",
	} {
		if out, errOut, code := zg(t, "", "cat", a, "m", sel); code != 0 || out != want {
			t.Errorf("cat m %q: exit %d, %q, want %q %s", sel, code, out, want, errOut)
		}
	}
	for sel, wants := range map[string][]string{
		"0:a":   {`dimension 0 ("0:a")`, `stop "a" is not an integer`},
		"1,x":   {`dimension 1 ("x")`, `"x" is not an integer`},
		"3:1":   {`dimension 0 ("3:1")`, "start 3 is after stop 1"},
		"0:9":   {`dimension 0 ("0:9")`, "stop 9 is outside the dimension's length 4"},
		"0,-6":  {`dimension 1 ("-6")`, "index -6 is outside the dimension's length 5"},
		"::-1":  {`dimension 0 ("::-1")`, "negative steps are not supported"},
		"1,2,3": {"names 3 dimensions, but the array has 2 dimensions"},
	} {
		out, errOut, code := zg(t, "", "cat", a, "m", sel)
		if code != 2 || out != "" {
			t.Errorf("cat m %q: exit %d, stdout %q, stderr %q", sel, code, out, errOut)
		}
		for _, w := range wants {
			if !strings.Contains(errOut, w) {
				t.Errorf("cat m %q: %q lacks %q", sel, errOut, w)
			}
		}
		if strings.Contains(errOut, "1 dimensions") || strings.Contains(errOut, "outside [0,") {
			t.Errorf("cat m %q misleads: %q", sel, errOut)
		}
	}
}

// trickyStrings are strings a CSV or text writer must quote or escape.
var trickyStrings = []string{
	"plain", "with space", "tab\there", "new\nline", "crlf\r\nend", `quote"inside`, `"quoted"`,
	"comma,separated", "", "ünïcødé ✓", "日本語", `back\slash`, " leading", "trailing ", "semi;colon", "emoji 🎉",
}

// writeStrings makes a string array of shape holding trickyStrings in C
// order (repeated as needed).
func writeStrings(t *testing.T, addr, path string, shape []int64) []string {
	t.Helper()
	ctx := context.Background()
	c, err := client.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	arr, err := c.CreateArray(ctx, path, client.ArraySpec{Shape: shape, DataType: "string"})
	if err != nil {
		t.Fatal(err)
	}
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	vals := make([]string, n)
	for i := range vals {
		vals[i] = trickyStrings[i%len(trickyStrings)]
	}
	if _, err := client.WriteStrings(ctx, arr, nil, vals); err != nil {
		t.Fatal(err)
	}
	return vals
}

// rows splits C-order values into rows of the last dimension.
func rows(vals []string, shape []int64) [][]string {
	w := int(shape[len(shape)-1])
	var out [][]string
	for i := 0; i < len(vals); i += w {
		out = append(out, vals[i:i+w])
	}
	return out
}

// pythonCSV is a Python with the csv module: the venv's, else python3.
func pythonCSV(t *testing.T) string {
	for _, p := range []string{os.Getenv("ZARRGATE_PYTHON"), filepath.Join(os.Getenv("HOME"), ".cache/zarrgate/venv-client/bin/python3")} {
		if p != "" {
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	if p, err := exec.LookPath("python3"); err == nil {
		return p
	}
	return ""
}

// cat --format csv is RFC 4180: Go's encoding/csv and Python's csv module
// read back every string; text output quotes what would be ambiguous.
func TestCLICatCSVAndText(t *testing.T) {
	s := startServer(t, "--root", t.TempDir())
	a := "--addr=" + s.addr
	py := pythonCSV(t)
	for _, shape := range [][]int64{{16}, {4, 4}, {16, 1}, {2, 2, 4}} {
		path := fmt.Sprintf("s%d", len(shape)) + strings.Trim(strings.ReplaceAll(fmt.Sprint(shape), " ", "x"), "[]")
		vals := writeStrings(t, s.addr, path, shape)
		want := rows(vals, shape)

		csvOut := mustZg(t, "", "cat", a, "--format", "csv", path)
		r := csv.NewReader(strings.NewReader(csvOut))
		got, err := r.ReadAll()
		if err != nil {
			t.Fatalf("%v: encoding/csv reads cat's CSV: %v\n%s", shape, err, csvOut)
		}
		// encoding/csv turns \r\n inside a quoted field into \n (documented);
		// Python's reader below checks the bytes exactly.
		goWant := make([][]string, len(want))
		for i, row := range want {
			for _, v := range row {
				goWant[i] = append(goWant[i], strings.ReplaceAll(v, "\r\n", "\n"))
			}
		}
		if !equalRows(got, goWant) {
			t.Errorf("%v: encoding/csv reads\n%q\nwant\n%q\nfrom\n%s", shape, got, goWant, csvOut)
		}
		if py != "" {
			f := filepath.Join(t.TempDir(), "out.csv")
			os.WriteFile(f, []byte(csvOut), 0o644)
			out, err := exec.Command(py, "-c", "import csv,json,sys; print(json.dumps(list(csv.reader(open(sys.argv[1], newline='', encoding='utf-8')))))", f).Output()
			var pyRows [][]string
			if err != nil || json.Unmarshal(out, &pyRows) != nil {
				t.Fatalf("%v: python csv: %v %s", shape, err, out)
			}
			if !equalRows(pyRows, want) {
				t.Errorf("%v: Python's csv reads\n%q\nwant\n%q", shape, pyRows, want)
			}
		}

		text := mustZg(t, "", "cat", a, path)
		var textRows [][]string
		for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
			if line == "" && len(shape) > 2 {
				continue // between planes
			}
			row, err := splitText(line)
			if err != nil {
				t.Fatalf("%v: text line %q: %v", shape, line, err)
			}
			textRows = append(textRows, row)
		}
		if !equalRows(textRows, want) {
			t.Errorf("%v: text output reads back as\n%q\nwant\n%q\nfrom\n%s", shape, textRows, want, text)
		}
	}
	if py == "" {
		t.Log("no python3: Python's csv reader not checked")
	}
}

// splitText splits a line of cat's text output: elements separated by
// single spaces, each bare or a Go-quoted string.
func splitText(line string) ([]string, error) {
	var out []string
	for {
		var v string
		if strings.HasPrefix(line, `"`) {
			q, err := strconv.QuotedPrefix(line)
			if err != nil {
				return nil, err
			}
			if v, err = strconv.Unquote(q); err != nil {
				return nil, err
			}
			line = line[len(q):]
		} else {
			i := strings.IndexByte(line, ' ')
			if i < 0 {
				i = len(line)
			}
			v, line = line[:i], line[i:]
		}
		out = append(out, v)
		if line == "" {
			return out, nil
		}
		if line[0] != ' ' {
			return nil, fmt.Errorf("no space after element %q", v)
		}
		line = line[1:]
	}
}

func equalRows(a, b [][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if strings.Join(a[i], "\x00") != strings.Join(b[i], "\x00") || len(a[i]) != len(b[i]) {
			return false
		}
	}
	return true
}

func TestCLICatAll(t *testing.T) {
	s := startServer(t, "--root", t.TempDir())
	a := "--addr=" + s.addr
	mustZg(t, "", "mkarray", a, "big", "--shape", "1025,1024", "--dtype", "int8", "--chunks", "512,512")
	mustZg(t, "", "mkarray", a, "small", "--shape", "1024,1024", "--dtype", "int8", "--chunks", "512,512")
	out, errOut, code := zg(t, "", "cat", a, "big")
	if code != 2 || out != "" || !strings.Contains(errOut, "--all") || !strings.Contains(errOut, "1049600 elements") || !strings.Contains(errOut, "1 Mi") {
		t.Fatalf("cat of 1025x1024 elements: exit %d, stderr %q", code, errOut)
	}
	if out := mustZg(t, "", "cat", a, "big", "--all"); strings.Count(out, "\n") != 1025 {
		t.Fatalf("cat --all: %d lines", strings.Count(out, "\n"))
	}
	if out := mustZg(t, "", "cat", a, "big", "-1"); strings.Count(out, "0") != 1024 {
		t.Fatalf("cat big -1: %q", out)
	}
	if out := mustZg(t, "", "cat", a, "small"); strings.Count(out, "\n") != 1024 { // 1 Mi exactly needs no --all
		t.Fatalf("cat small: %d lines", strings.Count(out, "\n"))
	}
	npy := filepath.Join(t.TempDir(), "big.npy")
	mustZg(t, "", "cat", a, "big", "--format", "npy", "-o", npy) // to a file: no --all needed
	if fi, err := os.Stat(npy); err != nil || fi.Size() < 1025*1024 {
		t.Fatalf("cat -o: %v", err)
	}
}

func TestCLIPutVerbose(t *testing.T) {
	s := startServer(t, "--root", t.TempDir())
	a := "--addr=" + s.addr
	if out, errOut, code := zg(t, "v1", "put", a, "k"); code != 0 || out != "" || errOut != "" {
		t.Fatalf("put: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, errOut, code := zg(t, "v2", "put", a, "-v", "k")
	if code != 0 || out != "" || !regexp.MustCompile(`^k generation \S+\n$`).MatchString(errOut) {
		t.Fatalf("put -v: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestCLIInfoWording(t *testing.T) {
	s := startServer(t, "--root", t.TempDir())
	a := "--addr=" + s.addr
	mustZg(t, "", "mkarray", a, "v3", "--shape", "4", "--dtype", "int8")
	mustZg(t, "", "mkarray", a, "v2", "--shape", "4", "--dtype", "int8", "--format", "v2")
	out := mustZg(t, "", "info", a, "v3")
	if !strings.Contains(out, "format:      Zarr v3\n") || !strings.Contains(out, " in 1 key\n") {
		t.Errorf("info v3:\n%s", out)
	}
	out = mustZg(t, "", "info", a, "v2")
	if !strings.Contains(out, "format:      Zarr v2\n") || !regexp.MustCompile(` in [2-9] keys\n`).MatchString(out) {
		t.Errorf("info v2:\n%s", out)
	}
	if strings.Contains(out, "FORMAT_") {
		t.Errorf("info shows an enum name:\n%s", out)
	}
}

// --addr with a host alone dials the default port 50051, not gRPC's 443.
func TestCLIAddrHostOnly(t *testing.T) {
	if l, err := net.Listen("tcp", "127.0.0.1:50051"); err == nil {
		l.Close()
		s := startServer(t, "--root", t.TempDir(), "--listen", "127.0.0.1:50051") // the later --listen wins
		mustZg(t, "", "mkarray", "--addr="+s.addr, "here", "--shape", "1")
		for _, addr := range []string{"127.0.0.1", "localhost"} {
			if out := mustZg(t, "", "ls", "--addr", addr, "--timeout", "20s"); !strings.Contains(out, "here") {
				t.Errorf("ls --addr %s: %q", addr, out)
			}
		}
		return
	}
	// Something else holds 50051: what is dialled shows in the error.
	_, errOut, _ := zg(t, "", "ls", "--addr", "127.0.0.1", "--timeout", "5s")
	if !strings.Contains(errOut, "50051") || strings.Contains(errOut, ":443") {
		t.Errorf("ls --addr 127.0.0.1 with 50051 taken: %s", errOut)
	}
}

// serve --root on a missing path: created if its parent exists, else only
// with --create; a typo does not silently grow a tree of directories.
func TestServeRootMissing(t *testing.T) {
	base := t.TempDir()
	deep := filepath.Join(base, "typo", "data", "store")
	for _, cmd := range []string{"serve", "store-worker"} {
		// Bounded: a server that starts instead of refusing would run on.
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		c := exec.CommandContext(ctx, bin, cmd, "--root", deep, "--listen", "127.0.0.1:0")
		var stdout, stderr bytes.Buffer
		c.Stdout, c.Stderr = &stdout, &stderr
		c.Run()
		cancel()
		out, errOut, code := stdout.String(), stderr.String(), c.ProcessState.ExitCode()
		if code != 2 || out != "" || !strings.Contains(errOut, "--create") || !strings.Contains(errOut, filepath.Join(base, "typo", "data")) {
			t.Errorf("%s --root %s: exit %d, stderr %q", cmd, deep, code, errOut)
		}
		if _, err := os.Stat(filepath.Join(base, "typo")); !os.IsNotExist(err) {
			t.Fatalf("%s --root %s created %s", cmd, deep, filepath.Join(base, "typo"))
		}
	}
	// One missing level (the default ./data on a fresh machine) is created.
	shallow := filepath.Join(base, "fresh")
	s := startServer(t, "--root", shallow)
	mustZg(t, "x", "put", "--addr="+s.addr, "k")
	if b, err := os.ReadFile(filepath.Join(shallow, "k")); err != nil || string(b) != "x" {
		t.Fatalf("store in a created --root: %q %v", b, err)
	}
	s = startServer(t, "--root", deep, "--create")
	mustZg(t, "y", "put", "--addr="+s.addr, "k")
	if b, err := os.ReadFile(filepath.Join(deep, "k")); err != nil || string(b) != "y" {
		t.Fatalf("store in --root --create: %q %v", b, err)
	}
}
