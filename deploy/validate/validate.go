// Package validate checks zarrgate's Kubernetes manifests offline, as a
// cluster's API server and the zarrgate binary would: every document is
// decoded strictly into the Kubernetes API types (an unknown or repeated
// field is an error, as `kubectl apply --validate=strict` makes it), then
// the references between documents, the containers' zarrgate flags and the
// deployment's rules (TLS, probes, memory, security context) are checked.
//
// It is its own module so that the Kubernetes API types never enter the
// product's go.mod; `make deploy-check` runs its tests.
package validate

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Decode splits a multi-document YAML file and decodes every document
// strictly into its Kubernetes type. Only the kinds the manifests use are
// known; any other is an error too.
func Decode(data []byte) ([]runtime.Object, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, autoscalingv2.AddToScheme, networkingv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	codec := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme, json.SerializerOptions{Yaml: true, Strict: true})
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []runtime.Object
	for i := 1; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if isEmpty(doc) {
			continue
		}
		obj, _, err := codec.Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		out = append(out, obj)
	}
}

// isEmpty reports whether a document holds only comments and blank lines.
func isEmpty(doc []byte) bool {
	for line := range strings.Lines(string(doc)) {
		l := strings.TrimSpace(line)
		if l != "" && !strings.HasPrefix(l, "#") && l != "---" {
			return false
		}
	}
	return true
}

// Flag is one flag of a zarrgate command, as its --help lists it.
type Flag struct {
	TakesValue bool
	// Default is the value the help says the flag has when not given
	// ("" when it says none).
	Default string
}

// Env is what the manifests are checked against besides themselves.
type Env struct {
	// Flags returns the flags of `zarrgate CMD` (from the real binary's
	// help), or an error for an unknown command.
	Flags func(cmd string) (map[string]Flag, error)
	// Pending are flags that land in parallel branches: tolerated when
	// the binary does not know them yet (reported through Note).
	Pending map[string]string
	Note    func(string)
	// Secrets are the Secrets the operator creates (they do not belong in
	// a manifest): name → the keys each holds, from deploy/README.md.
	Secrets map[string]map[string]bool
}

// Rules of the deployment, shared by the checks and the docs.
const (
	AdminPort        = 9090
	MemoryFractionLo = 0.55 // --memory-limit over the container's memory limit
	MemoryFractionHi = 0.65
)

// pathFlags hold the paths of files the container must see mounted.
var pathFlags = []string{"config", "tls-cert", "tls-key", "client-ca", "peer-ca", "peer-cert", "peer-key", "tokens", "policy"}

// Check returns every problem of the decoded manifests.
func Check(objs []runtime.Object, env Env) []error { return run(objs, env).errs }

// PolicyFiles returns the --policy files of the containers (where each is
// given → its content), for checking them with the real binary.
func PolicyFiles(objs []runtime.Object, env Env) map[string]string { return run(objs, env).policies }

func run(objs []runtime.Object, env Env) *checker {
	c := &checker{env: env, policies: map[string]string{}, configMaps: map[string]*corev1.ConfigMap{}, services: map[string]*corev1.Service{}, deployments: map[string]*appsv1.Deployment{}}
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.ConfigMap:
			c.configMaps[o.Name] = o
		case *corev1.Service:
			c.services[o.Name] = o
		case *appsv1.Deployment:
			c.deployments[o.Name] = o
		}
	}
	images := map[string]bool{}
	for _, o := range objs {
		switch o := o.(type) {
		case *appsv1.Deployment:
			c.deployment(o, images)
		case *corev1.Service:
			c.service(o)
		case *autoscalingv2.HorizontalPodAutoscaler:
			if ref := o.Spec.ScaleTargetRef; ref.Kind != "Deployment" || c.deployments[ref.Name] == nil {
				c.errorf("HorizontalPodAutoscaler %s: scales %s %q, not a Deployment of this file", o.Name, ref.Kind, ref.Name)
			}
		case *networkingv1.NetworkPolicy:
			c.networkPolicy(o)
		case *corev1.ConfigMap:
		default:
			c.errorf("%T: not a kind these manifests should hold", o)
		}
	}
	if len(images) != 1 {
		c.errorf("containers run %d images (%v): want the one zarrgate image everywhere", len(images), keys(images))
	}
	return c
}

