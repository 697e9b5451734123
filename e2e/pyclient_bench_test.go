package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/zarrgate/zarrgate/client"
)

// goReadEnv, set in a re-run of this test binary, makes it the Go
// client's side of BenchmarkPythonClient: "ADDR PATH READS SHARED [BULK]"
// (see goRead), before any test runs.
const goReadEnv = "ZARRGATE_E2E_GOREAD"

func init() {
	if v := os.Getenv(goReadEnv); v != "" {
		if err := goRead(strings.Fields(v)); err != nil {
			fmt.Fprintln(os.Stderr, "goread:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// pyResult is one system's run: what bench/python_client_bench.py prints
// (and goRead, in the same form).
type pyResult struct {
	System     string  `json:"system"`
	MBps       float64 `json:"mb_per_s"`
	FirstMBps  float64 `json:"first_mb_per_s"`
	CPUms      float64 `json:"cpu_ms"`
	PeakRSSMiB float64 `json:"peak_rss_mib"`
	NBytes     int64   `json:"nbytes"`
	CRC32      uint32  `json:"crc32"`
}

// goRead is the Go client in a process of its own, as the Python systems
// are: a first full read into a fresh slice, then reads times into it
// (ReadInto, as timedReads), printing the best as a pyResult.
func goRead(args []string) error {
	if len(args) != 4 && len(args) != 5 {
		return fmt.Errorf("want ADDR PATH READS SHARED [BULK], got %q", args)
	}
	bulk := len(args) < 5 || args[4] == "true"
	reads, err := strconv.Atoi(args[2])
	if err != nil {
		return err
	}
	shared := args[3] == "true"
	ctx := context.Background()
	c, err := client.Dial(ctx, args[0], client.WithSharedMemory(shared), client.WithBulk(bulk))
	if err != nil {
		return err
	}
	defer c.Close()
	a, err := c.OpenArray(ctx, args[1])
	if err != nil {
		return err
	}
	n := int64(1)
	for _, d := range a.Shape {
		n *= d
	}
	t0 := time.Now()
	got := make([]float32, n)
	if err := client.ReadInto(ctx, a, nil, got); err != nil {
		return err
	}
	first := time.Since(t0)
	best, cpu := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
	for range reads {
		t0, c0 := time.Now(), ownCPU()
		if err := client.ReadInto(ctx, a, nil, got); err != nil {
			return err
		}
		best = min(best, time.Since(t0))
		cpu = min(cpu, ownCPU()-c0)
	}
	raw := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(got))), n*4)
	name := map[bool]string{false: "go-socket", true: "go-shared"}[shared]
	if !bulk {
		name += "-stream"
	}
	return json.NewEncoder(os.Stdout).Encode(pyResult{
		System: name, MBps: math.Round(float64(n*4)/best.Seconds()/1e5) / 10,
		FirstMBps: math.Round(float64(n*4)/first.Seconds()/1e5) / 10, CPUms: math.Round(cpu.Seconds()*1e4) / 10,
		PeakRSSMiB: float64(selfStatus("VmHWM")) / 1024, NBytes: n * 4, CRC32: crc32.ChecksumIEEE(raw),
	})
}

// ownCPU is this process's user and system CPU time so far.
func ownCPU() time.Duration {
	d, err := cpuTime(os.Getpid())
	if err != nil {
		panic(err)
	}
	return d
}

// selfStatus is a kB field of /proc/self/status (0 if absent).
func selfStatus(field string) int64 {
	b, _ := os.ReadFile("/proc/self/status")
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// BenchmarkPythonClient compares full reads of the 512 MiB zstd benchmark
// array (float32, 256×256 chunks, as BenchmarkGatewaySlabs) through one
// `zarrgate serve` on loopback by the Go client and the Python slab client,
// each through the socket and through shared memory, and by zarr-python
// reading the directory. The server has a bulk listener: the Python
// client's socket reads (zarrgate-socket, zarrgate-aio-socket) take their
// blocks over the bulk connection, and zarrgate-socket-stream /
// zarrgate-aio-socket-stream are the same reads with bulk=False, every block
// through the gRPC stream. Every run is a process of its own (this binary
// re-run for Go, bench/python_client_bench.py for Python); rounds
// ($ZARRGATE_PYBENCH_ROUNDS, default 3) run the systems in turn, starting
// one further along each round, and the median of each system's best read
// per process is reported, with ratios, the median of the least CPU time a
// timed read took in the client process (all its threads: the machine is
// shared, and CPU time is steadier than MB/s), and the highest peak RSS of
// its processes (the bound: the array's size + 64 MiB). Needs
// $ZARRGATE_PYTHON, a python with zarr, numpy and grpcio (the client's
// venv); the client comes from ../clients/python/src.
// go-socket reads over serve's bulk connection (on loopback by default),
// go-socket-stream through the gRPC stream (client.WithBulk(false)).
// $ZARRGATE_PYBENCH_ROOT keeps the array in that directory from run to run;
// $ZARRGATE_PYBENCH_SYSTEMS (comma-separated names) runs only those systems,
// e.g. "zarr-python,zarr-python-store,zarr-python-store-socket" for
// zarr-python over ZarrgateStore (the store service; through shared memory,
// and through the socket only) against zarr-python on the directory.
//
//	ZARRGATE_PYTHON=$HOME/.cache/zarrgate/venv-client/bin/python \
//	  go test -run '^$' -bench PythonClient -benchtime 1x -timeout 60m ./e2e/
func BenchmarkPythonClient(b *testing.B) {
	py := os.Getenv("ZARRGATE_PYTHON")
	if py == "" {
		b.Fatal("BenchmarkPythonClient needs $ZARRGATE_PYTHON (a python with zarr, numpy and grpcio)")
	}
	rounds := 3
	if v := os.Getenv("ZARRGATE_PYBENCH_ROUNDS"); v != "" {
		var err error
		if rounds, err = strconv.Atoi(v); err != nil || rounds < 1 {
			b.Fatalf("ZARRGATE_PYBENCH_ROUNDS=%q", v)
		}
	}
	const reads = 3
	root := os.Getenv("ZARRGATE_PYBENCH_ROOT")
	if root == "" {
		root = b.TempDir()
	}
	// The Python clients' socket reads take their blocks over the bulk
	// connection (zarrgate-socket-stream, zarrgate-aio-socket-stream: bulk=False,
	// every block through the gRPC stream, for comparison).
	s := startServer(b, "--root", root, "--bulk-listen", "127.0.0.1:0")
	ctx := context.Background()
	const path = "zstd"
	if _, err := os.Stat(filepath.Join(root, path, "zarr.json")); err != nil {
		c, err := client.Dial(ctx, s.addr)
		if err != nil {
			b.Fatal(err)
		}
		a, err := c.CreateArray(ctx, path, client.ArraySpec{Shape: []int64{benchRows, benchCols}, DataType: "float32",
			ChunkShape: []int64{benchChunk, benchChunk}, Codecs: benchLayouts[1].codecs})
		if err != nil {
			b.Fatal(err)
		}
		data := make([]float32, benchRows*benchCols)
		for i := range benchRows {
			for j := range benchCols {
				data[i*benchCols+j] = benchValue(i, j)
			}
		}
		if _, err := client.Write(ctx, a, nil, data); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
	src, err := filepath.Abs("../clients/python/src")
	if err != nil {
		b.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	r := strconv.Itoa(reads)
	systems := []struct {
		name string
		cmd  func() *exec.Cmd
	}{
		{"go-socket", func() *exec.Cmd { return goCmd(self, s.addr+" "+path+" "+r+" false") }},
		{"go-socket-stream", func() *exec.Cmd { return goCmd(self, s.addr+" "+path+" "+r+" false false") }},
		{"go-shared", func() *exec.Cmd { return goCmd(self, s.addr+" "+path+" "+r+" true") }},
		{"zarrgate-socket", nil},
		{"zarrgate-socket-stream", nil},
		{"zarrgate-socket-copier", nil},
		{"zarrgate-socket-fixed-window", nil},
		{"zarrgate-shared", nil},
		{"zarrgate-aio-socket", nil},
		{"zarrgate-aio-socket-stream", nil},
		{"zarrgate-aio-shared", nil},
		{"zarr-python", func() *exec.Cmd {
			return exec.Command(py, "../bench/python_client_bench.py", "zarr-python", root, path, r)
		}},
		{"zarr-python-store", nil},
		{"zarr-python-store-socket", nil},
		{"zarr-python-store-unbatched", nil},
	}
	if v := os.Getenv("ZARRGATE_PYBENCH_SYSTEMS"); v != "" {
		want := strings.Split(v, ",")
		systems = slices.DeleteFunc(systems, func(s struct {
			name string
			cmd  func() *exec.Cmd
		}) bool {
			return !slices.Contains(want, s.name)
		})
		if len(systems) != len(want) {
			b.Fatalf("ZARRGATE_PYBENCH_SYSTEMS=%q: unknown system among them", v)
		}
	}
	for i := range systems {
		if systems[i].cmd == nil {
			name := systems[i].name
			systems[i].cmd = func() *exec.Cmd { return exec.Command(py, "../bench/python_client_bench.py", name, s.addr, path, r) }
		}
	}
	results := map[string][]pyResult{}
	// The server's CPU time per read of each system (the whole process's
	// reads, first included, divided by their number): on a shared machine
	// the client's CPU is only half of what a read through the server costs.
	serverCPU := map[string][]float64{}
	for b.Loop() {
		for round := range rounds {
			for k := range systems {
				sys := systems[(round+k)%len(systems)]
				cmd := sys.cmd()
				if cmd.Env == nil {
					cmd.Env = os.Environ()
				}
				cmd.Env = append(cmd.Env, "PYTHONPATH="+src)
				cmd.Stderr = os.Stderr
				s0, err := cpuTime(s.cmd.Process.Pid)
				if err != nil {
					b.Fatal(err)
				}
				out, err := cmd.Output()
				if err != nil {
					b.Fatalf("%s: %v", sys.name, err)
				}
				var res pyResult
				if err := json.Unmarshal(out, &res); err != nil {
					b.Fatalf("%s: %v in %q", sys.name, err, out)
				}
				if res.System != sys.name || res.NBytes != benchRows*benchCols*4 {
					b.Fatalf("%s: %+v", sys.name, res)
				}
				s1, err := cpuTime(s.cmd.Process.Pid)
				if err != nil {
					b.Fatal(err)
				}
				serverCPU[sys.name] = append(serverCPU[sys.name], float64(s1-s0)/float64(time.Millisecond)/(reads+1))
				fmt.Printf("round %d: %s", round, out)
				results[sys.name] = append(results[sys.name], res)
			}
		}
	}
	want := results[systems[0].name][0].CRC32
	median := map[string]float64{}
	for _, sys := range systems {
		var mbps, rss, cpu []float64
		for _, res := range results[sys.name] {
			if res.CRC32 != want {
				b.Fatalf("%s read other bytes (CRC-32 %08x, %s %08x)", sys.name, res.CRC32, systems[0].name, want)
			}
			mbps = append(mbps, res.MBps)
			rss = append(rss, res.PeakRSSMiB)
			cpu = append(cpu, res.CPUms)
		}
		slices.Sort(mbps)
		slices.Sort(cpu)
		b.ReportMetric(cpu[len(cpu)/2], sys.name+"-client-cpu-ms/read")
		scpu := slices.Sorted(slices.Values(serverCPU[sys.name]))
		b.ReportMetric(scpu[len(scpu)/2], sys.name+"-server-cpu-ms/read")
		median[sys.name] = mbps[len(mbps)/2]
		b.ReportMetric(median[sys.name], sys.name+"-MB/s")
		b.ReportMetric(slices.Max(rss), sys.name+"-peak-rss-MiB")
	}
	ratio := func(a, b2 string) {
		if median[a] > 0 && median[b2] > 0 {
			b.ReportMetric(median[a]/median[b2], a+"/"+b2)
		}
	}
	for _, kind := range []string{"socket", "shared"} {
		for _, py := range []string{"zarrgate-", "zarrgate-aio-"} {
			ratio(py+kind, "go-"+kind)
			ratio(py+kind, "zarr-python")
		}
	}
	ratio("zarrgate-socket-stream", "go-socket-stream")
	ratio("zarrgate-socket-stream", "zarr-python")
	ratio("zarrgate-aio-socket-stream", "zarr-python")
	ratio("zarrgate-socket", "zarrgate-socket-stream")
	ratio("zarrgate-socket-copier", "zarrgate-socket")
	ratio("zarr-python-store", "zarr-python")
	ratio("zarr-python-store-socket", "zarr-python")
	ratio("zarr-python-store-unbatched", "zarr-python")
	b.ReportMetric(benchRows*benchCols*4/(1<<20)+64, "rss-bound-MiB")
}

func goCmd(self, args string) *exec.Cmd {
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), goReadEnv+"="+args)
	return cmd
}
