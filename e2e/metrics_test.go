package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/zarrgate/zarrgate/client"
	"github.com/zarrgate/zarrgate/internal/testcerts"
)

var adminRE = regexp.MustCompile(`admin_url=(\S+)`)

// adminProc is a serving command run with --admin-listen.
type adminProc struct {
	*server
	admin string       // the admin endpoint's base URL
	hc    *http.Client // for it, when not http.DefaultClient (TLS)
}

// startWithAdmin runs a serving command with --admin-listen 127.0.0.1:0
// and waits for the admin URL it logs (not for the gRPC listener: a
// gateway waits for its store tier before it listens), and for the gRPC
// address too when wantServing.
func startWithAdmin(t testing.TB, sub string, wantServing bool, args ...string) *adminProc {
	t.Helper()
	all := append([]string{sub, "--admin-listen", "127.0.0.1:0"}, args...)
	if !strings.Contains(strings.Join(args, " "), "--listen") {
		all = append(all, "--listen", "127.0.0.1:0")
	}
	cmd := exec.Command(bin, all...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &adminProc{server: &server{cmd: cmd, logs: &syncLog{}, done: make(chan error, 1)}}
	adminc, addrc := make(chan string, 1), make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			p.logs.WriteString(line + "\n")
			if m := adminRE.FindStringSubmatch(line); m != nil {
				adminc <- m[1]
			}
			if m := addrRE.FindStringSubmatch(line); m != nil && strings.Contains(line, "serving") {
				addrc <- m[1]
			}
		}
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		if t.Failed() {
			t.Logf("%s log:\n%s", sub, p.logs.String())
		}
	})
	for _, c := range []struct {
		ch   chan string
		into *string
		want bool
	}{{adminc, &p.admin, true}, {addrc, &p.addr, wantServing}} {
		if !c.want {
			continue
		}
		select {
		case *c.into = <-c.ch:
		case err := <-p.done:
			t.Fatalf("%s exited early: %v\n%s", sub, err, p.logs.String())
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not log its addresses\n%s", sub, p.logs.String())
		}
	}
	return p
}

// get fetches path from the admin endpoint: status and body.
func (p *adminProc) get(t testing.TB, path string) (int, string) {
	t.Helper()
	hc := p.hc
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Get(p.admin + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// scrape reads /metrics: each sample by name and labels, as
// name{l1="v1",l2="v2"} with the labels sorted (counters and gauges;
// histograms as name_count and name_sum).
func (p *adminProc) scrape(t testing.TB) map[string]float64 {
	t.Helper()
	code, body := p.get(t, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	tp := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := tp.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			ls := model.LabelSet{}
			for _, l := range m.GetLabel() {
				ls[model.LabelName(l.GetName())] = model.LabelValue(l.GetValue())
			}
			key := func(n string) string { return n + ls.String() }
			switch {
			case m.Counter != nil:
				out[key(name)] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[key(name)] = m.GetGauge().GetValue()
			case m.Histogram != nil:
				out[key(name+"_count")] = float64(m.GetHistogram().GetSampleCount())
				out[key(name+"_sum")] = m.GetHistogram().GetSampleSum()
			}
		}
	}
	return out
}

// delta is after[k] - before[k].
func delta(before, after map[string]float64, k string) float64 { return after[k] - before[k] }

// chunkBytes adds up the sizes of the chunk files under dir/path/c.
func chunkBytes(t *testing.T, dir string) (n int64, files int) {
	t.Helper()
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() && strings.Contains(p, string(filepath.Separator)+"c"+string(filepath.Separator)) {
			n += fi.Size()
			files++
		}
		return nil
	})
	return n, files
}