type checker struct {
	env         Env
	configMaps  map[string]*corev1.ConfigMap
	services    map[string]*corev1.Service
	deployments map[string]*appsv1.Deployment
	policies    map[string]string // where → content of each --policy
	errs        []error
}

func (c *checker) errorf(format string, a ...any) {
	c.errs = append(c.errs, fmt.Errorf(format, a...))
}

func (c *checker) deployment(d *appsv1.Deployment, images map[string]bool) {
	where := "Deployment " + d.Name
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		c.errorf("%s: selector does not match its pod template's labels", where)
	}
	pod := d.Spec.Template.Spec
	if psc := pod.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		c.errorf("%s: pod securityContext.runAsNonRoot must be true", where)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		c.errorf("%s: automountServiceAccountToken must be false (zarrgate does not call the Kubernetes API)", where)
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
		c.volume(where, v)
	}
	ann := d.Spec.Template.Annotations
	for k, want := range map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": strconv.Itoa(AdminPort), "prometheus.io/path": "/metrics", "prometheus.io/scheme": "https"} {
		if ann[k] != want {
			c.errorf("%s: pod annotation %s = %q, want %q (Prometheus scrapes the admin endpoint)", where, k, ann[k], want)
		}
	}
	for _, ctr := range pod.Containers {
		images[ctr.Image] = true
		c.container(where+" container "+ctr.Name, ctr, volumes, pod.TerminationGracePeriodSeconds)
	}
}

func (c *checker) volume(where string, v corev1.Volume) {
	switch {
	case v.ConfigMap != nil:
		cm := c.configMaps[v.ConfigMap.Name]
		if cm == nil {
			c.errorf("%s: volume %s: ConfigMap %q is not in the file", where, v.Name, v.ConfigMap.Name)
			return
		}
		for _, it := range v.ConfigMap.Items {
			if _, ok := cm.Data[it.Key]; !ok {
				c.errorf("%s: volume %s: ConfigMap %s has no key %q", where, v.Name, cm.Name, it.Key)
			}
		}
	case v.Secret != nil:
		keys, ok := c.env.Secrets[v.Secret.SecretName]
		if !ok {
			c.errorf("%s: volume %s: Secret %q is not one deploy/README.md creates (%v)", where, v.Name, v.Secret.SecretName, keys2(c.env.Secrets))
			return
		}
		for _, it := range v.Secret.Items {
			if !keys[it.Key] {
				c.errorf("%s: volume %s: Secret %s as deploy/README.md creates it has no key %q", where, v.Name, v.Secret.SecretName, it.Key)
			}
		}
	case v.EmptyDir != nil:
	default:
		c.errorf("%s: volume %s: only ConfigMap, Secret and emptyDir volumes are expected", where, v.Name)
	}
}

