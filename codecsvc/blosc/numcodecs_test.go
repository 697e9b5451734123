package blosc

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/zarrgate/zarrgate/internal/testenv"
)

// TestNumcodecsDecodesOurFrames checks that c-blosc (through numcodecs)
// decodes the frames we write. It runs only when ZARRGATE_PYTHON names a
// Python interpreter with numcodecs installed, e.g.
//
//	python3 -m venv /tmp/bloscvenv && /tmp/bloscvenv/bin/pip install numcodecs numpy
//	ZARRGATE_PYTHON=/tmp/bloscvenv/bin/python go test -run Numcodecs ./codecsvc/blosc/
func TestNumcodecsDecodesOurFrames(t *testing.T) {
	py := testenv.Python(t)
	dir := t.TempDir()
	var m goldenManifest
	// numcodecs bundles c-blosc without snappy.
	for _, cname := range []string{"blosclz", "lz4", "lz4hc", "zstd", "zlib"} {
		for _, sh := range []Shuffle{NoShuffle, ByteShuffle, BitShuffle} {
			for _, ts := range []int{1, 2, 4, 8, 3} {
				for _, size := range []int{1, 7, 3000, 5*4096 + 13, 200_003} {
					for _, bs := range []int{0, 4096} {
						in := smoothFloat32(size)
						inName := fmt.Sprintf("in_%d.bin", size)
						if _, err := os.Stat(filepath.Join(dir, inName)); err != nil {
							if err := os.WriteFile(filepath.Join(dir, inName), in, 0o644); err != nil {
								t.Fatal(err)
							}
						}
						o := Options{Cname: cname, Clevel: 5, Shuffle: sh, Typesize: ts, Blocksize: bs}
						frame, err := Compress(in, o)
						if err != nil {
							t.Fatal(err)
						}
						name := fmt.Sprintf("%s_sh%d_ts%d_n%d_bs%d.blosc", cname, sh, ts, size, bs)
						if err := os.WriteFile(filepath.Join(dir, name), frame, 0o644); err != nil {
							t.Fatal(err)
						}
						m.Frames = append(m.Frames, goldenEntry{Frame: name, Input: inName, Cname: cname,
							Clevel: 5, Shuffle: int(sh), Typesize: ts, Blocksize: bs})
					}
				}
			}
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(py, filepath.Join("testdata", "gen_golden.py"), "verify", dir).CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("numcodecs verification failed: %v", err)
	}
}
