package validate

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

const dashboardFile = "deploy/grafana/zarrgate.json"

func dashboardText(t *testing.T) string {
	b, err := os.ReadFile(filepath.Join(root, dashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkDashboard runs every check of the dashboard text against fams.
func checkDashboard(text string, fams map[string]*Family) ([]Query, []error) {
	d, err := DecodeDashboard([]byte(text))
	if err != nil {
		return nil, []error{err}
	}
	queries, errs := CheckDashboard(d)
	return queries, append(errs, CheckQueries(queries, fams)...)
}

// TestDashboardAgainstScrape: every query of deploy/grafana/zarrgate.json
// parses as PromQL and selects metrics, with labels, that the real
// processes export once a slab has been written and read through them;
// and every zarrgate_ metric they export has a panel.
func TestDashboardAgainstScrape(t *testing.T) {
	fams := scrape(t)
	queries, errs := checkDashboard(dashboardText(t), fams)
	for _, err := range errs {
		t.Error(err)
	}
	if len(queries) < 30 {
		t.Errorf("%d queries checked, want the 30 or more of the file", len(queries))
	}
	used := map[string]bool{}
	for _, q := range queries {
		for _, name := range regexp.MustCompile(`\b(zarrgate_\w+|grpc_\w+|go_\w+|process_\w+)`).FindAllString(q.Expr, -1) {
			used[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")] = true
		}
	}
	var missing []string
	n := 0
	for name := range fams {
		if strings.HasPrefix(name, "zarrgate_") {
			n++
			if !used[name] {
				missing = append(missing, name)
			}
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("zarrgate metrics the processes export and no panel shows: %v", missing)
	}
	if n < 18 {
		t.Errorf("the scrape has %d zarrgate_ families, want the 18 of docs/operations.md", n)
	}
}

// TestDashboardMistakesFail: each mistake, made once in a copy of the
// dashboard, fails the check with a message that says what.
func TestDashboardMistakesFail(t *testing.T) {
	fams := scrape(t)
	text := dashboardText(t)
	const sel = `job=~\"$job\", instance=~\"$instance\"`
	for _, c := range []struct{ old, new, want string }{
		// Metrics and labels the processes do not export.
		{"zarrgate_write_conflicts_total", "zarrgate_write_conflict_total", "metric zarrgate_write_conflict_total is not in the scrape"},
		{"rate(zarrgate_store_read_bytes_total", "rate(zarrgate_store_read_byte_total", "zarrgate_store_read_byte_total is not in the scrape"},
		{"zarrgate_store_call_duration_seconds_bucket", "zarrgate_store_call_duration_bucket", "zarrgate_store_call_duration_bucket is not in the scrape"},
		{"zarrgate_store_calls_total{" + sel + `, code!=\"OK\"}`, "zarrgate_store_calls_total{" + sel + `, status!=\"OK\"}`, `zarrgate_store_calls_total has no label "status"`},
		{`sum by (kind) (rate(zarrgate_metadata_cache_misses_total`, `sum by (knd) (rate(zarrgate_metadata_cache_misses_total`, `grouping by "knd"`},
		// PromQL that parses but means nothing.
		{"sum by (job) (zarrgate_memory_budget_waiting_calls{" + sel + "})", "sum by (job) (rate(zarrgate_memory_budget_waiting_calls{" + sel + "}[5m]))", "zarrgate_memory_budget_waiting_calls is a gauge, not a counter"},
		{"sum(rate(zarrgate_write_conflicts_total{" + sel + "}[$__rate_interval]))", "sum(zarrgate_write_conflicts_total{" + sel + "})", "zarrgate_write_conflicts_total is a counter"},
		{"sum by (le, backend, op) (rate(zarrgate_store_call_duration_seconds_bucket", "sum by (backend, op) (rate(zarrgate_store_call_duration_seconds_bucket", "drops le"},
		{"histogram_quantile(0.99, sum by (le, job, op) (rate(zarrgate_codec_batch_duration_seconds_bucket", "histogram_quantile(0.99, sum by (le, job, op) (rate(zarrgate_codec_batch_duration_seconds_sum", "want a histogram's _bucket series"},
		// Not PromQL, or variables that do not exist.
		{"(rate(zarrgate_retries_total{", "(rate(zarrgate_retries_total{{", "not PromQL"},
		{"[$__rate_interval]))\",\n", "[$__rate_intervall]))\",\n", "$__rate_intervall"},
		{`instance=~\"$instance\"`, `instance=~\"$instances\"`, "$instances"},
		{`label_values(grpc_server_started_total, job)"`, `label_values(grpc_server_startd_total, job)"`, "grpc_server_startd_total is not in the scrape"},
		// Structure.
		{`"id": 3,`, `"id": 2,`, "id 2 is also panel"},
		{`"gridPos": {`, `"gridPosition": {`, "no gridPos"},
		{`"x": 16,`, `"x": 17,`, "not within the 24-column grid"},
		{`"x": 8,`, `"x": 4,`, "overlaps panel"},
		{`"uid": "${datasource}"`, `"uid": "prometheus"`, "data source"},
		{`"name": "instance"`, `"name": "host"`, `no "instance" variable`},
		{`"schemaVersion": 39`, `"schemaVersion": 27`, "schemaVersion 27"},
		{`"expr": "sum by (grpc_method) (rate(`, `"expr": "", "x": "sum by (grpc_method) (rate(`, "empty expr"},
	} {
		if !strings.Contains(text, c.old) {
			t.Errorf("the dashboard has no %q to change", c.old)
			continue
		}
		_, errs := checkDashboard(strings.Replace(text, c.old, c.new, 1), fams)
		if !slices.ContainsFunc(errs, func(e error) bool { return strings.Contains(e.Error(), c.want) }) {
			t.Errorf("%q → %q: errors %v, want one saying %q", c.old, c.new, errs, c.want)
		}
	}
}

var (
	scrapeOnce sync.Once
	scraped    map[string]*Family
	scrapeErr  error
)

// scrape runs the tiers as deploy/kubernetes.yaml does, on 127.0.0.1: a
// store worker over a directory, a codec worker and a gateway over both
// (with shared memory), each with --admin-listen; writes and reads slabs
// through the gateway with the Go client (scripts/dashboard-load.go
// --once); and parses the three processes' /metrics.
func scrape(t *testing.T) map[string]*Family {
	scrapeOnce.Do(func() { scraped, scrapeErr = scrapeTiers() })
	if scrapeErr != nil {
		t.Fatal(scrapeErr)
	}
	return scraped
}

// proc is a serving command and what its log said.
type proc struct {
	cmd         *exec.Cmd
	addr, admin string
	log         *bytes.Buffer
	mu          *sync.Mutex
}

var (
	adminURLRE = regexp.MustCompile(`admin_url=(\S+)`)
	servingRE  = regexp.MustCompile(`msg="zarrgate [a-z-]+ serving" addr=(\S+)`)
)

// start runs bin with args and waits for its admin URL and gRPC address.
func start(args ...string) (*proc, error) {
	p := &proc{cmd: exec.Command(bin, args...), log: &bytes.Buffer{}, mu: &sync.Mutex{}}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	ready := make(chan [2]string, 1)
	go func() {
		var admin, addr string
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.log.WriteString(line + "\n")
			p.mu.Unlock()
			if m := adminURLRE.FindStringSubmatch(line); m != nil {
				admin = m[1]
			}
			if m := servingRE.FindStringSubmatch(line); m != nil {
				addr = m[1]
			}
			if admin != "" && addr != "" {
				ready <- [2]string{admin, addr}
				admin = ""
			}
		}
		close(ready)
	}()
	select {
	case r, ok := <-ready:
		if ok {
			p.admin, p.addr = r[0], r[1]
			return p, nil
		}
	case <-time.After(time.Minute):
	}
	p.cmd.Process.Kill()
	p.mu.Lock()
	defer p.mu.Unlock()
	return nil, fmt.Errorf("zarrgate %s: no admin URL and address logged:\n%s", strings.Join(args, " "), p.log)
}

func scrapeTiers() (map[string]*Family, error) {
	dir, err := os.MkdirTemp("", "zarrgate-dashboard")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	var procs []*proc
	defer func() {
		for _, p := range procs {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
	}()
	run := func(args ...string) (*proc, error) {
		p, err := start(append(args, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0")...)
		if p != nil {
			procs = append(procs, p)
		}
		return p, err
	}
	sw, err := run("store-worker", "--root", filepath.Join(dir, "store"), "--create")
	if err != nil {
		return nil, err
	}
	cw, err := run("codec-worker", "--memory-limit", "256MiB")
	if err != nil {
		return nil, err
	}
	gw, err := run("gateway", "--store", sw.addr, "--codec", cw.addr, "--shared-memory", "--memory-limit", "512MiB", "--bulk-listen", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}

	// The load program, built in the main module (it uses the Go client).
	load := filepath.Join(dir, "dashboard-load")
	build := exec.Command("go", "build", "-o", load, "./scripts/dashboard-load.go")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building scripts/dashboard-load.go: %v\n%s", err, out)
	}
	if out, err := exec.Command(load, "--addr", gw.addr, "--once").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "ok" {
		return nil, fmt.Errorf("dashboard-load --once: %v\n%s", err, out)
	}

	var bodies []io.Reader
	for _, p := range []*proc{gw, sw, cw} {
		resp, err := http.Get(p.admin + "/metrics")
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			return nil, fmt.Errorf("%s/metrics: %d %v", p.admin, resp.StatusCode, err)
		}
		bodies = append(bodies, bytes.NewReader(b))
	}
	return ParseScrape(bodies...)
}