// container checks one zarrgate container: its flags (from args and its
// --config file) against the binary, the files they name against its
// mounts, TLS, ports and probes, memory and its security context.
func (c *checker) container(where string, ctr corev1.Container, volumes map[string]corev1.Volume, grace *int64) {
	if strings.HasSuffix(ctr.Image, ":latest") || !strings.Contains(ctr.Image, ":") {
		c.errorf("%s: image %q: name a version, not latest", where, ctr.Image)
	}
	if len(ctr.Command) > 0 || len(ctr.Args) == 0 {
		c.errorf("%s: want args [COMMAND, flags...] for the image's zarrgate entrypoint, and no command", where)
		return
	}
	cmd := ctr.Args[0]
	known, err := c.env.Flags(cmd)
	if err != nil {
		c.errorf("%s: zarrgate %s: %v", where, cmd, err)
		return
	}
	flags, err := parseArgs(ctr.Args[1:], known, c.env.Pending)
	if err != nil {
		c.errorf("%s: args: %v", where, err)
		return
	}
	if cfg := flags["config"]; cfg != "" {
		text, err := c.mountedConfigMapFile(ctr, volumes, cfg)
		if err != nil {
			c.errorf("%s: --config %s: %v", where, cfg, err)
			return
		}
		var file map[string]any
		if err := yaml.UnmarshalStrict([]byte(text), &file); err != nil {
			c.errorf("%s: --config %s: %v", where, cfg, err)
			return
		}
		for k, v := range file {
			if _, ok := flags[k]; ok {
				continue // the command line wins
			}
			flags[k] = fmt.Sprint(v)
		}
	}
	for name := range flags {
		if _, ok := known[name]; ok {
			continue
		}
		if why, ok := c.env.Pending[name]; ok {
			if c.env.Note != nil {
				c.env.Note(fmt.Sprintf("%s: --%s is not a flag of this zarrgate %s yet (%s): tolerated", where, name, cmd, why))
			}
			continue
		}
		c.errorf("%s: --%s is not a flag of zarrgate %s", where, name, cmd)
	}
	if v := flags["insecure"]; v != "" && v != "false" {
		c.errorf("%s: --insecure: every listener serves TLS", where)
	}
	for _, f := range pathFlags {
		if p := flags[f]; p != "" && f != "config" {
			if err := c.mounted(ctr, volumes, p); err != nil {
				c.errorf("%s: --%s %s: %v", where, f, p, err)
			}
		}
	}
	if p := flags["policy"]; p != "" {
		if text, err := c.mountedConfigMapFile(ctr, volumes, p); err == nil {
			c.policies[where+" --policy "+p] = text
		}
	}
	if flags["tls-cert"] == "" || flags["tls-key"] == "" {
		c.errorf("%s: no --tls-cert/--tls-key: every listener serves TLS", where)
	}
	if cmd == "gateway" {
		if flags["peer-ca"] == "" || flags["peer-cert"] == "" || flags["peer-key"] == "" {
			c.errorf("%s: the gateway dials its workers with mTLS: --peer-ca, --peer-cert and --peer-key", where)
		}
		for _, f := range []string{"store", "codec"} {
			if t := flags[f]; t != "" {
				c.dnsTarget(where, f, t)
			}
		}
	} else if flags["client-ca"] == "" && (cmd == "store-worker" || cmd == "codec-worker") {
		c.errorf("%s: a worker takes only the gateway's certificate: --client-ca", where)
	}
	for _, dir := range []string{flags["spill-dir"], "/tmp"} {
		if dir != "" && !c.onEmptyDir(ctr, volumes, dir) {
			c.errorf("%s: %s must be an emptyDir mount (the root file system is read-only)", where, dir)
		}
	}
	c.ports(where, ctr, flags)
	c.memory(where, ctr, flags, known)
	c.stopping(where, flags, known, grace)
	sc := ctr.SecurityContext
	switch {
	case sc == nil:
		c.errorf("%s: no securityContext", where)
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		c.errorf("%s: securityContext.readOnlyRootFilesystem must be true", where)
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		c.errorf("%s: securityContext.allowPrivilegeEscalation must be false", where)
	case sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0:
		c.errorf("%s: securityContext.capabilities must drop ALL and add none", where)
	}
}

// parseArgs returns the flags of a command line as name → value ("true"
// for a bare boolean flag).
func parseArgs(args []string, known map[string]Flag, pending map[string]string) (map[string]string, error) {
	out := map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			return nil, fmt.Errorf("unexpected operand %q", a)
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f, ok := known[name]
		_, isPending := pending[name]
		// An unknown flag followed by an operand takes it as its value
		// (the flag is reported as unknown later).
		unknownWithValue := !ok && (isPending || i+1 < len(args) && !strings.HasPrefix(args[i+1], "-"))
		if !hasVal && (unknownWithValue || f.TakesValue) {
			if i+1 == len(args) {
				return nil, fmt.Errorf("--%s needs a value", name)
			}
			i++
			val = args[i]
		} else if !hasVal {
			val = "true"
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("--%s given twice", name)
		}
		out[name] = val
	}
	return out, nil
}

// mountOf returns the volume and the path inside it of a file the
// container sees at p.
func mountOf(ctr corev1.Container, volumes map[string]corev1.Volume, p string) (corev1.Volume, corev1.VolumeMount, string, bool) {
	for _, m := range ctr.VolumeMounts {
		rel, ok := strings.CutPrefix(path.Clean(p), path.Clean(m.MountPath)+"/")
		if ok {
			v, ok := volumes[m.Name]
			return v, m, rel, ok
		}
	}
	return corev1.Volume{}, corev1.VolumeMount{}, "", false
}

