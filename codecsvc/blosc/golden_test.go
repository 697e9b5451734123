package blosc

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Golden frames were written by c-blosc through numcodecs; see
// testdata/gen_golden.py.

type goldenEntry struct {
	Frame     string `json:"frame"`
	Input     string `json:"input"`
	Cname     string `json:"cname"`
	Clevel    int    `json:"clevel"`
	Shuffle   int    `json:"shuffle"`
	Typesize  int    `json:"typesize"`
	Blocksize int    `json:"blocksize"`
}

type goldenManifest struct {
	Numcodecs string        `json:"numcodecs"`
	Cblosc    string        `json:"cblosc"`
	Frames    []goldenEntry `json:"frames"`
}

// ramp regenerates the large "ramp:N" inputs: little-endian uint32 k>>3.
func ramp(nbytes int) []byte {
	b := make([]byte, (nbytes/4+1)*4)
	for k := 0; k*4 < len(b); k++ {
		binary.LittleEndian.PutUint32(b[4*k:], uint32(k>>3))
	}
	return b[:nbytes]
}

func readInput(t testing.TB, dir, name string) []byte {
	if n, ok := strings.CutPrefix(name, "ramp:"); ok {
		size, err := strconv.Atoi(n)
		if err != nil {
			t.Fatal(err)
		}
		return ramp(size)
	}
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func loadGolden(t testing.TB) (string, goldenManifest) {
	dir := filepath.Join("testdata", "golden")
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m goldenManifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return dir, m
}

func TestGoldenDecode(t *testing.T) {
	dir, m := loadGolden(t)
	if len(m.Frames) < 80 {
		t.Fatalf("manifest lists only %d frames", len(m.Frames))
	}
	for _, e := range m.Frames {
		t.Run(e.Frame, func(t *testing.T) {
			frame, err := os.ReadFile(filepath.Join(dir, e.Frame))
			if err != nil {
				t.Fatal(err)
			}
			want := readInput(t, dir, e.Input)
			got, err := Decompress(frame, len(want))
			if err != nil {
				t.Fatalf("Decompress: %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("decoded %d bytes differ from the %d-byte input", len(got), len(want))
			}
			// Into a larger buffer, too.
			dst := make([]byte, len(want)+10)
			n, err := DecompressInto(dst, frame)
			if err != nil || n != len(want) || !bytes.Equal(dst[:n], want) {
				t.Fatalf("DecompressInto = %d, %v", n, err)
			}
			if len(want) > 0 {
				if _, err := Decompress(frame, len(want)-1); err == nil {
					t.Fatal("Decompress with maxSize below nbytes succeeded")
				}
			}
		})
	}
}

// TestGoldenHeaders checks that we choose the same block size and flags as
// c-blosc for the same input and options, and that our frames round-trip.
func TestGoldenHeaders(t *testing.T) {
	dir, m := loadGolden(t)
	for _, e := range m.Frames {
		t.Run(e.Frame, func(t *testing.T) {
			frame, err := os.ReadFile(filepath.Join(dir, e.Frame))
			if err != nil {
				t.Fatal(err)
			}
			in := readInput(t, dir, e.Input)
			ours, err := Compress(in, Options{Cname: e.Cname, Clevel: e.Clevel, Shuffle: Shuffle(e.Shuffle), Typesize: e.Typesize, Blocksize: e.Blocksize})
			if err != nil {
				t.Fatal(err)
			}
			// Whether a frame ends up memcpyed depends on how well each codec
			// compresses; everything else in the header must match.
			const mask = ^byte(flagMemcpyed)
			if ours[0] != frame[0] || ours[1] != frame[1] || ours[2]&mask != frame[2]&mask || ours[3] != frame[3] ||
				!bytes.Equal(ours[4:12], frame[4:12]) {
				t.Errorf("header % x, c-blosc wrote % x", ours[:12], frame[:12])
			}
			got, err := Decompress(ours, len(in))
			if err != nil || !bytes.Equal(got, in) {
				t.Fatalf("round trip: %v", err)
			}
		})
	}
}
