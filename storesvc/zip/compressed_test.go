package zip_test

import (
	stdzip "archive/zip"
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/zip"
)

// content is the first n bytes of the lines testdata/compressed.py writes.
func content(n int) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "line %d: %d\n", i, i*i%9973)
	}
	return b.Bytes()[:n]
}

func getRange(s storesvc.Store, key string, r storesvc.ByteRange) ([]byte, error) {
	obj, err := s.Get(ctx, key, r)
	if err != nil {
		return nil, err
	}
	defer obj.Close()
	return io.ReadAll(obj)
}

// TestCompressedMembers reads testdata/compressed.zip, written by
// CPython's zipfile (3.14's, as backports.zstd ships it; see
// testdata/compressed.py): bzip2 (method 12) and zstd (method 93)
// members, whole and in ranges, including ranges across bzip2's 900 kB
// block, empty members and a Zarr group document.
func TestCompressedMembers(t *testing.T) {
	s, err := zip.Open("testdata/compressed.zip", zip.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := map[string][]byte{
		"bzip2.bin":        content(1_000_000),
		"zstd.bin":         content(1_000_000),
		"bzip2-small.bin":  content(1000),
		"zstd-small.bin":   content(1000),
		"bzip2-empty.bin":  {},
		"zstd-empty.bin":   {},
		"zstd-level19.bin": content(300_000),
		"a/zarr.json":      []byte(`{"zarr_format":3,"node_type":"group","attributes":{"compressed":"bzip2"}}`),
	}
	if got := strings.Join(list(t, s), " "); got != "a/zarr.json bzip2-empty.bin bzip2-small.bin bzip2.bin zstd-empty.bin zstd-level19.bin zstd-small.bin zstd.bin" {
		t.Fatalf("keys: %s", got)
	}
	for key, w := range want {
		if got := read(t, s, key); got != string(w) {
			t.Errorf("%s: whole read gives %d bytes, not the %d written", key, len(got), len(w))
		}
		n := int64(len(w))
		ranges := []storesvc.ByteRange{storesvc.Bounded(0, min(n, 10)), storesvc.Suffix(min(n, 7)), storesvc.FromOffset(n / 2), storesvc.Bounded(n/3, n/4)}
		if n == 1_000_000 {
			ranges = append(ranges, storesvc.Bounded(899_000, 2_000), storesvc.Bounded(999_999, 1), storesvc.Suffix(150_000))
		}
		for _, r := range ranges {
			got, err := getRange(s, key, r)
			off, l, _ := r.Resolve(n)
			if err != nil || !bytes.Equal(got, w[off:off+l]) {
				t.Errorf("%s %v: %d bytes, %v; want bytes [%d, %d)", key, r, len(got), err, off, off+l)
			}
		}
	}
	// Through the portable layer, as the server reads: several ranges of
	// one member at once.
	parts, err := storesvc.Wrap(s).GetPartialValues(ctx, []storesvc.KeyRange{
		{Key: "zstd.bin", Range: storesvc.Bounded(500_000, 100)},
		{Key: "bzip2.bin", Range: storesvc.Suffix(100)},
		{Key: "zstd.bin", Range: storesvc.Bounded(10, 20)},
	})
	if err != nil {
		t.Fatal(err)
	}
	big := content(1_000_000)
	for i, w := range [][]byte{big[500_000:500_100], big[999_900:], big[10:30]} {
		if !bytes.Equal(parts[i].Data, w) {
			t.Errorf("GetPartialValues part %d: %.40q, want %.40q", i, parts[i].Data, w)
		}
	}
}

// A bzip2 member written by Info-ZIP's zip 3.0 (`zip -X -Z bzip2 -
// lines.txt | cat > infozip-bzip2.zip`: an independent writer, and a data
// descriptor after the data since the output was a pipe).
func TestInfoZIPBzip2(t *testing.T) {
	s, err := zip.Open("testdata/infozip-bzip2.zip", zip.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if read(t, s, "lines.txt") != string(content(200_000)) {
		t.Fatal("lines.txt read wrong")
	}
	if got, err := getRange(s, "lines.txt", storesvc.Bounded(123_456, 50)); err != nil || !bytes.Equal(got, content(200_000)[123_456:123_506]) {
		t.Fatalf("ranged read: %d bytes, %v", len(got), err)
	}
}

// rawZip writes an archive of members whose compressed bytes, method and
// declared CRC and size are given as they are.
type rawMember struct {
	name   string
	method uint16
	data   []byte
	crc    uint32
	size   uint64
}

func rawZip(t *testing.T, members ...rawMember) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "raw.zip")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := stdzip.NewWriter(f)
	for _, m := range members {
		fw, err := w.CreateRaw(&stdzip.FileHeader{Name: m.name, Method: m.method, CRC32: m.crc, CompressedSize64: uint64(len(m.data)), UncompressedSize64: m.size})
		if err != nil {
			t.Fatal(err)
		}
		fw.Write(m.data)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return path
}

func zstdOf(t *testing.T, r io.Reader) []byte {
	t.Helper()
	var b bytes.Buffer
	enc, _ := zstd.NewWriter(&b, zstd.WithEncoderConcurrency(1))
	if _, err := io.Copy(enc, r); err != nil {
		t.Fatal(err)
	}
	enc.Close()
	return b.Bytes()
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func totalAlloc() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.TotalAlloc
}

// Compressed members that lie: corrupt data, a size that is too large or
// too small, a zstd frame asking for a 2 GiB window, a small declared size
// over 256 MiB of zeros or over a broken second frame (never reached: as
// Python's zipfile, the store decompresses only the declared size). Each read is DataLoss (or, for ranges the lie does
// not reach, the right bytes), fast and without allocating what the data
// claims. A cancelled read stops skipping.
func TestCompressedMembersThatLie(t *testing.T) {
	good, err := os.ReadFile("testdata/compressed.zip")
	if err != nil {
		t.Fatal(err)
	}
	src, _ := zip.Open("testdata/compressed.zip", zip.Options{ReadOnly: true})
	defer src.Close()
	value := content(1000)
	zs := zstdOf(t, bytes.NewReader(value))
	crc := crc32.ChecksumIEEE(value)
	// The bzip2 member as Python wrote it, cut out of the golden archive.
	zr, _ := stdzip.NewReader(bytes.NewReader(good), int64(len(good)))
	var bz []byte
	for _, f := range zr.File {
		if f.Name == "bzip2-small.bin" {
			rc, _ := f.OpenRaw()
			bz, _ = io.ReadAll(rc)
		}
	}
	flip := func(b []byte, i int) []byte { c := bytes.Clone(b); c[i] ^= 0x55; return c }
	// A 2 GiB window: magic, a frame header with only a window descriptor
	// (exponent 21: 2^31), an empty last raw block.
	bigWindow := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 21 << 3, 0x01, 0x00, 0x00}
	bomb := zstdOf(t, io.LimitReader(zeros{}, 256<<20))
	path := rawZip(t,
		rawMember{"zstd-corrupt", 93, flip(zs, len(zs)/2), crc, 1000},
		rawMember{"bzip2-corrupt", 12, flip(bz, len(bz)/2), crc, 1000},
		rawMember{"zstd-long", 93, zs, crc, 2000},
		rawMember{"bzip2-long", 12, bz, crc, 2000},
		rawMember{"zstd-short", 93, zs, crc, 500},
		rawMember{"zstd-window", 93, bigWindow, 0, 100},
		rawMember{"zstd-bomb", 93, bomb, 0, 1000},
		rawMember{"method-14", 14, []byte("lzma"), 0, 4},
		// The frame, then a broken one: reading past the declared size
		// would fail.
		rawMember{"zstd-trailing", 93, append(bytes.Clone(zs), flip(zs, 5)...), crc, 1000},
	)
	s, err := zip.Open(path, zip.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dataLoss := func(key string, r storesvc.ByteRange) {
		t.Helper()
		a0, t0 := totalAlloc(), time.Now()
		var err error
		if r == (storesvc.ByteRange{}) {
			_, _, err = storesvc.ReadAll(ctx, storesvc.Wrap(s), key)
		} else {
			_, err = getRange(s, key, r)
		}
		if !errors.Is(err, errs.DataLoss) {
			t.Errorf("%s %v: %v, want DataLoss", key, r, err)
		}
		if a, d := totalAlloc()-a0, time.Since(t0); a > 64<<20 || d > 5*time.Second {
			t.Errorf("%s %v: %d MiB allocated, %v", key, r, a>>20, d)
		}
	}
	dataLoss("zstd-corrupt", storesvc.ByteRange{})
	dataLoss("bzip2-corrupt", storesvc.ByteRange{})
	dataLoss("zstd-long", storesvc.ByteRange{})
	dataLoss("zstd-long", storesvc.Suffix(10)) // past the real end
	dataLoss("bzip2-long", storesvc.Bounded(1500, 10))
	dataLoss("zstd-short", storesvc.ByteRange{}) // cut at 500 bytes: the CRC does not match
	dataLoss("zstd-window", storesvc.ByteRange{})
	dataLoss("zstd-bomb", storesvc.ByteRange{}) // 1000 bytes read, then the CRC
	// Ranges the lies do not reach read right, and the bomb is read only
	// as far as the declared size.
	for _, key := range []string{"zstd-long", "zstd-short"} {
		if got, err := getRange(s, key, storesvc.Bounded(100, 50)); err != nil || !bytes.Equal(got, value[100:150]) {
			t.Errorf("%s: %d bytes, %v", key, len(got), err)
		}
	}
	a0, t0 := totalAlloc(), time.Now()
	if got, err := getRange(s, "zstd-bomb", storesvc.Suffix(10)); err != nil || !bytes.Equal(got, make([]byte, 10)) {
		t.Errorf("bomb suffix: %d bytes, %v", len(got), err)
	}
	if a, d := totalAlloc()-a0, time.Since(t0); a > 64<<20 || d > time.Second {
		t.Errorf("bomb suffix: %d MiB allocated, %v: decompressed past the declared size", a>>20, d)
	}
	for _, r := range []storesvc.ByteRange{{}, storesvc.Suffix(10), storesvc.Bounded(0, 1000)} {
		if got, err := getRange(s, "zstd-trailing", r); err != nil || len(got) == 0 {
			t.Errorf("zstd-trailing %v: %d bytes, %v: decompressed past the declared size", r, len(got), err)
		}
	}
	if _, err := s.Get(ctx, "method-14", storesvc.ByteRange{}); !errors.Is(err, errs.Unimplemented) {
		t.Errorf("LZMA member: %v, want Unimplemented", err)
	}

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := src.Get(cctx, "bzip2.bin", storesvc.Bounded(900_000, 10)); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled ranged read: %v", err)
	}
}
