package zarr

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func seeds(f *testing.F, suffixes ...string) [][]byte {
	entries, _ := os.ReadDir("testdata")
	var out [][]byte
	for _, e := range entries {
		for _, s := range suffixes {
			if strings.HasSuffix(e.Name(), s) {
				b, err := os.ReadFile(filepath.Join("testdata", e.Name()))
				if err == nil {
					out = append(out, b)
				}
			}
		}
	}
	return out
}

// FuzzParseV3 checks that no zarr.json makes the parser panic, and that
// whatever it accepts encodes and parses again.
func FuzzParseV3(f *testing.F) {
	for _, s := range seeds(f, ".json") {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		n, err := ParseV3(data)
		if err != nil {
			return
		}
		doc, err := n.EncodeV3()
		if err != nil {
			return
		}
		if _, err := ParseV3(doc); err != nil {
			t.Fatalf("re-parse of encoded document: %v\n%s", err, doc)
		}
	})
}

// FuzzParseV2 checks that no .zarray/.zattrs pair (or .zgroup) makes the
// parsers panic, and that accepted arrays encode.
func FuzzParseV2(f *testing.F) {
	arrays := seeds(f, ".zarray")
	attrs := seeds(f, ".zattrs")
	for i, a := range arrays {
		f.Add(a, attrs[i%len(attrs)])
		f.Add(a, []byte(nil))
	}
	f.Fuzz(func(t *testing.T, zarray, zattrs []byte) {
		if a, err := ParseV2Array(zarray, zattrs); err == nil {
			if za, zt, err := a.EncodeV2(); err == nil {
				if _, err := ParseV2Array(za, zt); err != nil {
					t.Fatalf("re-parse: %v\n%s\n%s", err, za, zt)
				}
			}
			_, _ = a.EncodeV3()
		}
		_, _ = ParseV2Group(zarray, zattrs)
		_, _ = ParseV2Consolidated(zarray)
	})
}
