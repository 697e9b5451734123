package archtest

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const mod = "github.com/zarrgate/zarrgate"

// floors lists every package of the module by floor, lowest first
// (docs/architecture.md). A package may import packages of its own floor
// and of lower floors only. A new package must be given a floor here.
var floors = [][]string{
	// 0: the format. Standard library and small format libraries only.
	{"zarr"},
	// 1: the vocabulary every floor above shares: error codes, buffers,
	// the memory budget, shared-memory segments.
	{"errs", "internal/bufpool", "internal/membudget", "internal/shm", "internal/testenv", "internal/testcerts", "internal/tlsconf", "internal/auth", "internal/filewatch", "internal/retrybudget", "internal/complevel", "internal/inflate"},
	// 2: the contracts: what a store is, what a codec engine does.
	{"storesvc", "storesvc/storetest", "codec"},
	// 3: what implements them without a transport: store backends, pure
	// codec implementations, and the array engine.
	{"storesvc/file", "storesvc/memory", "storesvc/s3", "storesvc/s3/s3test", "storesvc/zip", "storesvc/storeurl",
		"codecsvc/blosc", "gateway", "internal/authz"},
	// 4: the transport: generated stubs, the wire codec (and the bulk
	// listener, ReadSlab's frames beside gRPC), gRPC servers and
	// remote clients of each service, and the codec service (codecs and
	// their server in one package).
	{"gen/zarrgate/codec/v1", "gen/zarrgate/gateway/v1", "gen/zarrgate/store/v1", "internal/wire", "internal/grpcerr",
		"internal/rpc", "internal/metrics", "internal/tracing", "storesvc/internal/storeproto", "storesvc/storeserver", "storesvc/remote",
		"codecsvc", "codecsvc/remote", "codecsvc/remote/remotetest", "gateway/arrayserver", "internal/authz/authzgrpc", "internal/auth/authgrpc", "internal/security", "internal/tlsbatch", "internal/httpapi", "internal/bulk"},
	// 5: the Go client of the wire API.
	// The HTTP handlers over the engine (slab endpoint, browser view) sit
	// beside it: they parse selections with its grammar.
	{"client", "gateway/httpslab", "internal/webui"},
	// 6: wiring and the tests that drive the binary (the TypeScript
	// client's test writes its arrays with clients/typescript/test/gowriter).
	{"cmd/zarrgate", "e2e", "internal/archtest", "clients/typescript/test/gowriter", "bench/sidebyside", "bench/rawtcp", "bench/clientread", "bench/pingpong"},
}

// transport is what floors 0 to 3 must not depend on, even indirectly.
var transport = []string{"google.golang.org/grpc", "google.golang.org/protobuf", mod + "/gen/", mod + "/internal/wire"}

// never lists pairs of package trees that must not depend on each other in
// either direction: stores and codecs are independent services.
var never = [][2]string{{"storesvc", "codecsvc"}}

type pkg struct {
	path    string
	imports []string
	std     bool
}

// graph returns every package the module's packages depend on (non-test
// imports), by import path.
func graph(t *testing.T) map[string]pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}|{{.Standard}}|{{join .Imports \" \"}}", mod+"/...")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	g := map[string]pkg{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.SplitN(line, "|", 3)
		g[f[0]] = pkg{path: f[0], std: f[1] == "true", imports: strings.Fields(f[2])}
	}
	return g
}

// deps returns the transitive dependencies of p.
func deps(g map[string]pkg, p string) map[string]bool {
	seen := map[string]bool{}
	var walk func(string)
	walk = func(p string) {
		for _, q := range g[p].imports {
			if !seen[q] {
				seen[q] = true
				walk(q)
			}
		}
	}
	walk(p)
	return seen
}

// via names the direct imports of p through which it reaches any of bad.
func via(g map[string]pkg, p string, bad []string) []string {
	var out []string
	for _, q := range g[p].imports {
		d := deps(g, q)
		d[q] = true
		for _, b := range bad {
			if d[b] {
				out = append(out, q)
				break
			}
		}
	}
	return out
}

func local(p string) (string, bool) {
	if p == mod {
		return "", true
	}
	rel, ok := strings.CutPrefix(p, mod+"/")
	return rel, ok
}

func floorOf(rel string) int {
	for i, f := range floors {
		if slices.Contains(f, rel) {
			return i
		}
	}
	return -1
}

func TestFloors(t *testing.T) {
	g := graph(t)
	for p, info := range g {
		rel, ok := local(p)
		if !ok {
			continue
		}
		fl := floorOf(rel)
		if fl < 0 {
			t.Errorf("package %s has no floor: add it to floors in %s", rel, "internal/archtest/arch_test.go")
			continue
		}
		for _, q := range info.imports {
			qrel, ok := local(q)
			if !ok {
				continue
			}
			if qf := floorOf(qrel); qf > fl {
				t.Errorf("%s (floor %d) imports %s (floor %d): lower floors never import higher ones", rel, fl, qrel, qf)
			}
		}
	}
}

func TestNoTransportBelowFloor4(t *testing.T) {
	g := graph(t)
	for i := 0; i <= 3; i++ {
		for _, rel := range floors[i] {
			var bad []string
			for d := range deps(g, mod+"/"+rel) {
				for _, tr := range transport {
					if strings.HasPrefix(d, tr) {
						bad = append(bad, d)
					}
				}
			}
			if len(bad) > 0 {
				slices.Sort(bad)
				t.Errorf("%s (floor %d) depends on the transport: %d packages, such as %s; through %v",
					rel, i, len(bad), strings.Join(bad[:min(len(bad), 3)], ", "), via(g, mod+"/"+rel, bad))
			}
		}
	}
}

// TestFormatStandsAlone: zarr imports nothing of ours and, outside the
// standard library, only small format libraries.
func TestFormatStandsAlone(t *testing.T) {
	allowed := []string{"github.com/x448/float16"}
	g := graph(t)
	for d := range deps(g, mod+"/zarr") {
		if g[d].std || slices.Contains(allowed, d) {
			continue
		}
		t.Errorf("zarr depends on %s", d)
	}
}

// TestEngineUsesContracts: the array engine reaches stores and codecs
// through their contracts only, never a backend or the codec service.
func TestEngineUsesContracts(t *testing.T) {
	g := graph(t)
	for d := range deps(g, mod+"/gateway") {
		rel, ok := local(d)
		if !ok {
			continue
		}
		if strings.HasPrefix(rel, "codecsvc") || strings.HasPrefix(rel, "storesvc/") {
			t.Errorf("gateway depends on %s", rel)
		}
	}
}

func TestIndependentServices(t *testing.T) {
	g := graph(t)
	under := func(rel, tree string) bool { return rel == tree || strings.HasPrefix(rel, tree+"/") }
	for p := range g {
		rel, ok := local(p)
		if !ok {
			continue
		}
		for _, pair := range never {
			for _, dir := range [][2]string{pair, {pair[1], pair[0]}} {
				if !under(rel, dir[0]) {
					continue
				}
				for d := range deps(g, p) {
					if drel, ok := local(d); ok && under(drel, dir[1]) {
						t.Errorf("%s depends on %s: %s and %s never depend on each other", rel, drel, pair[0], pair[1])
					}
				}
			}
		}
	}
}
