package zip_test

import (
	stdzip "archive/zip"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/testenv"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/storetest"
	"github.com/zarrgate/zarrgate/storesvc/zip"
)

var ctx = context.Background()

func newStore(t *testing.T, opts zip.Options) *zip.Store {
	t.Helper()
	s, err := zip.Open(filepath.Join(t.TempDir(), "data.zip"), opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storesvc.Store { return newStore(t, zip.Options{}) }, storetest.Options{NoErase: true, LargeValue: 32 << 20})
}

func TestConformanceNCZarr(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storesvc.Store { return newStore(t, zip.Options{NCZarr: true}) }, storetest.Options{NoErase: true})
}

func set(t *testing.T, s storesvc.Store, key, value string, cond storesvc.Condition) string {
	t.Helper()
	gen, err := storesvc.Wrap(s).Set(ctx, key, strings.NewReader(value), cond)
	if err != nil {
		t.Fatalf("Set(%q): %v", key, err)
	}
	return gen
}

func read(t *testing.T, s storesvc.Store, key string) string {
	t.Helper()
	v, _, err := storesvc.ReadAll(ctx, storesvc.Wrap(s), key)
	if err != nil {
		t.Fatalf("ReadAll(%q): %v", key, err)
	}
	return string(v)
}

func list(t *testing.T, s storesvc.Store) []string {
	t.Helper()
	var keys []string
	for k, err := range storesvc.Wrap(s).ListPrefix(ctx, "") {
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// zipNames lists the archive's members with the standard library's reader,
// an independent implementation of the format.
func zipNames(t *testing.T, path string) map[string]string {
	t.Helper()
	r, err := stdzip.OpenReader(path)
	if err != nil {
		t.Fatalf("archive/zip cannot read %s: %v", path, err)
	}
	defer r.Close()
	out := map[string]string{}
	for _, f := range r.File {
		if _, dup := out[f.Name]; dup {
			t.Errorf("member %q listed twice", f.Name)
		}
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc) // checks the CRC too
		rc.Close()
		if err != nil {
			t.Fatalf("member %q: %v", f.Name, err)
		}
		out[f.Name] = string(b)
	}
	return out
}

// Overwriting appends a new member; the later one wins, also after
// reopening; the central directory names each key once; appending to an
// existing archive keeps what it held.
func TestOverwriteAndAppend(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.zip")
	s, err := zip.Open(path, zip.Options{})
	if err != nil {
		t.Fatal(err)
	}
	g1 := set(t, s, "k", "one", storesvc.Condition{})
	set(t, s, "été/日本", "unicode", storesvc.Condition{})
	g2 := set(t, s, "k", "two", storesvc.Condition{IfGenerationMatch: g1})
	if read(t, s, "k") != "two" || g1 == g2 {
		t.Fatalf("overwrite: %q, generations %q %q", read(t, s, "k"), g1, g2)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"k": "two", "été/日本": "unicode"}
	if got := zipNames(t, path); !maps.Equal(got, want) {
		t.Fatalf("archive holds %q, want %q", got, want)
	}
	// Append.
	s, err = zip.Open(path, zip.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := storesvc.Wrap(s).Set(ctx, "k", strings.NewReader("x"), storesvc.Condition{IfGenerationMatch: g1}); !errors.Is(err, storesvc.ErrPrecondition) {
		t.Fatalf("stale generation after reopening: %v", err)
	}
	set(t, s, "k", "three", storesvc.Condition{IfGenerationMatch: g2})
	set(t, s, "new", "value", storesvc.Condition{IfAbsent: true})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	want = map[string]string{"k": "three", "été/日本": "unicode", "new": "value"}
	if got := zipNames(t, path); !maps.Equal(got, want) {
		t.Fatalf("archive holds %q, want %q", got, want)
	}
	// Reopened read-only: values, listing, no writes.
	ro, err := zip.Open(path, zip.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if k := list(t, ro); fmt.Sprint(k) != "[k new été/日本]" {
		t.Fatalf("keys %q", k)
	}
	if read(t, ro, "k") != "three" {
		t.Fatal("wrong value after reopening")
	}
	p := storesvc.Wrap(ro)
	if _, err := p.Set(ctx, "k", strings.NewReader("x"), storesvc.Condition{}); !errors.Is(err, storesvc.ErrPrecondition) {
		t.Fatalf("Set on a read-only archive: %v", err)
	}
	if _, err := ro.Set(ctx, "k", strings.NewReader("x"), storesvc.Condition{}); !errors.Is(err, storesvc.ErrPrecondition) {
		t.Fatalf("backend Set on a read-only archive: %v", err)
	}
	if err := p.Erase(ctx, "k", storesvc.Condition{}); !errors.Is(err, storesvc.ErrPrecondition) {
		t.Fatalf("Erase on a read-only archive: %v", err)
	}
	if c := p.Capabilities(); c.Writable || c.Erasable || c.PartialWrites || !c.Readable || !c.Listable {
		t.Fatalf("read-only capabilities %+v", c)
	}
}

// A failed write, also the first one when appending, leaves a valid
// archive with the old contents.
func TestFailedAppendKeepsArchive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.zip")
	s, _ := zip.Open(path, zip.Options{})
	set(t, s, "a", "1", storesvc.Condition{})
	s.Close()
	s, err := zip.Open(path, zip.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Set(ctx, "b", io.MultiReader(strings.NewReader("partial"), failing{}), storesvc.Condition{}); err == nil {
		t.Fatal("Set from a failing reader succeeded")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := zipNames(t, path); !maps.Equal(got, map[string]string{"a": "1"}) {
		t.Fatalf("archive holds %q", got)
	}
}

type failing struct{}

func (failing) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }

// The archive is locked against a second writer, in this process or
// another.
func TestLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.zip")
	s, err := zip.Open(path, zip.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := zip.Open(path, zip.Options{}); !errors.Is(err, storesvc.ErrPrecondition) {
		t.Fatalf("second writer: %v", err)
	}
	if _, err := zip.Open(path, zip.Options{ReadOnly: true}); !errors.Is(err, storesvc.ErrPrecondition) {
		t.Fatalf("reader while writing: %v", err)
	}
	if _, err := zip.Open(filepath.Join(t.TempDir(), "missing.zip"), zip.Options{ReadOnly: true}); !errors.Is(err, storesvc.ErrNotFound) {
		t.Fatalf("read-only open of a missing archive: %v", err)
	}
}

// Deflated members written by another tool: whole and ranged reads
// inflate; a corrupt CRC is DataLoss.
func TestDeflatedAndCorrupt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d.zip")
	f, _ := os.Create(path)
	w := stdzip.NewWriter(f)
	value := strings.Repeat("0123456789", 10000)
	fw, _ := w.CreateHeader(&stdzip.FileHeader{Name: "d", Method: stdzip.Deflate})
	io.WriteString(fw, value)
	fw, _ = w.CreateHeader(&stdzip.FileHeader{Name: "s", Method: stdzip.Store})
	io.WriteString(fw, "stored value")
	w.Close()
	f.Close()
	// Flip a byte of the stored member's data: its CRC no longer matches.
	b, _ := os.ReadFile(path)
	i := strings.Index(string(b), "stored value")
	b[i] = 'S'
	os.WriteFile(path, b, 0o644)

	s, err := zip.Open(path, zip.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if read(t, s, "d") != value {
		t.Fatal("deflated member read wrong")
	}
	got, err := s.Get(ctx, "d", storesvc.Bounded(12345, 20))
	if err != nil {
		t.Fatal(err)
	}
	part, _ := io.ReadAll(got)
	if string(part) != value[12345:12365] || got.Size != int64(len(value)) {
		t.Fatalf("ranged read of a deflated member: %q", part)
	}
	if _, err := s.Get(ctx, "d", storesvc.Suffix(int64(len(value))+1)); !errors.Is(err, storesvc.ErrOutOfRange) {
		t.Fatalf("suffix past the start: %v", err)
	}
	_, _, err = storesvc.ReadAll(ctx, storesvc.Wrap(s), "s")
	if !errors.Is(err, errs.DataLoss) {
		t.Fatalf("corrupt member: %v, want DataLoss", err)
	}
	// A ranged read cannot check the CRC and returns the bytes.
	got, err = s.Get(ctx, "s", storesvc.Bounded(1, 5))
	if err != nil {
		t.Fatal(err)
	}
	part, _ = io.ReadAll(got)
	if string(part) != "tored" {
		t.Fatalf("ranged read %q", part)
	}
}

// A zip zarr-python 3 wrote (testdata/zarr-python.zip, made with
// `python testdata/interop.py write`), read without Python.
func TestReadZarrPythonFixture(t *testing.T) {
	s, err := zip.Open("testdata/zarr-python.zip", zip.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := []string{"a/c/0/0", "a/c/0/1", "a/c/1/0", "a/c/1/1", "a/zarr.json", "zarr.json"}
	if got := list(t, s); !slices.Equal(got, want) {
		t.Fatalf("keys %q, want %q", got, want)
	}
	var meta struct {
		NodeType   string         `json:"node_type"`
		Attributes map[string]any `json:"attributes"`
	}
	if err := json.Unmarshal([]byte(read(t, s, "zarr.json")), &meta); err != nil || meta.NodeType != "group" || meta.Attributes["title"] != "interop" {
		t.Fatalf("zarr.json: %+v, %v", meta, err)
	}
	keys, prefixes := listDir(t, s, "a/")
	if fmt.Sprint(keys, prefixes) != "[a/zarr.json] [a/c/]" {
		t.Fatalf("ListDir(a/) = %q %q", keys, prefixes)
	}
	// Chunk (1, 1) holds rows 2-3, columns 3-5 of arange(24).reshape(4, 6).
	chunk := read(t, s, "a/c/1/1")
	var got []int32
	for i := 0; i < len(chunk); i += 4 {
		got = append(got, int32(binary.LittleEndian.Uint32([]byte(chunk[i:]))))
	}
	if fmt.Sprint(got) != "[15 16 17 21 22 23]" {
		t.Fatalf("chunk a/c/1/1 = %v", got)
	}
	obj, err := s.Get(ctx, "a/c/1/1", storesvc.Suffix(8))
	if err != nil {
		t.Fatal(err)
	}
	tail, _ := io.ReadAll(obj)
	if binary.LittleEndian.Uint32(tail[4:]) != 23 {
		t.Fatalf("suffix read %v", tail)
	}
}

func listDir(t *testing.T, s storesvc.Store, prefix string) (keys, prefixes []string) {
	for e, err := range storesvc.Wrap(s).ListDir(ctx, prefix) {
		if err != nil {
			t.Fatal(err)
		}
		if e.IsPrefix {
			prefixes = append(prefixes, e.Path)
		} else {
			keys = append(keys, e.Path)
		}
	}
	slices.Sort(keys)
	slices.Sort(prefixes)
	return keys, prefixes
}

// writeInterop writes the interop hierarchy (see testdata/interop.py)
// through the store, overwriting one chunk on the way.
func writeInterop(t *testing.T, s storesvc.Store) {
	set(t, s, "zarr.json", `{"zarr_format":3,"node_type":"group","attributes":{"title":"interop"}}`, storesvc.Condition{})
	set(t, s, "a/zarr.json", `{"zarr_format":3,"node_type":"array","shape":[4,6],"data_type":"int32",`+
		`"chunk_grid":{"name":"regular","configuration":{"chunk_shape":[2,3]}},`+
		`"chunk_key_encoding":{"name":"default","configuration":{"separator":"/"}},"fill_value":0,`+
		`"codecs":[{"name":"bytes","configuration":{"endian":"little"}}],"attributes":{"written_by":"zarrgate"}}`, storesvc.Condition{})
	set(t, s, "a/c/0/0", "garbage, overwritten below", storesvc.Condition{})
	for ci := range 2 {
		for cj := range 2 {
			var b []byte
			for i := range 2 {
				for j := range 3 {
					b = binary.LittleEndian.AppendUint32(b, uint32((ci*2+i)*6+cj*3+j))
				}
			}
			set(t, s, fmt.Sprintf("a/c/%d/%d", ci, cj), string(b), storesvc.Condition{})
		}
	}
}

// zarr-python reads an archive written through zarrgate, and writes one
// zarrgate reads. Needs ZARRGATE_PYTHON: a python with zarr 3 (see
// testdata/requirements.txt).
func TestPythonInterop(t *testing.T) {
	py := testenv.Python(t)
	dir := t.TempDir()
	ours := filepath.Join(dir, "zarrgate.zip")
	s, err := zip.Open(ours, zip.Options{})
	if err != nil {
		t.Fatal(err)
	}
	writeInterop(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(py, "testdata/interop.py", "check", ours).CombinedOutput(); err != nil {
		t.Fatalf("zarr-python cannot read zarrgate's archive: %v\n%s", err, out)
	}
	theirs := filepath.Join(dir, "python.zip")
	if out, err := exec.Command(py, "testdata/interop.py", "write", theirs).CombinedOutput(); err != nil {
		t.Fatalf("interop.py write: %v\n%s", err, out)
	}
	s, err = zip.Open(theirs, zip.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if read(t, s, "a/c/0/1") == "" || len(list(t, s)) != 6 {
		t.Fatalf("zarrgate reads zarr-python's archive wrongly: %q", list(t, s))
	}
	// Append to zarr-python's archive; zarr-python reads the result.
	writeInterop(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(py, "testdata/interop.py", "check", theirs).CombinedOutput(); err != nil {
		t.Fatalf("zarr-python cannot read its archive after zarrgate appended: %v\n%s", err, out)
	}
}

// NCZarr's layout: first member the dataset directory, named after the
// file; keys under it; a directory member for each parent.
func TestNCZarrLayout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ds.zip")
	s, err := zip.Open(path, zip.Options{NCZarr: true})
	if err != nil {
		t.Fatal(err)
	}
	set(t, s, ".zgroup", `{"zarr_format":2}`, storesvc.Condition{})
	set(t, s, "v/.zarray", "{}", storesvc.Condition{})
	set(t, s, "v/0.0", "chunk", storesvc.Condition{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := stdzip.OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range r.File {
		names = append(names, f.Name)
	}
	r.Close()
	if fmt.Sprint(names) != "[ds/ ds/.zgroup ds/v/.zarray ds/v/ ds/v/0.0]" {
		t.Fatalf("members %q", names)
	}
	// Reopened (as NCZarr does) the dataset comes from the first member,
	// whatever the file is called now.
	moved := filepath.Join(filepath.Dir(path), "renamed.zip")
	os.Rename(path, moved)
	s, err = zip.Open(moved, zip.Options{NCZarr: true, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Dataset() != "ds" || read(t, s, "v/0.0") != "chunk" {
		t.Fatalf("dataset %q", s.Dataset())
	}
	if k := list(t, s); fmt.Sprint(k) != "[.zgroup v/.zarray v/0.0]" {
		t.Fatalf("keys %q", k)
	}
}
