package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/client"
)

// BenchmarkWriteDurability writes the 512 MiB zstd array whole
// through `zarrgate serve` with --durability fsync (the default) and none,
// and, with ZARRGATE_PYTHON set (a python with tensorstore), by
// tensorstore with file_io_sync true and false (bench/write_bench.py), in
// interleaved rounds (b.N of them), each into a fresh directory on the
// same file system. Reported: each system's median MB/s and the writer's
// CPU seconds per write (the server's for zarrgate). With
// $ZARRGATE_BASELINE_BIN, that build of zarrgate runs too.
//
//	ZARRGATE_PYTHON=~/.cache/zarrgate/venv-client/bin/python go test -run '^$' -bench WriteDurability -benchtime 5x -timeout 60m ./e2e/
func BenchmarkWriteDurability(b *testing.B) {
	ctx := context.Background()
	l := benchLayouts[1] // zstd
	data := make([]float32, benchRows*benchCols)
	for i := range benchRows {
		for j := range benchCols {
			data[i*benchCols+j] = benchValue(i, j)
		}
	}
	const size = benchRows * benchCols * 4
	type system struct {
		name string
		run  func(round int) (mbs, cpu float64)
	}
	var systems []system
	base := b.TempDir()
	// With $ZARRGATE_BASELINE_BIN, another build of zarrgate (an older
	// commit's) runs too, with its defaults: what a change gave.
	durabilities := []string{"fsync", "none"}
	if os.Getenv("ZARRGATE_BASELINE_BIN") != "" {
		durabilities = append(durabilities, "baseline")
	}
	for _, d := range durabilities {
		root := filepath.Join(base, "zarrgate-"+d)
		var s *server
		if d == "baseline" {
			s = startCmd(b, exec.Command(os.Getenv("ZARRGATE_BASELINE_BIN"), "serve", "--listen", "127.0.0.1:0", "--root", root))
		} else {
			s = startServer(b, "--root", root, "--durability", d)
		}
		c, err := client.Dial(ctx, s.addr)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		pid := s.cmd.Process.Pid
		systems = append(systems, system{"zarrgate-" + d, func(round int) (float64, float64) {
			name := fmt.Sprintf("r%d", round)
			a, err := c.CreateArray(ctx, name, client.ArraySpec{Shape: []int64{benchRows, benchCols}, DataType: "float32",
				ChunkShape: []int64{benchChunk, benchChunk}, Codecs: l.codecs})
			if err != nil {
				b.Fatal(err)
			}
			cpu0 := procCPU(b, pid)
			t0 := time.Now()
			if _, err := client.Write(ctx, a, nil, data); err != nil {
				b.Fatal(err)
			}
			el := time.Since(t0)
			cpu := (procCPU(b, pid) - cpu0).Seconds()
			if round == 0 && d == "fsync" {
				// The template of tensorstore's array.
				tmpl, err := os.ReadFile(filepath.Join(root, name, "zarr.json"))
				if err != nil {
					b.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(base, "template.json"), tmpl, 0o644); err != nil {
					b.Fatal(err)
				}
			}
			os.RemoveAll(filepath.Join(root, name))
			return size / el.Seconds() / 1e6, cpu
		}})
	}
	if py := os.Getenv("ZARRGATE_PYTHON"); py != "" {
		for _, sync := range []string{"true", "false"} {
			label := map[string]string{"true": "fsync", "false": "none"}[sync]
			systems = append(systems, system{"tensorstore-" + label, func(round int) (float64, float64) {
				out := filepath.Join(base, fmt.Sprintf("ts-%s-%d", label, round))
				cmd := exec.Command(py, "../bench/write_bench.py", filepath.Join(base, "template.json"), out, sync)
				cmd.Stderr = os.Stderr
				res, err := cmd.Output()
				if err != nil {
					b.Fatalf("tensorstore write: %v", err)
				}
				var r struct {
					MBs float64 `json:"mb_per_s"`
					CPU float64 `json:"cpu_s"`
				}
				if err := json.Unmarshal(res, &r); err != nil {
					b.Fatalf("tensorstore write: %v: %s", err, res)
				}
				os.RemoveAll(out)
				return r.MBs, r.CPU
			}})
		}
	}
	mbs := make([][]float64, len(systems))
	cpus := make([][]float64, len(systems))
	round := 0
	for b.Loop() {
		for i, s := range systems {
			m, c := s.run(round)
			mbs[i], cpus[i] = append(mbs[i], m), append(cpus[i], c)
		}
		round++
	}
	for i, s := range systems {
		m, c := median(mbs[i]), median(cpus[i])
		b.ReportMetric(m, s.name+"-MB/s")
		b.ReportMetric(c, s.name+"-cpu-s")
		b.Logf("%s: median %.0f MB/s (rounds %v), %.2f CPU s per write", s.name, m, mbs[i], c)
	}
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}
