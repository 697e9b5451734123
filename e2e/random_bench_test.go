package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"math/rand/v2"

	"github.com/zarrgate/zarrgate/client"
)

// BenchmarkRandom64 is issue 20's target 3 on its own: random 64×64 reads
// of float32 arrays in 256×256 chunks (the three layouts of
// BenchmarkGatewaySlabs, 4096×8192 elements each, 128 MiB), by the Go
// client through a real `zarrgate serve` on loopback, and, with
// ZARRGATE_PYTHON set (a python with tensorstore), by tensorstore in
// process on the same directory (bench/random_reads.py, one process kept
// running). Each iteration is a round: per layout, 300 reads by each
// side, in an order that alternates from round to round, so that both
// see the same machine. Reported per layout: p50 and p99 of all rounds'
// reads, and p50's ratio to tensorstore's.
//
//	ZARRGATE_PYTHON=~/.cache/zarrgate/venv-client/bin/python \
//	  go test -run '^$' -bench Random64 -benchtime 10x ./e2e/
func BenchmarkRandom64(b *testing.B) {
	const rows, cols, perRound = 4096, 8192, 300
	root := b.TempDir()
	s := startServer(b, "--root", root)
	ctx := context.Background()
	c, err := client.Dial(ctx, s.addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	data := make([]float32, rows*cols)
	for i := range rows {
		for j := range cols {
			data[i*cols+j] = benchValue(i, j)
		}
	}
	arrays := map[string]*client.Array{}
	for _, l := range benchLayouts {
		a, err := c.CreateArray(ctx, l.name, client.ArraySpec{Shape: []int64{rows, cols}, DataType: "float32",
			ChunkShape: []int64{benchChunk, benchChunk}, ShardShape: l.shards, Codecs: l.codecs})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := client.Write(ctx, a, nil, data); err != nil {
			b.Fatal(err)
		}
		arrays[l.name] = a
	}
	var py *exec.Cmd
	var pyIn *bufio.Writer
	var pyOut *bufio.Scanner
	if p := os.Getenv("ZARRGATE_PYTHON"); p != "" {
		py = exec.Command(p, "../bench/random_reads.py", root)
		py.Stderr = os.Stderr
		in, err := py.StdinPipe()
		if err != nil {
			b.Fatal(err)
		}
		out, err := py.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := py.Start(); err != nil {
			b.Fatal(err)
		}
		defer func() { in.Close(); py.Wait() }()
		pyIn, pyOut = bufio.NewWriter(in), bufio.NewScanner(out)
		pyOut.Buffer(nil, 1<<20)
	}
	tensorstore := func(layout string, seed int) []time.Duration {
		fmt.Fprintf(pyIn, "%s %d %d\n", layout, perRound, seed)
		if err := pyIn.Flush(); err != nil {
			b.Fatal(err)
		}
		if !pyOut.Scan() {
			b.Fatalf("tensorstore: no answer: %v", pyOut.Err())
		}
		var lat []time.Duration
		for _, f := range strings.Fields(pyOut.Text()) {
			us, err := strconv.ParseFloat(f, 64)
			if err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Duration(us*1e3))
		}
		return lat
	}
	buf := make([]float32, 64*64)
	zarrgate := func(a *client.Array, seed int) []time.Duration {
		r := rand.New(rand.NewPCG(uint64(seed), 2))
		lat := make([]time.Duration, 0, perRound)
		for range perRound {
			y, x := r.Int64N(rows-64), r.Int64N(cols-64)
			t0 := time.Now()
			if err := client.ReadInto(ctx, a, client.Selection{{Start: y, Stop: y + 64, Step: 1}, {Start: x, Stop: x + 64, Step: 1}}, buf); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
			if buf[0] != data[y*cols+x] || buf[63*64+63] != data[(y+63)*cols+x+63] {
				b.Fatal("random read differs")
			}
		}
		return lat
	}
	zg, tsl := map[string][]time.Duration{}, map[string][]time.Duration{}
	// A warm-up round, not counted: connections, page cache, both sides'
	// caches of metadata.
	for _, l := range benchLayouts {
		zarrgate(arrays[l.name], 0)
		if py != nil {
			tensorstore(l.name, 0)
		}
	}
	round := 0
	for b.Loop() {
		round++
		for _, l := range benchLayouts {
			if round%2 == 0 && py != nil {
				tsl[l.name] = append(tsl[l.name], tensorstore(l.name, round)...)
			}
			zg[l.name] = append(zg[l.name], zarrgate(arrays[l.name], round)...)
			if round%2 == 1 && py != nil {
				tsl[l.name] = append(tsl[l.name], tensorstore(l.name, round)...)
			}
		}
	}
	pct := func(lat []time.Duration, p int) float64 {
		slices.Sort(lat)
		return float64(lat[len(lat)*p/100].Microseconds())
	}
	for _, l := range benchLayouts {
		b.ReportMetric(pct(zg[l.name], 50), l.name+"-p50-µs")
		b.ReportMetric(pct(zg[l.name], 99), l.name+"-p99-µs")
		if py != nil {
			b.ReportMetric(pct(tsl[l.name], 50), l.name+"-ts-p50-µs")
			b.ReportMetric(pct(tsl[l.name], 99), l.name+"-ts-p99-µs")
			b.ReportMetric(pct(zg[l.name], 50)/pct(tsl[l.name], 50), l.name+"-p50-ratio")
		}
	}
}
