package validate

import (
	"bufio"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The repository's root, from this package's directory.
const root = "../.."

// bin is zarrgate built by the Dockerfile's own `go build` line (TestMain).
var bin string

// pending are flags the manifests use that land in parallel branches
// (issue 16 item 1): tolerated while the binary lacks them. Remove an
// entry once its flag is in; then the binary's help checks it as any other.
var pending = map[string]string{}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "zarrgate-deploy")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "zarrgate")
	if err := buildAsDockerfile(bin); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildAsDockerfile runs the Dockerfile's build line outside Docker
// (scripts/image-binary.sh, as make build-image does), writing to out
// instead of /out/zarrgate.
func buildAsDockerfile(out string) error {
	cmd := exec.Command("scripts/image-binary.sh", out)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "VERSION=v0.0.0-deploycheck", "REVISION=0123abc")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("scripts/image-binary.sh (the Dockerfile's build line): %v\n%s", err, b)
	}
	return nil
}

// TestDockerfileBinary: the Dockerfile's build line makes a static binary
// (no interpreter, no shared libraries: it runs on distroless/static) that
// reports the version given as a build argument and does its codec work
// with libzstd and libdeflate (the cgocodecs build, linked in).
func TestDockerfileBinary(t *testing.T) {
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("not static: has a %v program header", p.Type)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("links shared libraries %v", libs)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil || !strings.HasPrefix(string(out), "zarrgate v0.0.0-deploycheck revision 0123abc,") {
		t.Errorf("--version: %q, %v", out, err)
	}
	if !regexp.MustCompile(`, codecs: libzstd \d+\.\d+\.\d+, libdeflate \d+\.\d+\n$`).Match(out) {
		t.Errorf("--version: %q; want the codecs of the cgocodecs build (libzstd, libdeflate)", out)
	}
	d, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"-trimpath", "FROM gcr.io/distroless/static", ":nonroot", "USER 65532", `ENTRYPOINT ["/usr/local/bin/zarrgate"]`} {
		if !strings.Contains(string(d), want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
}

// env is what the manifests are checked against: the binary's flags and
// the Secrets deploy/README.md creates.
func env(t *testing.T) Env {
	readme, err := os.ReadFile(filepath.Join(root, "deploy/README.md"))
	if err != nil {
		t.Fatal(err)
	}
	cache := map[string]map[string]Flag{}
	return Env{
		Flags: func(cmd string) (map[string]Flag, error) {
			if f, ok := cache[cmd]; ok {
				return f, nil
			}
			out, err := exec.Command(bin, cmd, "--help").Output()
			if err != nil {
				return nil, fmt.Errorf("not a command of the binary: %v", err)
			}
			cache[cmd] = ParseHelp(string(out))
			return cache[cmd], nil
		},
		Pending: pending,
		Note:    func(s string) { t.Log(s) },
		Secrets: ReadmeSecrets(string(readme)),
	}
}

func manifests(t *testing.T) string {
	b, err := os.ReadFile(filepath.Join(root, "deploy/kubernetes.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func check(t *testing.T, text string) []error {
	objs, err := Decode([]byte(text))
	if err != nil {
		return []error{err}
	}
	e := env(t)
	e.Note = nil
	return Check(objs, e)
}

// TestManifests: deploy/kubernetes.yaml decodes strictly and passes every
// check.
func TestManifests(t *testing.T) {
	text := manifests(t)
	objs, err := Decode([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) < 9 {
		t.Errorf("%d documents decoded, want the 9 or more of the file", len(objs))
	}
	for _, err := range Check(objs, env(t)) {
		t.Error(err)
	}
	if s := env(t).Secrets; len(s) < 3 {
		t.Errorf("deploy/README.md creates Secrets %v: want zarrgate-gateway-tls, zarrgate-worker-tls, zarrgate-tokens", s)
	}
}

// TestManifestMistakesFail: each mistake, made once in a copy of the
// manifests, makes the validation fail with a message that says what.
func TestManifestMistakesFail(t *testing.T) {
	text := manifests(t)
	for _, c := range []struct{ old, new, want string }{
		// Strict decoding: a misspelt field, a repeated field, a wrong type, an unknown kind.
		{"          readinessProbe:\n", "          readynessProbe:\n", `unknown field "spec.template.spec.containers[0].readynessProbe"`},
		{"            readOnlyRootFilesystem: true\n", "            readOnlyRootFilesystem: true\n            readOnlyRootFilesystem: true\n", "readOnlyRootFilesystem"},
		{"  replicas: 2\n", "  replicas: two\n", "replicas"},
		{"kind: HorizontalPodAutoscaler", "kind: HorizontalPodAutoscalar", "HorizontalPodAutoscalar"},
		// Cross-references.
		{"secretName: zarrgate-tokens", "secretName: zarrgate-token", `Secret "zarrgate-token" is not one deploy/README.md creates`},
		{"name: zarrgate-policy\n            items: [{key: workers.yaml", "name: zarrgate-policies\n            items: [{key: workers.yaml", `ConfigMap "zarrgate-policies" is not in the file`},
		{"items: [{key: tokens, path: tokens}]", "items: [{key: token, path: tokens}]", `has no key "token"`},
		{"store: dns:///zarrgate-store-workers:50052", "store: dns:///zarrgate-store-worker:50052", `no Service "zarrgate-store-worker"`},
		{"{name: grpc, port: 50053, targetPort: grpc}", "{name: grpc, port: 50053, targetPort: gprc}", "target gprc is not a port"},
		{"name: zarrgate-codec-worker}", "name: zarrgate-codec-workers}", "not a Deployment of this file"},
		// Flags against the binary, in args and in --config files.
		{"    memory-limit: 614MiB\n", "    memory-limit: 614MiB\n    memroy-wait: 5s\n", "--memroy-wait is not a flag of zarrgate codec-worker"},
		{`args: ["gateway", "--config"`, `args: ["gateway", "--max-slab-chunk", "5", "--config"`, "--max-slab-chunk is not a flag of zarrgate gateway"},
		{`args: ["store-worker",`, `args: ["store-wroker",`, "zarrgate store-wroker: not a command"},
		{"    tls-key: /etc/zarrgate/tls/tls.key\n    client-ca", "    tls-key: /etc/zarrgate/tls/tls.key\n    insecure: true\n    client-ca", "--insecure"},
		{"    policy: /etc/zarrgate/policy/gateway.yaml\n", "    policy: /etc/zarrgate/policy/gw.yaml\n", "--policy /etc/zarrgate/policy/gw.yaml: volume policy has no item at gw.yaml"},
		// Ports and probes.
		{"httpGet: {path: /readyz, port: admin, scheme: HTTPS}", "httpGet: {path: /readyz, port: grpc, scheme: HTTPS}", "readinessProbe"},
		{"httpGet: {path: /healthz, port: admin, scheme: HTTPS}", "httpGet: {path: /healthz, port: admin, scheme: HTTP}", "livenessProbe"},
		{"    listen: 0.0.0.0:50053\n", "    listen: 0.0.0.0:50054\n", "--listen port 50054"},
		{`prometheus.io/port: "9090"`, `prometheus.io/port: "9091"`, "prometheus.io/port"},
		// Memory, security.
		{"    memory-limit: 1228MiB\n", "    memory-limit: 2GiB\n", "--memory-limit 2GiB is 100% of the container's memory limit 2Gi"},
		{"requests: {cpu: \"1\", memory: 2Gi}", "requests: {cpu: \"1\", memory: 1Gi}", "memory request 1Gi is not the limit 2Gi"},
		{"            capabilities: {drop: [ALL]}\n", "            capabilities: {drop: [NET_RAW]}\n", "drop ALL"},
		{"        runAsNonRoot: true\n", "        runAsNonRoot: false\n", "runAsNonRoot"},
		{"image: registry.example.com/zarrgate:0.1.0", "image: zarrgate:latest", "latest"},
		{"            - {name: spill, mountPath: /var/spill}\n", "", "/var/spill must be an emptyDir mount"},
		// Stopping: the drain must fit in the pod's grace period.
		{"      terminationGracePeriodSeconds: 30\n", "      terminationGracePeriodSeconds: 15\n", "terminationGracePeriodSeconds 15 is not above --drain-delay + --shutdown-grace = 15s"},
		{"      terminationGracePeriodSeconds: 30\n", "", "set terminationGracePeriodSeconds explicitly"},
	} {
		if !strings.Contains(text, c.old) {
			t.Errorf("the manifests no longer contain %q: update the test", c.old)
			continue
		}
		errs := check(t, strings.Replace(text, c.old, c.new, 1))
		found := false
		for _, err := range errs {
			found = found || strings.Contains(err.Error(), c.want)
		}
		if !found {
			t.Errorf("%q → %q: errors %v, want one with %q", c.old, c.new, errs, c.want)
		}
	}
}

// TestPoliciesLoad: every policy of the manifests' ConfigMaps is one the
// real binary starts with (an invalid one would crash-loop the pods).
func TestPoliciesLoad(t *testing.T) {
	objs, err := Decode([]byte(manifests(t)))
	if err != nil {
		t.Fatal(err)
	}
	policies := PolicyFiles(objs, env(t))
	if len(policies) < 2 {
		t.Fatalf("policies %v: want the gateway's and the workers'", policies)
	}
	for name, text := range policies {
		p := filepath.Join(t.TempDir(), "policy.yaml")
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := startsServing(bin, "serve", "--root", "memory://", "--listen", "127.0.0.1:0", "--policy", p); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	// And a broken one does not.
	p := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(p, []byte("rules:\n  - principals: [user:x]\n    permissions: [raed]\n    prefixes: [\"\"]\n"), 0o600)
	if err := startsServing(bin, "serve", "--root", "memory://", "--listen", "127.0.0.1:0", "--policy", p); err == nil {
		t.Error("a policy with an unknown permission started")
	}
}

// startsServing runs a serving command until it logs that it serves (nil)
// or exits (its error and log).
func startsServing(bin string, args ...string) error {
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer cmd.Process.Kill()
	serving := make(chan bool, 1)
	var log strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), "serving") {
				serving <- true
				return
			}
		}
		serving <- false
	}()
	select {
	case ok := <-serving:
		if ok {
			return nil
		}
		return fmt.Errorf("exited: %v\n%s", cmd.Wait(), log.String())
	case <-time.After(30 * time.Second):
		return fmt.Errorf("did not start serving in 30s")
	}
}
