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

// FuzzProject projects arbitrary (also huge) selections onto arbitrary
// grids: no panic, no allocation that grows with the selection or the
// grid, and every projection consistent with the range it came from.
func FuzzProject(f *testing.F) {
	f.Add(int64(100), int64(7), int64(3), int64(90), int64(4), int64(10), int64(3))
	f.Add(int64(1e12), int64(1000), int64(0), int64(1e12), int64(1000), int64(1<<40), int64(1))
	f.Add(int64(1<<62), int64(1<<31), int64(5), int64(1<<62), int64(1), int64(1<<62), int64(1<<62))
	f.Fuzz(func(t *testing.T, n0, l0, start, stop, step, n1, l1 int64) {
		shape, chunks := []int64{n0, n1}, []int64{l0, l1}
		sel := []Range{{start, stop, step}, {0, n1, 1}}
		var p *Projection
		var err error
		allocs := testing.AllocsPerRun(1, func() { p, err = Project(shape, chunks, sel) })
		if allocs > 12 { // a constant few: the result, or an error message
			t.Fatalf("Project allocated %v times", allocs)
		}
		if err != nil {
			return
		}
		d := p.Dims[0]
		if d.Len() < 0 || d.Len() > max(n0, 0)+1 {
			t.Fatalf("%d projections for a dimension of %d", d.Len(), n0)
		}
		var prev DimProjection
		prevI := int64(-1)
		for _, i := range []int64{0, 1, d.Len() / 2, d.Len() - 2, d.Len() - 1} {
			if i <= prevI || i >= d.Len() {
				continue
			}
			dp := d.At(i)
			if dp.Count < 1 || dp.Start < 0 || dp.Stop > l0 || dp.Start+(dp.Count-1)*dp.Step >= dp.Stop {
				t.Fatalf("inconsistent projection %d: %+v", i, dp)
			}
			if prevI >= 0 && (dp.Chunk <= prev.Chunk || dp.OutStart < prev.OutStart+prev.Count) {
				t.Fatalf("projections out of order: %+v then %+v", prev, dp)
			}
			if got := d.Search(dp.OutStart); got != i {
				t.Fatalf("Search(%d) = %d, want %d", dp.OutStart, got, i)
			}
			prev, prevI = dp, i
		}
		if d.Len() > 0 {
			lastP := d.At(d.Len() - 1)
			if lastP.OutStart+lastP.Count != p.Shape[0] {
				t.Fatalf("projections end at %d, the output at %d", lastP.OutStart+lastP.Count, p.Shape[0])
			}
		}
	})
}