// mounted checks that the file at p comes from a ConfigMap or Secret item.
func (c *checker) mounted(ctr corev1.Container, volumes map[string]corev1.Volume, p string) error {
	v, m, rel, ok := mountOf(ctr, volumes, p)
	if !ok {
		return errors.New("no volume is mounted there")
	}
	if m.SubPath != "" {
		return errors.New("mounted with subPath, which Kubernetes never updates: the file could not be rotated")
	}
	var items []corev1.KeyToPath
	switch {
	case v.ConfigMap != nil:
		items = v.ConfigMap.Items
	case v.Secret != nil:
		items = v.Secret.Items
	default:
		return fmt.Errorf("volume %s is not a ConfigMap or Secret", v.Name)
	}
	for _, it := range items {
		if it.Path == rel {
			return nil
		}
	}
	return fmt.Errorf("volume %s has no item at %s", v.Name, rel)
}

// mountedConfigMapFile is the content of the ConfigMap item the container
// sees at p.
func (c *checker) mountedConfigMapFile(ctr corev1.Container, volumes map[string]corev1.Volume, p string) (string, error) {
	if err := c.mounted(ctr, volumes, p); err != nil {
		return "", err
	}
	v, _, rel, _ := mountOf(ctr, volumes, p)
	if v.ConfigMap == nil {
		return "", fmt.Errorf("volume %s is not a ConfigMap", v.Name)
	}
	cm := c.configMaps[v.ConfigMap.Name]
	if cm == nil {
		return "", fmt.Errorf("ConfigMap %q is not in the file", v.ConfigMap.Name)
	}
	for _, it := range v.ConfigMap.Items {
		if it.Path == rel {
			return cm.Data[it.Key], nil
		}
	}
	return "", errors.New("unreachable")
}

func (c *checker) onEmptyDir(ctr corev1.Container, volumes map[string]corev1.Volume, dir string) bool {
	for _, m := range ctr.VolumeMounts {
		if path.Clean(m.MountPath) == path.Clean(dir) {
			v, ok := volumes[m.Name]
			return ok && v.EmptyDir != nil && !m.ReadOnly
		}
	}
	return false
}

// ports checks that --listen and --admin-listen are container ports, the
// admin one where the probes and Prometheus look.
func (c *checker) ports(where string, ctr corev1.Container, flags map[string]string) {
	byName := map[string]int32{}
	for _, p := range ctr.Ports {
		byName[p.Name] = p.ContainerPort
	}
	portOf := func(flag string) int32 {
		_, port, err := net.SplitHostPort(flags[flag])
		n, perr := strconv.Atoi(port)
		if err != nil || perr != nil {
			c.errorf("%s: --%s %q: want host:port", where, flag, flags[flag])
			return -1
		}
		return int32(n)
	}
	if p := portOf("listen"); p >= 0 && byName["grpc"] != p {
		c.errorf("%s: --listen port %d is not the container port named grpc (%d)", where, p, byName["grpc"])
	}
	admin := portOf("admin-listen")
	if admin >= 0 && (byName["admin"] != admin || admin != AdminPort) {
		c.errorf("%s: --admin-listen port %d: want the container port named admin, %d", where, admin, AdminPort)
	}
	if host, _, _ := net.SplitHostPort(flags["admin-listen"]); host != "0.0.0.0" && host != "" {
		c.errorf("%s: --admin-listen %s: the kubelet and Prometheus reach it on the pod's address: listen on 0.0.0.0", where, flags["admin-listen"])
	}
	for _, pr := range []struct {
		name, path string
		p          *corev1.Probe
	}{{"readinessProbe", "/readyz", ctr.ReadinessProbe}, {"livenessProbe", "/healthz", ctr.LivenessProbe}} {
		if pr.p == nil || pr.p.HTTPGet == nil {
			c.errorf("%s: %s: want httpGet %s on the admin port", where, pr.name, pr.path)
			continue
		}
		h := pr.p.HTTPGet
		port := h.Port.IntVal
		if h.Port.Type == intstr.String {
			port = byName[h.Port.StrVal]
		}
		if port != admin || h.Path != pr.path || h.Scheme != corev1.URISchemeHTTPS {
			c.errorf("%s: %s: httpGet %s %s port %s (%d), want HTTPS %s on the admin port %d", where, pr.name, h.Scheme, h.Path, h.Port.String(), port, pr.path, admin)
		}
	}
}

