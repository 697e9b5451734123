// Package storetest is the conformance suite of the store contract. Every
// backend, and the remote store over each, runs it:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) storesvc.Store { return newStore(t) })
//	}
//
// The suite puts the portable layer in front of the store it is given, as
// every production caller does, and checks the behaviour of the Zarr
// abstract store interface plus zarrgate's extensions (ranges, generations,
// conditional writes).
package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/zarrgate/zarrgate/storesvc"
)

// NewStore returns a fresh, empty store for one test. It may register
// cleanups on t.
type NewStore func(t *testing.T) storesvc.Store

// Options tune the suite to a backend.
type Options struct {
	// LargeValue, when not zero, streams a value of this size through Set
	// and Get and checks its hash (256 MiB through the remote store).
	LargeValue int64
	// NoErase skips the erase tests, for stores that cannot erase (zip); the
	// suite then checks that erasing fails with ErrUnsupported instead.
	NoErase bool
}

// Run runs the whole suite.
func Run(t *testing.T, newStore NewStore, opts ...Options) {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	open := func(t *testing.T) *storesvc.Portable {
		s := storesvc.Wrap(newStore(t))
		t.Cleanup(func() { s.Close() })
		return s
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, s *storesvc.Portable)
	}{
		{"GetSet", testGetSet},
		{"Overwrite", testOverwrite},
		{"EmptyValue", testEmptyValue},
		{"Ranges", testRanges},
		{"RangesOutOfRange", testRangesOutOfRange},
		{"GetPartialValues", testGetPartialValues},
		{"GetPartialValuesMany", testGetPartialValuesMany},
		{"List", testList},
		{"ListPrefix", testListPrefix},
		{"ListDir", testListDir},
		{"UnusualKeys", testUnusualKeys},
		{"InvalidKeys", testInvalidKeys},
		{"InvalidPrefixes", testInvalidPrefixes},
		{"Generations", testGenerations},
		{"ConditionalSet", testConditionalSet},
		{"ConcurrentConditionalUpdates", testConcurrentConditionalUpdates},
		{"ConcurrentSetGet", testConcurrentSetGet},
		{"CancelledContext", testCancelledContext},
		{"FailingValueReader", testFailingValueReader},
		{"ReadOnly", testReadOnly},
	}
	if o.NoErase {
		tests = append(tests, struct {
			name string
			fn   func(t *testing.T, s *storesvc.Portable)
		}{"EraseUnsupported", testEraseUnsupported})
	} else {
		tests = append(tests, []struct {
			name string
			fn   func(t *testing.T, s *storesvc.Portable)
		}{
			{"Erase", testErase},
			{"EraseValues", testEraseValues},
			{"ErasePrefix", testErasePrefix},
			{"ErasePrefixAll", testErasePrefixAll},
			{"ConditionalErase", testConditionalErase},
			{"SetPartialValues", testSetPartialValues},
			{"SetPartialValuesErrors", testSetPartialValuesErrors},
			{"ConcurrentPartialWrites", testConcurrentPartialWrites},
		}...)
	}
	if o.LargeValue > 0 {
		tests = append(tests, struct {
			name string
			fn   func(t *testing.T, s *storesvc.Portable)
		}{"LargeValue", func(t *testing.T, s *storesvc.Portable) { testLargeValue(t, s, o.LargeValue) }})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
	}
}

var ctx = context.Background()

func set(t *testing.T, s storesvc.Store, key string, value []byte) string {
	t.Helper()
	gen, err := s.Set(ctx, key, bytes.NewReader(value), storesvc.Condition{})
	if err != nil {
		t.Fatalf("Set(%q): %v", key, err)
	}
	if gen == "" {
		t.Fatalf("Set(%q) returned an empty generation", key)
	}
	return gen
}

func get(t *testing.T, s storesvc.Store, key string, r storesvc.ByteRange) ([]byte, *storesvc.Object) {
	t.Helper()
	obj, err := s.Get(ctx, key, r)
	if err != nil {
		t.Fatalf("Get(%q, %v): %v", key, r, err)
	}
	defer obj.Close()
	data, err := io.ReadAll(obj)
	if err != nil {
		t.Fatalf("Get(%q, %v): reading: %v", key, r, err)
	}
	if int64(len(data)) != obj.Length {
		t.Fatalf("Get(%q, %v): read %d bytes, object announced %d", key, r, len(data), obj.Length)
	}
	return data, obj
}

func wantValue(t *testing.T, s storesvc.Store, key string, want []byte) {
	t.Helper()
	got, _ := get(t, s, key, storesvc.ByteRange{})
	if !bytes.Equal(got, want) {
		t.Fatalf("Get(%q) = %q, want %q", key, trunc(got), trunc(want))
	}
}

