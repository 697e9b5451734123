package shm

import "testing"

// BenchmarkSegmentSetup is the per-read cost of a fresh 32 MiB segment:
// create, the gateway's first write of every page, the client's map and
// first read of every page, and both unmaps.
//
//	go test -run '^$' -bench SegmentSetup ./internal/shm/
func BenchmarkSegmentSetup(b *testing.B) {
	const size = 32 << 20
	src := make([]byte, 1<<20)
	for b.Loop() {
		seg, err := Create(size)
		if err != nil {
			b.Fatal(err)
		}
		for off := DataOffset; off+len(src) <= size; off += len(src) {
			copy(seg.Data[off:], src)
		}
		m, err := Attach(seg.Path, size, seg.Token)
		if err != nil {
			b.Fatal(err)
		}
		var sum byte
		for off := 0; off < size; off += 4096 {
			sum += m.Data[off]
		}
		m.Close()
		seg.Close()
	}
}