// memory checks that --memory-limit (where the command takes it) is set
// and about 60% of the container's memory limit, and that the memory
// request equals the limit.
func (c *checker) memory(where string, ctr corev1.Container, flags map[string]string, known map[string]Flag) {
	lim, ok := ctr.Resources.Limits[corev1.ResourceMemory]
	if !ok {
		c.errorf("%s: no memory limit", where)
		return
	}
	if req := ctr.Resources.Requests[corev1.ResourceMemory]; req.Cmp(lim) != 0 {
		c.errorf("%s: memory request %s is not the limit %s: a pod may be evicted below its budget", where, req.String(), lim.String())
	}
	if _, ok := known["memory-limit"]; !ok {
		return
	}
	v := flags["memory-limit"]
	if v == "" {
		c.errorf("%s: no --memory-limit: set it to about 60%% of the memory limit %s", where, lim.String())
		return
	}
	n, err := parseSize(v)
	if err != nil {
		c.errorf("%s: --memory-limit %q: %v", where, v, err)
		return
	}
	if f := float64(n) / float64(lim.Value()); f < MemoryFractionLo || f > MemoryFractionHi {
		c.errorf("%s: --memory-limit %s is %.0f%% of the container's memory limit %s: want %.0f–%.0f%%", where, v, 100*f, lim.String(), 100*MemoryFractionLo, 100*MemoryFractionHi)
	}
}

// parseSize reads a zarrgate size as membudget.ParseSize does (binary
// units, case-insensitive, optional i and B: 2GiB, 1228M, 512k, 1048576).
func parseSize(s string) (int64, error) {
	m := regexp.MustCompile(`^(?i)([0-9]+)\s*([KMGT]?)i?B?$`).FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, errors.New("not a size (want a byte count with an optional K, M, G or T)")
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return 0, err
	}
	shift := map[string]uint{"": 0, "K": 10, "M": 20, "G": 30, "T": 40}[strings.ToUpper(m[2])]
	return n << shift, nil
}

// dnsTarget checks that a gateway's dns:///NAME:PORT worker target names a
// headless Service of the file, on one of its ports.
func (c *checker) dnsTarget(where, flag, target string) {
	hostport, ok := strings.CutPrefix(target, "dns:///")
	host, port, err := net.SplitHostPort(hostport)
	if !ok || err != nil {
		c.errorf("%s: --%s %q: want dns:///SERVICE:PORT", where, flag, target)
		return
	}
	s := c.services[host]
	if s == nil {
		c.errorf("%s: --%s %s: no Service %q in the file", where, flag, target, host)
		return
	}
	if s.Spec.ClusterIP != corev1.ClusterIPNone {
		c.errorf("%s: --%s %s: Service %s is not headless: the gateway would see one address, not every worker", where, flag, target, host)
	}
	for _, p := range s.Spec.Ports {
		if strconv.Itoa(int(p.Port)) == port {
			return
		}
	}
	c.errorf("%s: --%s %s: Service %s has no port %s", where, flag, target, host, port)
}

// service checks that a Service selects pods of a Deployment and that
// its target ports are theirs.
func (c *checker) service(s *corev1.Service) {
	where := "Service " + s.Name
	var pods []corev1.PodTemplateSpec
	for _, d := range c.deployments {
		if len(s.Spec.Selector) > 0 && labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
			pods = append(pods, d.Spec.Template)
		}
	}
	if len(pods) == 0 {
		c.errorf("%s: selector %v matches no Deployment's pods", where, s.Spec.Selector)
		return
	}
	for _, p := range s.Spec.Ports {
		for _, pod := range pods {
			if !hasPort(pod, p.TargetPort, p.Port) {
				c.errorf("%s: port %s: target %s is not a port of the pods it selects", where, p.Name, p.TargetPort.String())
			}
		}
	}
}

// hasPort reports whether a pod has a container port named or numbered
// target (an unset target is the Service's port).
func hasPort(pod corev1.PodTemplateSpec, target intstr.IntOrString, port int32) bool {
	for _, ctr := range pod.Spec.Containers {
		for _, cp := range ctr.Ports {
			switch {
			case target.Type == intstr.String && target.StrVal != "" && cp.Name == target.StrVal,
				target.Type == intstr.Int && target.IntVal != 0 && cp.ContainerPort == target.IntVal,
				target.Type == intstr.Int && target.IntVal == 0 && cp.ContainerPort == port:
				return true
			}
		}
	}
	return false
}