func wantMissing(t *testing.T, s storesvc.Store, key string) {
	t.Helper()
	obj, err := s.Get(ctx, key, storesvc.ByteRange{})
	if err == nil {
		obj.Close()
		t.Fatalf("Get(%q) succeeded, want ErrNotFound", key)
	}
	if !errors.Is(err, storesvc.ErrNotFound) {
		t.Fatalf("Get(%q) = %v, want ErrNotFound", key, err)
	}
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want %v", what, err, target)
	}
}

func trunc(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}

func listAll(t *testing.T, s storesvc.Store, prefix string) []string {
	t.Helper()
	var keys []string
	for k, err := range s.ListPrefix(ctx, prefix) {
		if err != nil {
			t.Fatalf("ListPrefix(%q): %v", prefix, err)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func listDir(t *testing.T, s *storesvc.Portable, prefix string) (keys, prefixes []string) {
	t.Helper()
	for e, err := range s.ListDir(ctx, prefix) {
		if err != nil {
			t.Fatalf("ListDir(%q): %v", prefix, err)
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

func wantStrings(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s = %q, want %q", what, got, want)
	}
}

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func testGetSet(t *testing.T, s *storesvc.Portable) {
	wantMissing(t, s, "a/b")
	v := randBytes(1, 3000)
	set(t, s, "a/b", v)
	wantValue(t, s, "a/b", v)
	_, obj := get(t, s, "a/b", storesvc.ByteRange{})
	if obj.Size != 3000 || obj.Offset != 0 || obj.Length != 3000 {
		t.Fatalf("object size/offset/length = %d/%d/%d, want 3000/0/3000", obj.Size, obj.Offset, obj.Length)
	}
	wantMissing(t, s, "a")
	wantMissing(t, s, "a/bc")
	wantMissing(t, s, "A/b") // keys are case sensitive
}

func testOverwrite(t *testing.T, s *storesvc.Portable) {
	set(t, s, "k", randBytes(2, 5000))
	set(t, s, "k", []byte("short"))
	wantValue(t, s, "k", []byte("short"))
	set(t, s, "k", randBytes(3, 7000))
	wantValue(t, s, "k", randBytes(3, 7000))
}

func testEmptyValue(t *testing.T, s *storesvc.Portable) {
	set(t, s, "empty", nil)
	got, obj := get(t, s, "empty", storesvc.ByteRange{})
	if len(got) != 0 || obj.Size != 0 {
		t.Fatalf("empty value read back as %d bytes (size %d)", len(got), obj.Size)
	}
	got, _ = get(t, s, "empty", storesvc.Suffix(0))
	if len(got) != 0 {
		t.Fatalf("suffix 0 of empty value = %d bytes", len(got))
	}
}

func testRanges(t *testing.T, s *storesvc.Portable) {
	v := randBytes(4, 10000)
	set(t, s, "r", v)
	cases := []struct {
		r          storesvc.ByteRange
		off, lenth int64
	}{
		{storesvc.ByteRange{}, 0, 10000},
		{storesvc.Bounded(0, 10), 0, 10},
		{storesvc.Bounded(123, 4567), 123, 4567},
		{storesvc.Bounded(9990, 10), 9990, 10},
		{storesvc.Bounded(10000, 0), 10000, 0},
		{storesvc.Bounded(50, 0), 50, 0},
		{storesvc.FromOffset(0), 0, 10000},
		{storesvc.FromOffset(9000), 9000, 1000},
		{storesvc.FromOffset(10000), 10000, 0},
		{storesvc.Suffix(16), 9984, 16},
		{storesvc.Suffix(10000), 0, 10000},
		{storesvc.Suffix(0), 10000, 0},
	}
	for _, c := range cases {
		got, obj := get(t, s, "r", c.r)
		if !bytes.Equal(got, v[c.off:c.off+c.lenth]) {
			t.Errorf("range %v: wrong bytes (%d read)", c.r, len(got))
		}
		if obj.Offset != c.off || obj.Length != c.lenth || obj.Size != 10000 {
			t.Errorf("range %v: offset/length/size = %d/%d/%d, want %d/%d/10000", c.r, obj.Offset, obj.Length, obj.Size, c.off, c.lenth)
		}
	}
}

func testRangesOutOfRange(t *testing.T, s *storesvc.Portable) {
	set(t, s, "r", randBytes(5, 100))
	for _, r := range []storesvc.ByteRange{storesvc.Bounded(90, 11), storesvc.Bounded(101, 0), storesvc.FromOffset(101), storesvc.Suffix(101)} {
		obj, err := s.Get(ctx, "r", r)
		if err == nil {
			obj.Close()
			t.Fatalf("Get(r, %v) succeeded on a 100-byte value", r)
		}
		wantErr(t, fmt.Sprintf("Get(r, %v)", r), err, storesvc.ErrOutOfRange)
		if !strings.Contains(err.Error(), `"r"`) {
			t.Errorf("error %q does not name the key", err)
		}
	}
	for _, r := range []storesvc.ByteRange{storesvc.Bounded(-1, 5), storesvc.Bounded(0, -5), storesvc.Suffix(-1), storesvc.FromOffset(-3)} {
		_, err := s.Get(ctx, "r", r)
		wantErr(t, fmt.Sprintf("Get(r, %v)", r), err, storesvc.ErrInvalidKey)
	}
}

func testGetPartialValues(t *testing.T, s *storesvc.Portable) {
	a, b := randBytes(6, 1000), randBytes(7, 300)
	set(t, s, "x/a", a)
	set(t, s, "x/b", b)
	reqs := []storesvc.KeyRange{
		{Key: "x/b", Range: storesvc.Suffix(10)},
		{Key: "x/a", Range: storesvc.Bounded(5, 10)},
		{Key: "x/missing"},
		{Key: "x/a", Range: storesvc.FromOffset(990)},
		{Key: "x/a"},
		{Key: "x/b", Range: storesvc.Bounded(0, 0)},
	}
	got, err := s.GetPartialValues(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	want := []storesvc.PartialValue{
		{Data: b[290:], Found: true}, {Data: a[5:15], Found: true}, {}, {Data: a[990:], Found: true}, {Data: a, Found: true}, {Data: []byte{}, Found: true},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d results, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Found != want[i].Found || !bytes.Equal(got[i].Data, want[i].Data) {
			t.Errorf("result %d (%s %v): found=%v len=%d, want found=%v len=%d", i, reqs[i].Key, reqs[i].Range, got[i].Found, len(got[i].Data), want[i].Found, len(want[i].Data))
		}
	}
	_, objA := get(t, s, "x/a", storesvc.ByteRange{})
	_, objB := get(t, s, "x/b", storesvc.ByteRange{})
	for i, wantGen := range []string{objB.Generation, objA.Generation, "", objA.Generation, objA.Generation, objB.Generation} {
		if got[i].Generation != wantGen {
			t.Errorf("result %d: generation %q, want %q", i, got[i].Generation, wantGen)
		}
	}
	if _, err := s.GetPartialValues(ctx, []storesvc.KeyRange{{Key: "x/a", Range: storesvc.Bounded(999, 5)}}); !errors.Is(err, storesvc.ErrOutOfRange) {
		t.Errorf("GetPartialValues past the end: %v, want ErrOutOfRange", err)
	}
	if _, err := s.GetPartialValues(ctx, []storesvc.KeyRange{{Key: "x//a"}}); !errors.Is(err, storesvc.ErrInvalidKey) {
		t.Errorf("GetPartialValues with bad key: %v, want ErrInvalidKey", err)
	}
}

func testGetPartialValuesMany(t *testing.T, s *storesvc.Portable) {
	const n = 3000
	v := randBytes(8, 64<<10)
	set(t, s, "shard", v)
	reqs := make([]storesvc.KeyRange, n)
	for i := range reqs {
		off := int64(i*37) % (60 << 10)
		reqs[i] = storesvc.KeyRange{Key: "shard", Range: storesvc.Bounded(off, int64(i%4096))}
	}
	got, err := s.GetPartialValues(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range reqs {
		off, l := r.Range.Parts()
		if !got[i].Found || !bytes.Equal(got[i].Data, v[off:off+l]) {
			t.Fatalf("result %d wrong", i)
		}
	}
}

func testList(t *testing.T, s *storesvc.Portable) {
	wantStrings(t, "List on an empty store", listAll(t, s, ""), nil)
	keys := []string{"zarr.json", "a/zarr.json", "a/c/0/0", "a/c/0/1", "b"}
	for _, k := range keys {
		set(t, s, k, []byte(k))
	}
	slices.Sort(keys)
	wantStrings(t, "List", listAll(t, s, ""), keys)
}

func testListPrefix(t *testing.T, s *storesvc.Portable) {
	for _, k := range []string{"a/b", "a/c/d", "e/f/g", "ab/x"} {
		set(t, s, k, []byte(k))
	}
	wantStrings(t, `ListPrefix("a/")`, listAll(t, s, "a/"), []string{"a/b", "a/c/d"})
	wantStrings(t, `ListPrefix("e/f/")`, listAll(t, s, "e/f/"), []string{"e/f/g"})
	wantStrings(t, `ListPrefix("z/")`, listAll(t, s, "z/"), nil)
	wantStrings(t, `ListPrefix("a/b/")`, listAll(t, s, "a/b/"), nil)
}

func testListDir(t *testing.T, s *storesvc.Portable) {
	for _, k := range []string{"a/b", "a/c", "a/d/e", "a/f/g", "a/f/h/i", "top"} {
		set(t, s, k, []byte(k))
	}
	keys, prefixes := listDir(t, s, "a/")
	wantStrings(t, `ListDir("a/") keys`, keys, []string{"a/b", "a/c"})
	wantStrings(t, `ListDir("a/") prefixes`, prefixes, []string{"a/d/", "a/f/"})
	keys, prefixes = listDir(t, s, "b/")
	wantStrings(t, `ListDir("b/") keys`, keys, nil)
	wantStrings(t, `ListDir("b/") prefixes`, prefixes, nil)
	keys, prefixes = listDir(t, s, "")
	wantStrings(t, `ListDir("") keys`, keys, []string{"top"})
	wantStrings(t, `ListDir("") prefixes`, prefixes, []string{"a/"})
	keys, prefixes = listDir(t, s, "a/f/")
	wantStrings(t, `ListDir("a/f/") keys`, keys, []string{"a/f/g"})
	wantStrings(t, `ListDir("a/f/") prefixes`, prefixes, []string{"a/f/h/"})
}

// UnusualKeys are valid keys that trip naive implementations. None is a
// prefix of another (a file store cannot hold both "c" and "c/0").
var UnusualKeys = []string{
	"zarr.json", ".zarray", ".zattrs", "c/0/0", "c/0.0", "0.0.0", "cc", "données/été/0",
	"日本語/キー", "with space/and more spaces", "emoji/🧊", "a-b_c~d/e+f=g", "...", "a/.../b",
	"x/" + strings.Repeat("k", 200), strings.Repeat("d/", 100) + "deep",
}

func testUnusualKeys(t *testing.T, s *storesvc.Portable) {
	for i, k := range UnusualKeys {
		set(t, s, k, []byte(fmt.Sprint(i)))
	}
	for i, k := range UnusualKeys {
		wantValue(t, s, k, []byte(fmt.Sprint(i)))
	}
	want := slices.Clone(UnusualKeys)
	slices.Sort(want)
	wantStrings(t, "List of unusual keys", listAll(t, s, ""), want)
}

// InvalidKeys are keys the portable layer must refuse.
var InvalidKeys = []string{
	"", "/", "/a", "a/", "a//b", "./a", "a/./b", "a/.", "..", "../a", "a/../b", "a/..",
	"../../etc/passwd", "a\x00b", "a\nb", "\x7f", "tab\there", "a\u0085b",
	string([]byte{0xff, 0xfe}), "a/\xc3\x28", strings.Repeat("x", storesvc.MaxKeyLen+1),
	"a/" + strings.Repeat("s", storesvc.MaxSegmentLen+1), strings.Repeat("s", storesvc.MaxSegmentLen+1) + "/b",
	storesvc.ReservedPrefix + "0123", "a/" + storesvc.ReservedPrefix + "x/b",
}

func testInvalidKeys(t *testing.T, s *storesvc.Portable) {
	for _, k := range InvalidKeys {
		_, err := s.Set(ctx, k, strings.NewReader("v"), storesvc.Condition{})
		wantErr(t, fmt.Sprintf("Set(%q)", k), err, storesvc.ErrInvalidKey)
		_, err = s.Get(ctx, k, storesvc.ByteRange{})
		wantErr(t, fmt.Sprintf("Get(%q)", k), err, storesvc.ErrInvalidKey)
		if s.Capabilities().Erasable {
			wantErr(t, fmt.Sprintf("Erase(%q)", k), s.Erase(ctx, k, storesvc.Condition{}), storesvc.ErrInvalidKey)
			wantErr(t, fmt.Sprintf("EraseValues(%q)", k), s.EraseValues(ctx, []string{"fine", k}), storesvc.ErrInvalidKey)
		}
		if s.Capabilities().PartialWrites {
			err = s.SetPartialValues(ctx, []storesvc.PartialWrite{{Key: k, Data: []byte("v")}})
			wantErr(t, fmt.Sprintf("SetPartialValues(%q)", k), err, storesvc.ErrInvalidKey)
		}
	}
	wantStrings(t, "keys after invalid writes", listAll(t, s, ""), nil)
	_, err := s.Set(ctx, "a/../b", strings.NewReader("v"), storesvc.Condition{})
	if err == nil || !strings.Contains(err.Error(), "a/../b") {
		t.Errorf("error %v does not name the key", err)
	}
	ok := strings.Repeat(strings.Repeat("x", 255)+"/", 4)
	ok = ok[:storesvc.MaxKeyLen-4] + "/xyz"
	if err := storesvc.ValidateKey(ok); err != nil || len(ok) != storesvc.MaxKeyLen {
		t.Errorf("a %d-byte key of %d-byte segments is valid: %v", len(ok), storesvc.MaxSegmentLen, err)
	}
	// A key naming a temporary file the file store leaves in place.
	wantErr(t, "ValidateKey of a reserved name", storesvc.ValidateKey("a/"+storesvc.ReservedPrefix+"0123"), storesvc.ErrInvalidKey)
}

func testInvalidPrefixes(t *testing.T, s *storesvc.Portable) {
	for _, p := range []string{"a", "/", "/a/", "a//", "../", "a/../", "a/./",
		strings.Repeat("s", storesvc.MaxSegmentLen+1) + "/", storesvc.ReservedPrefix + "x/"} {
		for _, err := range s.ListPrefix(ctx, p) {
			wantErr(t, fmt.Sprintf("ListPrefix(%q)", p), err, storesvc.ErrInvalidKey)
		}
		for _, err := range s.ListDir(ctx, p) {
			wantErr(t, fmt.Sprintf("ListDir(%q)", p), err, storesvc.ErrInvalidKey)
		}
		if s.Capabilities().Erasable {
			wantErr(t, fmt.Sprintf("ErasePrefix(%q)", p), s.ErasePrefix(ctx, p), storesvc.ErrInvalidKey)
		}
	}
}

func testGenerations(t *testing.T, s *storesvc.Portable) {
	g1 := set(t, s, "g", []byte("one"))
	_, obj := get(t, s, "g", storesvc.ByteRange{})
	if obj.Generation != g1 {
		t.Fatalf("Get generation %q, Set returned %q", obj.Generation, g1)
	}
	_, obj = get(t, s, "g", storesvc.Bounded(1, 1))
	if obj.Generation != g1 {
		t.Fatalf("ranged Get generation %q, want %q", obj.Generation, g1)
	}
	seen := map[string]bool{g1: true}
	for i := range 20 {
		g := set(t, s, "g", []byte("one")) // same bytes, new write
		if seen[g] {
			t.Fatalf("write %d reused generation %q", i, g)
		}
		seen[g] = true
	}
}

func testConditionalSet(t *testing.T, s *storesvc.Portable) {
	if !s.Capabilities().ConditionalWrites {
		_, err := s.Set(ctx, "c", strings.NewReader("x"), storesvc.Condition{IfAbsent: true})
		wantErr(t, "conditional Set on a store without conditional writes", err, storesvc.ErrUnsupported)
		return
	}
	g1, err := s.Set(ctx, "c", strings.NewReader("first"), storesvc.Condition{IfAbsent: true})
	if err != nil {
		t.Fatalf("IfAbsent on a missing key: %v", err)
	}
	_, err = s.Set(ctx, "c", strings.NewReader("second"), storesvc.Condition{IfAbsent: true})
	wantErr(t, "IfAbsent on an existing key", err, storesvc.ErrPrecondition)
	wantValue(t, s, "c", []byte("first"))

	g2, err := s.Set(ctx, "c", strings.NewReader("third"), storesvc.Condition{IfGenerationMatch: g1})
	if err != nil {
		t.Fatalf("IfGenerationMatch with the current generation: %v", err)
	}
	_, err = s.Set(ctx, "c", strings.NewReader("stale"), storesvc.Condition{IfGenerationMatch: g1})
	wantErr(t, "IfGenerationMatch with a stale generation", err, storesvc.ErrPrecondition)
	wantValue(t, s, "c", []byte("third"))
	_, err = s.Set(ctx, "nope", strings.NewReader("x"), storesvc.Condition{IfGenerationMatch: g2})
	wantErr(t, "IfGenerationMatch on a missing key", err, storesvc.ErrPrecondition)
	wantMissing(t, s, "nope")
	_, err = s.Set(ctx, "c", strings.NewReader("x"), storesvc.Condition{IfAbsent: true, IfGenerationMatch: g2})
	wantErr(t, "both conditions", err, storesvc.ErrInvalidKey)
}

// testConcurrentConditionalUpdates runs read-modify-write increments of one
// counter from many goroutines, each retrying on conflict: with atomic
// check-and-write no increment is lost.
func testConcurrentConditionalUpdates(t *testing.T, s *storesvc.Portable) {
	if !s.Capabilities().ConditionalWrites {
		t.Skip("store has no conditional writes; covered by ConditionalSet")
	}
	set(t, s, "counter", []byte("0"))
	const workers, incs = 6, 10
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range incs {
				for {
					v, gen, err := storesvc.ReadAll(ctx, s, "counter")
					if err != nil {
						errc <- err
						return
					}
					var n int
					fmt.Sscan(string(v), &n)
					_, err = s.Set(ctx, "counter", strings.NewReader(fmt.Sprint(n+1)), storesvc.Condition{IfGenerationMatch: gen})
					if err == nil {
						break
					}
					if !errors.Is(err, storesvc.ErrPrecondition) {
						errc <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	wantValue(t, s, "counter", []byte(fmt.Sprint(workers*incs)))
}

// testConcurrentSetGet overwrites one key with uniform values while readers
// check that every value they see is one whole write.
func testConcurrentSetGet(t *testing.T, s *storesvc.Portable) {
	const size = 256 << 10
	set(t, s, "hot", bytes.Repeat([]byte{0}, size))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errc := make(chan error, 8)
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 15 {
				b := byte(1 + w*100 + i)
				if _, err := s.Set(ctx, "hot", bytes.NewReader(bytes.Repeat([]byte{b}, size)), storesvc.Condition{}); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	var rg sync.WaitGroup
	for range 3 {
		rg.Add(1)
		go func() {
			defer rg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				v, _, err := storesvc.ReadAll(ctx, s, "hot")
				if err != nil {
					errc <- err
					return
				}
				if len(v) != size || bytes.Count(v, v[:1]) != size {
					errc <- fmt.Errorf("torn read: %d bytes, first %d, %d equal", len(v), v[0], bytes.Count(v, v[:1]))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	rg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
}

func testCancelledContext(t *testing.T, s *storesvc.Portable) {
	set(t, s, "k", []byte("v"))
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Get(cctx, "k", storesvc.ByteRange{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Get with a cancelled context: %v, want context.Canceled", err)
	}
	if _, err := s.Set(cctx, "new", strings.NewReader("v"), storesvc.Condition{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Set with a cancelled context: %v, want context.Canceled", err)
	}
	wantMissing(t, s, "new")
	for _, err := range s.ListPrefix(cctx, "") {
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("ListPrefix with a cancelled context: %v", err)
		}
	}
	// Cancelled halfway through the value: nothing is stored.
	cctx, cancel = context.WithCancel(ctx)
	r := &cancellingReader{data: randBytes(9, 4<<20), cancelAt: 2 << 20, cancel: cancel}
	if _, err := s.Set(cctx, "half", r, storesvc.Condition{}); err == nil {
		t.Fatal("Set cancelled halfway succeeded")
	}
	wantMissing(t, s, "half")
	set(t, s, "k", []byte("after")) // still serving
	wantValue(t, s, "k", []byte("after"))
}

type cancellingReader struct {
	data     []byte
	off      int
	cancelAt int
	cancel   func()
}

func (r *cancellingReader) Read(p []byte) (int, error) {
	if r.off >= r.cancelAt {
		r.cancel() // and keep serving bytes: the write must still not land
	}
	if r.off >= len(r.data) {
		return 0, io.EOF
	}
	n := copy(p, r.data[r.off:min(len(r.data), r.off+64<<10)])
	r.off += n
	return n, nil
}

type failingReader struct{ n int }

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, errors.New("disk on fire")
	}
	n := min(len(p), r.n)
	r.n -= n
	return n, nil
}

func testFailingValueReader(t *testing.T, s *storesvc.Portable) {
	set(t, s, "k", []byte("old"))
	if _, err := s.Set(ctx, "k", &failingReader{n: 3 << 20}, storesvc.Condition{}); err == nil {
		t.Fatal("Set from a failing reader succeeded")
	}
	wantValue(t, s, "k", []byte("old"))
}

func testReadOnly(t *testing.T, s *storesvc.Portable) {
	set(t, s, "k", []byte("v"))
	ro := storesvc.Wrap(s.Unwrap(), storesvc.ReadOnly())
	_, err := ro.Set(ctx, "k", strings.NewReader("w"), storesvc.Condition{})
	wantErr(t, "Set on a read-only store", err, storesvc.ErrPrecondition)
	wantErr(t, "Erase on a read-only store", ro.Erase(ctx, "k", storesvc.Condition{}), storesvc.ErrPrecondition)
	wantErr(t, "ErasePrefix on a read-only store", ro.ErasePrefix(ctx, ""), storesvc.ErrPrecondition)
	wantErr(t, "SetPartialValues on a read-only store", ro.SetPartialValues(ctx, []storesvc.PartialWrite{{Key: "k"}}), storesvc.ErrPrecondition)
	if c := ro.Capabilities(); c.Writable || c.Erasable || c.PartialWrites || !c.Readable {
		t.Errorf("read-only capabilities = %+v", c)
	}
	wantValue(t, ro, "k", []byte("v"))
}

func testEraseUnsupported(t *testing.T, s *storesvc.Portable) {
	set(t, s, "k", []byte("v"))
	wantErr(t, "Erase", s.Erase(ctx, "k", storesvc.Condition{}), storesvc.ErrUnsupported)
	wantErr(t, "ErasePrefix", s.ErasePrefix(ctx, ""), storesvc.ErrUnsupported)
	wantValue(t, s, "k", []byte("v"))
}

func testErase(t *testing.T, s *storesvc.Portable) {
	set(t, s, "a/b/c", []byte("1"))
	set(t, s, "a/d", []byte("2"))
	if err := s.Erase(ctx, "a/b/c", storesvc.Condition{}); err != nil {
		t.Fatal(err)
	}
	wantMissing(t, s, "a/b/c")
	wantValue(t, s, "a/d", []byte("2"))
	wantStrings(t, "keys after erase", listAll(t, s, ""), []string{"a/d"})
	_, prefixes := listDir(t, s, "a/")
	wantStrings(t, "prefixes after erase", prefixes, nil)
	if err := s.Erase(ctx, "a/b/c", storesvc.Condition{}); err != nil {
		t.Fatalf("erasing a missing key: %v", err)
	}
	if err := s.Erase(ctx, "never/was/here", storesvc.Condition{}); err != nil {
		t.Fatalf("erasing a missing key: %v", err)
	}
	set(t, s, "a/b/c", []byte("3")) // the emptied directories can be reused
	wantValue(t, s, "a/b/c", []byte("3"))
}

func testEraseValues(t *testing.T, s *storesvc.Portable) {
	for _, k := range []string{"a", "b", "c/d", "c/e"} {
		set(t, s, k, []byte(k))
	}
	if err := s.EraseValues(ctx, []string{"a", "c/d", "missing"}); err != nil {
		t.Fatal(err)
	}
	wantStrings(t, "keys after erase_values", listAll(t, s, ""), []string{"b", "c/e"})
}

func testErasePrefix(t *testing.T, s *storesvc.Portable) {
	for _, k := range []string{"a/b", "a/c/d", "ab/x", "a.b", "e/f"} {
		set(t, s, k, []byte(k))
	}
	if err := s.ErasePrefix(ctx, "a/"); err != nil {
		t.Fatal(err)
	}
	wantStrings(t, "keys after erase_prefix", listAll(t, s, ""), []string{"a.b", "ab/x", "e/f"})
	if err := s.ErasePrefix(ctx, "nothing/here/"); err != nil {
		t.Fatalf("erase_prefix of an absent prefix: %v", err)
	}
	if err := s.ErasePrefix(ctx, "e/f/"); err != nil { // e/f is a key, not a prefix
		t.Fatal(err)
	}
	wantValue(t, s, "e/f", []byte("e/f"))
}

func testErasePrefixAll(t *testing.T, s *storesvc.Portable) {
	for _, k := range []string{"zarr.json", "a/b", "c/d/e"} {
		set(t, s, k, []byte(k))
	}
	if err := s.ErasePrefix(ctx, ""); err != nil {
		t.Fatal(err)
	}
	wantStrings(t, "keys after erase_prefix of everything", listAll(t, s, ""), nil)
	set(t, s, "again", []byte("x"))
	wantValue(t, s, "again", []byte("x"))
}

func testConditionalErase(t *testing.T, s *storesvc.Portable) {
	g := set(t, s, "k", []byte("v"))
	g2 := set(t, s, "k", []byte("w"))
	wantErr(t, "Erase with a stale generation", s.Erase(ctx, "k", storesvc.Condition{IfGenerationMatch: g}), storesvc.ErrPrecondition)
	wantValue(t, s, "k", []byte("w"))
	if err := s.Erase(ctx, "k", storesvc.Condition{IfGenerationMatch: g2}); err != nil {
		t.Fatal(err)
	}
	wantMissing(t, s, "k")
	wantErr(t, "conditional Erase of a missing key", s.Erase(ctx, "k", storesvc.Condition{IfGenerationMatch: g2}), storesvc.ErrPrecondition)
	wantErr(t, "Erase IfAbsent", s.Erase(ctx, "k", storesvc.Condition{IfAbsent: true}), storesvc.ErrInvalidKey)
}

func testSetPartialValues(t *testing.T, s *storesvc.Portable) {
	set(t, s, "p", []byte("0123456789"))
	set(t, s, "q", []byte("abc"))
	set(t, s, "r", []byte("r"))
	err := s.SetPartialValues(ctx, []storesvc.PartialWrite{
		{Key: "p", Offset: 8, Data: []byte("XYZ")}, // extends the value
		{Key: "p", Offset: 0, Data: []byte("AB")},
		{Key: "q", Offset: 3, Data: []byte("def")}, // appends
		{Key: "r", Offset: 0, Data: []byte{}},
	})
	if err != nil {
		t.Fatal(err)
	}
	wantValue(t, s, "p", []byte("AB234567XYZ"))
	wantValue(t, s, "q", []byte("abcdef"))
	wantValue(t, s, "r", []byte("r"))
}

func testSetPartialValuesErrors(t *testing.T, s *storesvc.Portable) {
	set(t, s, "p", []byte("0123456789"))
	err := s.SetPartialValues(ctx, []storesvc.PartialWrite{{Key: "missing", Data: []byte("x")}})
	wantErr(t, "partial write to a missing key", err, storesvc.ErrNotFound)
	wantMissing(t, s, "missing")
	err = s.SetPartialValues(ctx, []storesvc.PartialWrite{{Key: "p", Offset: 11, Data: []byte("x")}})
	wantErr(t, "partial write past the end", err, storesvc.ErrOutOfRange)
	err = s.SetPartialValues(ctx, []storesvc.PartialWrite{{Key: "p", Offset: 0, Data: []byte("xyz")}, {Key: "p", Offset: 2, Data: []byte("x")}})
	wantErr(t, "overlapping partial writes", err, storesvc.ErrInvalidKey)
	err = s.SetPartialValues(ctx, []storesvc.PartialWrite{{Key: "p", Offset: -1, Data: []byte("x")}})
	wantErr(t, "negative offset", err, storesvc.ErrInvalidKey)
	wantValue(t, s, "p", []byte("0123456789"))
}

// testConcurrentPartialWrites has goroutines write disjoint bytes of one
// value: none may be lost.
func testConcurrentPartialWrites(t *testing.T, s *storesvc.Portable) {
	const workers, each = 4, 8
	set(t, s, "v", make([]byte, workers*each))
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				off := int64(i*workers + w)
				if err := s.SetPartialValues(ctx, []storesvc.PartialWrite{{Key: "v", Offset: off, Data: []byte{byte(off + 1)}}}); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	want := make([]byte, workers*each)
	for i := range want {
		want[i] = byte(i + 1)
	}
	wantValue(t, s, "v", want)
}

// patternReader yields n pseudo-random bytes without holding them.
type patternReader struct {
	rng *rand.Rand
	n   int64
}

func (r *patternReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), r.n)]
	for i := 0; i+8 <= len(p); i += 8 {
		v := r.rng.Uint64()
		for j := range 8 {
			p[i+j] = byte(v >> (8 * j))
		}
	}
	for i := len(p) &^ 7; i < len(p); i++ {
		p[i] = byte(r.rng.Uint32())
	}
	r.n -= int64(len(p))
	return len(p), nil
}

func testLargeValue(t *testing.T, s *storesvc.Portable, size int64) {
	src := &patternReader{rng: rand.New(rand.NewPCG(42, 43)), n: size}
	h := sha256.New()
	if _, err := s.Set(ctx, "large", io.TeeReader(src, h), storesvc.Condition{}); err != nil {
		t.Fatal(err)
	}
	want := h.Sum(nil)
	obj, err := s.Get(ctx, "large", storesvc.ByteRange{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	h.Reset()
	n, err := io.Copy(h, obj)
	if err != nil {
		t.Fatal(err)
	}
	if n != size || obj.Size != size || !bytes.Equal(h.Sum(nil), want) {
		t.Fatalf("large value read back as %d bytes (size %d) with a different hash", n, obj.Size)
	}
	tail, _ := get(t, s, "large", storesvc.Suffix(1000))
	if len(tail) != 1000 {
		t.Fatalf("suffix of large value: %d bytes", len(tail))
	}
}