// writeAndRead creates a 64×64 int32 array in 16×16 chunks (bytes+zstd)
// at gRPC address addr, writes it whole and reads it back, and returns
// the metrics of the processes around each step.
func writeAndRead(t *testing.T, addr string, scrape func() []map[string]float64) (beforeWrite, afterWrite, afterRead []map[string]float64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, addr, client.WithSharedMemory(false))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, err := c.CreateArray(ctx, "m/a", client.ArraySpec{Shape: []int64{64, 64}, DataType: "int32", ChunkShape: []int64{16, 16},
		Codecs: `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":1}}]`})
	if err != nil {
		t.Fatal(err)
	}
	vals := make([]int32, 64*64)
	for i := range vals {
		vals[i] = int32(i * 7 % 1000)
	}
	sel := client.MustParseSelection("0:64,0:64")
	beforeWrite = scrape()
	if _, err := client.Write(ctx, a, sel, vals); err != nil {
		t.Fatal(err)
	}
	afterWrite = scrape()
	got, _, err := client.Read[int32](ctx, a, sel)
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if got[i] != vals[i] {
			t.Fatalf("element %d: read %d, wrote %d", i, got[i], vals[i])
		}
	}
	afterRead = scrape()
	return
}

// After a slab written and read back through `serve`, the metrics moved
// by exactly what happened: the chunk files' bytes written and read, 16
// chunks encoded and decoded by zstd, one WriteSlab and one ReadSlabSmall
// (the client's call for a slab of 16 KiB) answered OK; the memory budget's limit is the flag's.
func TestMetricsCountSlab(t *testing.T) {
	root := t.TempDir()
	p := startWithAdmin(t, "serve", true, "--root", root, "--memory-limit", "256MiB")
	scrape := func() []map[string]float64 { return []map[string]float64{p.scrape(t)} }
	b, w, r := writeAndRead(t, p.addr, scrape)
	before, afterW, afterR := b[0], w[0], r[0]

	n, files := chunkBytes(t, root)
	if files != 16 {
		t.Fatalf("%d chunk files on disk, want 16", files)
	}
	check := func(name string, got, want float64) {
		t.Helper()
		if got != want {
			t.Errorf("%s moved by %v, want %v", name, got, want)
		}
	}
	check("written bytes (write)", delta(before, afterW, `zarrgate_store_written_bytes_total{backend="file"}`), float64(n))
	check("set calls (write)", delta(before, afterW, `zarrgate_store_calls_total{backend="file", code="OK", op="set"}`), 16)
	check("encoded chunks", delta(before, afterW, `zarrgate_codec_chunks_total{codec="zstd", op="encode"}`), 16)
	check("WriteSlab OK", delta(before, afterW, `grpc_server_handled_total{grpc_code="OK", grpc_method="WriteSlab", grpc_service="zarrgate.gateway.v1.ArrayService", grpc_type="client_stream"}`), 1)
	// Reading: the chunks' stored bytes (metadata comes from the cache:
	// the node was looked up by the write).
	check("node cache misses (read)", delta(afterW, afterR, `zarrgate_metadata_cache_misses_total{kind="node"}`), 0)
	check("read bytes (read)", delta(afterW, afterR, `zarrgate_store_read_bytes_total{backend="file"}`), float64(n))
	check("written bytes (read)", delta(afterW, afterR, `zarrgate_store_written_bytes_total{backend="file"}`), 0)
	check("decoded chunks", delta(afterW, afterR, `zarrgate_codec_chunks_total{codec="zstd", op="decode"}`), 16)
	check("ReadSlabSmall OK", delta(afterW, afterR, `grpc_server_handled_total{grpc_code="OK", grpc_method="ReadSlabSmall", grpc_service="zarrgate.gateway.v1.ArrayService", grpc_type="unary"}`), 1)
	check("memory limit", afterR[`zarrgate_memory_budget_limit_bytes{}`], 256<<20)
	if afterR[`zarrgate_store_call_duration_seconds_count{backend="file", op="set"}`] < 16 {
		t.Errorf("store latency histogram has %v set calls, want at least 16", afterR[`zarrgate_store_call_duration_seconds_count{backend="file", op="set"}`])
	}
	if afterR[`go_goroutines{}`] == 0 || afterR[`process_resident_memory_bytes{}`] == 0 {
		t.Error("the Go and process collectors are missing")
	}
}