func (c *checker) networkPolicy(np *networkingv1.NetworkPolicy) {
	where := "NetworkPolicy " + np.Name
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil {
		c.errorf("%s: %v", where, err)
		return
	}
	var pods []corev1.PodTemplateSpec
	for _, d := range c.deployments {
		if sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			pods = append(pods, d.Spec.Template)
		}
	}
	if len(pods) == 0 {
		c.errorf("%s: podSelector matches no Deployment's pods", where)
	}
	for _, in := range np.Spec.Ingress {
		for _, p := range in.Ports {
			for _, pod := range pods {
				if p.Port != nil && !hasPort(pod, *p.Port, 0) {
					c.errorf("%s: port %s is not a port of every pod it selects", where, p.Port.String())
				}
			}
		}
		for _, from := range in.From {
			if from.PodSelector == nil {
				continue
			}
			s, err := metav1.LabelSelectorAsSelector(from.PodSelector)
			found := false
			for _, d := range c.deployments {
				found = found || err == nil && s.Matches(labels.Set(d.Spec.Template.Labels))
			}
			if !found {
				c.errorf("%s: ingress from %v matches no Deployment's pods", where, from.PodSelector)
			}
		}
	}
}

// ReadmeSecrets reads the Secrets deploy/README.md tells the operator to
// create: `kubectl create secret generic NAME --from-file=KEY=FILE ...`
// (continued lines joined).
func ReadmeSecrets(readme string) map[string]map[string]bool {
	text := strings.ReplaceAll(readme, "\\\n", " ")
	out := map[string]map[string]bool{}
	for _, m := range regexp.MustCompile(`kubectl (?:-n \S+ )?create secret generic ([a-z0-9.-]+)([^\n]*)`).FindAllStringSubmatch(text, -1) {
		keys := map[string]bool{}
		for _, k := range regexp.MustCompile(`--from-file=([^=\s]+)=`).FindAllStringSubmatch(m[2], -1) {
			keys[k[1]] = true
		}
		out[m[1]] = keys
	}
	return out
}

// ParseHelp reads the flags of `zarrgate CMD --help`: lines "  --name
// [type]" (a flag without a type is a boolean).
func ParseHelp(help string) map[string]Flag {
	out := map[string]Flag{}
	// A flag's line, then its usage line(s), the last ending in
	// "(default X)" when it has one.
	re := regexp.MustCompile(`(?m)^  --?([a-z0-9-]+)( \S+)?\n((?:    .*\n?)*)`)
	def := regexp.MustCompile(`\(default "?([^")]*)"?\)\s*$`)
	for _, m := range re.FindAllStringSubmatch(help, -1) {
		f := Flag{TakesValue: m[2] != ""}
		if d := def.FindStringSubmatch(m[3]); d != nil {
			f.Default = d[1]
		}
		out[m[1]] = f
	}
	return out
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func keys2(m map[string]map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// stopping checks that the pod's terminationGracePeriodSeconds (set
// explicitly) outlasts the process's drain: --drain-delay, then
// --shutdown-grace for calls in flight, each as given or the binary's
// default. Kubernetes kills the container with SIGKILL when the period
// ends, cutting the calls the drain was meant to finish.
func (c *checker) stopping(where string, flags map[string]string, known map[string]Flag, grace *int64) {
	if grace == nil {
		c.errorf("%s: set terminationGracePeriodSeconds explicitly, above --drain-delay + --shutdown-grace", where)
		return
	}
	var need time.Duration
	for _, name := range []string{"drain-delay", "shutdown-grace"} {
		f, ok := known[name]
		if !ok {
			continue
		}
		v := flags[name]
		if v == "" {
			v = f.Default
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			c.errorf("%s: --%s %q: %v", where, name, v, err)
			return
		}
		need += d
	}
	if time.Duration(*grace)*time.Second <= need {
		c.errorf("%s: terminationGracePeriodSeconds %d is not above --drain-delay + --shutdown-grace = %s: the drain would be cut by SIGKILL", where, *grace, need)
	}
}
