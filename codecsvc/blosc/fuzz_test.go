package blosc

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/zarrgate/zarrgate/errs"
)

// FuzzDecompress feeds arbitrary frames to the decoder: it must never panic,
// never return more than maxSize bytes, and fail only with DataLoss.
func FuzzDecompress(f *testing.F) {
	dir, m := loadGolden(f)
	for _, e := range m.Frames {
		b, err := os.ReadFile(filepath.Join(dir, e.Frame))
		if err != nil {
			f.Fatal(err)
		}
		if len(b) <= 8192 {
			f.Add(b, 8192)
		}
	}
	for _, cname := range allCnames {
		for _, sh := range []Shuffle{NoShuffle, ByteShuffle, BitShuffle} {
			fr, err := Compress(smoothFloat32(3000), Options{Cname: cname, Clevel: 5, Shuffle: sh, Typesize: 4, Blocksize: 1024})
			if err != nil {
				f.Fatal(err)
			}
			f.Add(fr, 3000)
		}
	}
	f.Fuzz(func(t *testing.T, src []byte, maxSize int) {
		if maxSize < 0 || maxSize > 1<<20 {
			maxSize = 1 << 20
		}
		out, err := Decompress(src, maxSize)
		if err != nil {
			if !errors.Is(err, errs.DataLoss) {
				t.Fatalf("error without DataLoss: %v", err)
			}
			return
		}
		if len(out) > maxSize {
			t.Fatalf("decoded %d bytes, maxSize %d", len(out), maxSize)
		}
		// A dirty destination: every byte of it must be written.
		dst := bytes.Repeat([]byte{0xA5}, len(out))
		n, err := DecompressInto(dst, src)
		if err != nil || n != len(out) || !bytes.Equal(dst, out) {
			t.Fatalf("DecompressInto disagrees: %d, %v", n, err)
		}
	})
}