// The admin endpoint's other pages: liveness, readiness of a serving
// process, the version as --version prints it, pprof's index and a CPU
// profile; and nothing but them.
func TestAdminEndpoint(t *testing.T) {
	p := startWithAdmin(t, "serve", true, "--root", "memory://")
	if code, body := p.get(t, "/healthz"); code != 200 || strings.TrimSpace(body) != "ok" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, body := p.get(t, "/readyz"); code != 200 {
		t.Errorf("/readyz of a serving process: %d %q", code, body)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	_, body := p.get(t, "/version")
	var v struct{ Version, Go, Codecs string }
	if err := json.Unmarshal([]byte(body), &v); err != nil || v.Version != strings.TrimSpace(string(out)) || !strings.HasPrefix(v.Go, "go1.") || !strings.HasSuffix(v.Version, ", codecs: "+v.Codecs) || v.Codecs == "" {
		t.Errorf("/version: %q (%v), want version %q", body, err, out)
	}
	// zarrgate_build_info says the same.
	info := 0.0
	for k, x := range p.scrape(t) {
		if strings.HasPrefix(k, "zarrgate_build_info{") && strings.Contains(k, `codecs="`+v.Codecs+`"`) && strings.Contains(k, `goversion="`+v.Go+`"`) {
			info += x
		}
	}
	if info != 1 {
		t.Errorf("zarrgate_build_info{codecs=%q, goversion=%q}: %v, want 1", v.Codecs, v.Go, info)
	}
	if code, body := p.get(t, "/debug/pprof/"); code != 200 || !strings.Contains(body, "goroutine") {
		t.Errorf("/debug/pprof/: %d", code)
	}
	code, prof := p.get(t, "/debug/pprof/profile?seconds=1")
	if code != 200 || len(prof) < 2 || prof[0] != 0x1f || prof[1] != 0x8b {
		t.Errorf("CPU profile: %d, %d bytes, not gzipped protobuf", code, len(prof))
	}
	if code, _ := p.get(t, "/debug/vars"); code != 404 {
		t.Errorf("/debug/vars (expvar, of the default mux): %d, want 404", code)
	}
}

// A gateway is ready only while both its tiers have a ready worker: 503
// naming what is missing while its workers are down, 200 once they are
// up, 503 again when the codec worker goes. Meanwhile the gateway's
// remote store bytes match the store worker's file bytes, and the codec
// worker counts the chunks.
func TestReadyzFollowsWorkers(t *testing.T) {
	storeAddr, codecAddr := freeAddr(t), freeAddr(t)
	gw := startWithAdmin(t, "gateway", false, "--store", storeAddr, "--codec", codecAddr, "--tier-wait", "1s")
	code, body := gw.get(t, "/readyz")
	if code != 503 || !strings.Contains(body, "not ready") {
		t.Errorf("/readyz with no workers: %d %q, want 503", code, body)
	}
	if code, _ := gw.get(t, "/healthz"); code != 200 {
		t.Errorf("/healthz of a live gateway waiting for workers: %d", code)
	}
	root := t.TempDir()
	sw := startWithAdmin(t, "store-worker", true, "--root", root, "--listen", storeAddr)
	if !waitFor(20*time.Second, func() bool {
		_, b := gw.get(t, "/readyz")
		return strings.Contains(b, "codec") && !strings.Contains(b, "store tier") && !strings.Contains(b, "starting")
	}) {
		_, b := gw.get(t, "/readyz")
		t.Errorf("/readyz with the store worker up and the codec worker down: %q, want it to name the codec tier only", b)
	}
	cw := startWithAdmin(t, "codec-worker", true, "--listen", codecAddr)
	if !waitFor(20*time.Second, func() bool { c, _ := gw.get(t, "/readyz"); return c == 200 }) {
		c, b := gw.get(t, "/readyz")
		t.Fatalf("/readyz with both workers up: %d %q", c, b)
	}
	for _, w := range []*adminProc{sw, cw} {
		if c, b := w.get(t, "/readyz"); c != 200 {
			t.Errorf("worker /readyz: %d %q", c, b)
		}
	}
	servingRE := regexp.MustCompile(`msg="zarrgate gateway serving" addr=(\S+)`)
	var gwAddr []string
	if !waitFor(5*time.Second, func() bool { gwAddr = servingRE.FindStringSubmatch(gw.logs.String()); return gwAddr != nil }) {
		t.Fatalf("gateway address not logged")
	}
	scrape := func() []map[string]float64 { return []map[string]float64{gw.scrape(t), sw.scrape(t), cw.scrape(t)} }
	b, w, r := writeAndRead(t, gwAddr[1], scrape)
	n, _ := chunkBytes(t, root)
	for i, step := range []struct {
		name     string
		from, to []map[string]float64
	}{{"write", b, w}, {"read", w, r}} {
		gwRead, swRead := delta(step.from[0], step.to[0], `zarrgate_store_read_bytes_total{backend="remote"}`), delta(step.from[1], step.to[1], `zarrgate_store_read_bytes_total{backend="file"}`)
		gwWritten, swWritten := delta(step.from[0], step.to[0], `zarrgate_store_written_bytes_total{backend="remote"}`), delta(step.from[1], step.to[1], `zarrgate_store_written_bytes_total{backend="file"}`)
		if gwRead != swRead || gwWritten != swWritten {
			t.Errorf("%s: gateway read %v wrote %v bytes of its store workers; the worker read %v wrote %v", step.name, gwRead, gwWritten, swRead, swWritten)
		}
		op := []string{"encode", "decode"}[i]
		if d := delta(step.from[2], step.to[2], `zarrgate_codec_chunks_total{codec="zstd", op="`+op+`"}`); d != 16 {
			t.Errorf("codec worker: %v chunks %sd, want 16", d, op)
		}
		if d := delta(step.from[0], step.to[0], `zarrgate_codec_chunks_total{codec="zstd", op="`+op+`"}`); d != 16 {
			t.Errorf("gateway: %v chunks %sd through its workers, want 16", d, op)
		}
	}
	if d := delta(w[0], r[0], `zarrgate_store_read_bytes_total{backend="remote"}`); d != float64(n) {
		t.Errorf("gateway read %v bytes for the slab, want the chunks' %d", d, n)
	}
	if got := r[0][`grpc_client_handled_total{grpc_code="OK", grpc_method="Set", grpc_service="zarrgate.store.v1.StoreService", grpc_type="client_stream"}`]; got < 16 {
		t.Errorf("gateway's client metrics: %v Set calls to the store worker, want at least 16", got)
	}
	cw.cmd.Process.Kill()
	if !waitFor(20*time.Second, func() bool { c, b := gw.get(t, "/readyz"); return c == 503 && strings.Contains(b, "codec") }) {
		c, b := gw.get(t, "/readyz")
		t.Errorf("/readyz with the codec worker gone: %d %q, want 503 naming the codec tier", c, b)
	}
}

// An admin endpoint other hosts can reach needs TLS or --insecure, as
// the gRPC listener does: refused (exit 2) otherwise; with
// --tls-cert/--tls-key it serves HTTPS.
func TestAdminNonLoopback(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "serve", "--root", "memory://", "--listen", "127.0.0.1:0", "--admin-listen", "0.0.0.0:0")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "--admin-listen") {
		t.Errorf("plaintext admin on 0.0.0.0: %v\n%s", err, out)
	}
	ca := testcerts.NewCA(t, "admin CA")
	dir := t.TempDir()
	cert, key := ca.Issue(t, testcerts.Server("127.0.0.1", "localhost")).Write(t, dir)
	p := startWithAdmin(t, "serve", true, "--root", "memory://", "--tls-cert", cert, "--tls-key", key)
	if !strings.HasPrefix(p.admin, "https://") {
		t.Fatalf("admin URL %s with --tls-cert, want https", p.admin)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	resp, err := hc.Get(p.admin + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/healthz over TLS: %d", resp.StatusCode)
	}
	// --insecure allows plaintext on all interfaces.
	q := exec.Command(bin, "serve", "--root", "memory://", "--listen", "127.0.0.1:0", "--admin-listen", "0.0.0.0:0", "--insecure")
	stderr, _ := q.StderrPipe()
	if err := q.Start(); err != nil {
		t.Fatal(err)
	}
	defer q.Process.Kill()
	sc := bufio.NewScanner(stderr)
	seen := false
	for sc.Scan() && !seen {
		seen = strings.Contains(sc.Text(), "admin_url=http://0.0.0.0:") || strings.Contains(sc.Text(), "admin_url=http://[::]:")
	}
	if !seen {
		t.Error("--insecure --admin-listen 0.0.0.0:0 did not serve")
	}
}
