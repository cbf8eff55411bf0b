// Package deploy tests what deploy/ ships: that every Kubernetes manifest
// decodes strictly into the types Kubernetes and KEDA decode it into, that
// each port, path, metric name and environment variable a manifest names
// is one the binaries serve or read (it starts them and scrapes the paths),
// and that the Dockerfile's image runs a worker (with podman, where the
// machine has it).
//
// It is a module of its own, so that the Kubernetes and KEDA types it
// decodes into are no dependency of redmap's.
package deploy

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	"github.com/redmap/redmap/examples/squares/tasks"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
)

func TestMain(m *testing.M) {
	code := redistest.Run(m)
	harness.Cleanup()
	os.Exit(code)
}

// build builds pkg (a main package of redmap's module, "./examples/squares")
// in redmap's module, as a user builds it, with env added, and returns the
// binary.
func build(t *testing.T, pkg string, env ...string) string {
	t.Helper()
	return buildFlags(t, pkg, nil, env...)
}

// buildFlags is build with more flags for go build ("-ldflags=...").
func buildFlags(t *testing.T, pkg string, flags []string, env ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", append(append([]string{"build", "-trimpath", "-o", bin}, flags...), pkg)...)
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// manifests are the objects of deploy/kubernetes, decoded.
type manifests struct {
	deployments map[string]*appsv1.Deployment
	services    map[string]*corev1.Service
	pdbs        map[string]*policyv1.PodDisruptionBudget
	scaled      map[string]*kedav1alpha1.ScaledObject
}

// decodeStrict decodes one YAML document into the type of its kind,
// refusing unknown fields (as the API server does with
// fieldValidation=Strict).
func decodeStrict(doc []byte, m *manifests) error {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal(doc, &head); err != nil {
		return err
	}
	var obj any
	switch head.APIVersion + " " + head.Kind {
	case "apps/v1 Deployment":
		d := &appsv1.Deployment{}
		m.deployments[head.Metadata.Name], obj = d, d
	case "v1 Service":
		s := &corev1.Service{}
		m.services[head.Metadata.Name], obj = s, s
	case "policy/v1 PodDisruptionBudget":
		p := &policyv1.PodDisruptionBudget{}
		m.pdbs[head.Metadata.Name], obj = p, p
	case "keda.sh/v1alpha1 ScaledObject":
		s := &kedav1alpha1.ScaledObject{}
		m.scaled[head.Metadata.Name], obj = s, s
	default:
		return fmt.Errorf("unexpected kind %s %s", head.APIVersion, head.Kind)
	}
	return yaml.UnmarshalStrict(doc, obj)
}

// documents splits a YAML stream at its "---" lines.
func documents(b []byte) [][]byte {
	var out [][]byte
	for _, d := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
		if strings.TrimSpace(regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAllString(d, "")) != "" {
			out = append(out, []byte(d))
		}
	}
	return out
}

func load(t *testing.T) *manifests {
	t.Helper()
	m := &manifests{deployments: map[string]*appsv1.Deployment{}, services: map[string]*corev1.Service{},
		pdbs: map[string]*policyv1.PodDisruptionBudget{}, scaled: map[string]*kedav1alpha1.ScaledObject{}}
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in kubernetes/ (%v)", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range documents(b) {
			if err := decodeStrict(doc, m); err != nil {
				t.Fatalf("%s, document %d: %v", f, i+1, err)
			}
		}
	}
	return m
}

// Every manifest decodes strictly into the Kubernetes and KEDA types; a
// field those types lack is refused (the decoding is strict: a misspelt
// field cannot pass).
func TestManifestsDecodeStrictly(t *testing.T) {
	m := load(t)
	if len(m.deployments) != 2 || m.deployments["redmap-worker"] == nil || m.deployments["redmap-metrics"] == nil ||
		m.services["redmap-metrics"] == nil || m.pdbs["redmap-worker"] == nil || m.scaled["redmap-worker"] == nil {
		t.Fatalf("manifests: %d deployments, services %v, budgets %v, scaled objects %v", len(m.deployments),
			keysOf(m.services), keysOf(m.pdbs), keysOf(m.scaled))
	}
	bad := []byte("apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: x}\nspec:\n  scaleTargetRef: {name: w}\n  minReplicas: 0\n")
	if err := decodeStrict(bad, load(t)); err == nil || !strings.Contains(err.Error(), "minReplicas") {
		t.Fatalf("a ScaledObject with the unknown field minReplicas decoded: %v", err)
	}
}

func keysOf[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// env returns the container's environment as name -> value, with the
// names of those set from a Secret.
func env(c corev1.Container) (vals map[string]string, secret []string) {
	vals = map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			secret = append(secret, e.Name)
			continue
		}
		vals[e.Name] = e.Value
	}
	return vals, secret
}

// port returns the container port named name.
func port(t *testing.T, c corev1.Container, name string) int32 {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("container %s has no port named %q", c.Name, name)
	return 0
}

// freeAddr returns a loopback address with a port free now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// get answers GET url's status and body.
func get(url string) (int, string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, err = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String(), err
}

// probes returns the paths of c's HTTP probes, each checked to name the port portName.
func probes(t *testing.T, c corev1.Container, portName string) []string {
	t.Helper()
	var paths []string
	for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe, c.StartupProbe} {
		if p == nil {
			continue
		}
		if p.HTTPGet == nil || p.HTTPGet.Port.String() != portName {
			t.Fatalf("container %s: a probe not on HTTP port %q: %+v", c.Name, portName, p.ProbeHandler)
		}
		paths = append(paths, p.HTTPGet.Path)
	}
	if len(paths) < 2 {
		t.Fatalf("container %s has %d HTTP probes, want readiness and liveness", c.Name, len(paths))
	}
	return paths
}

// The worker Deployment names what the worker binary reads and serves: each
// environment variable is one its -h lists, REDIS_URL comes from a Secret,
// REDMAP_METRICS is the port the probes name (TestManifestsSafeByDefault
// checks the rest); started with that environment (on the test's Redis and a
// free port), it answers the probes' paths; the budget selects its pods.
func TestWorkerManifestMatchesTheBinary(t *testing.T) {
	t.Parallel() // each builds and runs processes of its own
	m := load(t)
	d := m.deployments["redmap-worker"]
	spec := d.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("worker pods have %d containers, want 1", len(spec.Containers))
	}
	c := spec.Containers[0]
	vals, secret := env(c)
	if !slices.Equal(secret, []string{"REDIS_URL"}) {
		t.Fatalf("variables from a Secret: %v, want REDIS_URL", secret)
	}
	bin := build(t, "./examples/squares")
	help, err := exec.Command(bin, append(c.Args, "-h")...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v -h: %v\n%s", bin, c.Args, err, help)
	}
	for name := range vals {
		if !strings.Contains(string(help), "(env "+name+")") && !slices.Contains(goRuntimeEnv, name) {
			t.Errorf("the manifest sets %s, which the worker does not read (its -h:\n%s)", name, help)
		}
	}
	if !strings.Contains(string(help), "(env REDIS_URL)") {
		t.Error("the worker does not read REDIS_URL")
	}
	metricsPort := port(t, c, "metrics")
	if _, p, err := net.SplitHostPort(vals["REDMAP_METRICS"]); err != nil || p != strconv.Itoa(int(metricsPort)) {
		t.Fatalf("REDMAP_METRICS %q does not serve port metrics (%d)", vals["REDMAP_METRICS"], metricsPort)
	}
	pdb := m.pdbs["redmap-worker"]
	for k, v := range pdb.Spec.Selector.MatchLabels {
		if d.Spec.Template.Labels[k] != v {
			t.Fatalf("the budget selects %s=%s, which the worker pods lack", k, v)
		}
	}
	if so := m.scaled["redmap-worker"]; so.Spec.ScaleTargetRef == nil || so.Spec.ScaleTargetRef.Name != d.Name {
		t.Fatalf("the ScaledObject scales %+v, not %s", so.Spec.ScaleTargetRef, d.Name)
	}

	// Run it as the manifest says, on the test's Redis and a free port.
	srv := redistest.Shared(t)
	addr := freeAddr(t)
	cmd := exec.Command(bin, c.Args...)
	cmd.Env = append(os.Environ(), "REDIS_URL="+srv.URL())
	for k, v := range vals {
		if k == "REDMAP_METRICS" {
			v = addr
		}
		if k == "REDMAP_QUEUE" {
			v = redistest.Queue(t) // a queue of the test's own
		}
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	p := harness.Start(t, cmd)
	p.Expect(t, "worker ")
	for _, path := range probes(t, c, "metrics") {
		redistest.Eventually(t, "the worker answers "+path, func() bool {
			code, _, err := get("http://" + addr + path)
			return err == nil && code == http.StatusOK
		})
	}
	if code, body, err := get("http://" + addr + "/metrics"); err != nil || code != http.StatusOK || !strings.Contains(body, "redmap_worker_tasks_running") {
		t.Fatalf("the worker's /metrics: %d %v", code, err)
	}
}

// The metrics Deployment, its Service and the ScaledObject name what
// redmap metrics serves: its port, its probes' path, and every metric the
// ScaledObject's query reads, for the queue the workers serve.
func TestMetricsManifestMatchesTheBinary(t *testing.T) {
	t.Parallel() // each builds and runs processes of its own
	m := load(t)
	d := m.deployments["redmap-metrics"]
	c := d.Spec.Template.Spec.Containers[0]
	if _, secret := env(c); !slices.Equal(secret, []string{"REDIS_URL"}) {
		t.Fatalf("variables from a Secret: %v, want REDIS_URL", secret)
	}
	httpPort := port(t, c, "http-metrics")
	args := slices.Clone(c.Args)
	i := slices.Index(args, "-addr")
	if len(args) == 0 || args[0] != "metrics" || i < 0 || i+1 >= len(args) {
		t.Fatalf("args %v: want metrics -addr ...", args)
	}
	if _, p, err := net.SplitHostPort(args[i+1]); err != nil || p != strconv.Itoa(int(httpPort)) {
		t.Fatalf("-addr %s is not port http-metrics (%d)", args[i+1], httpPort)
	}
	q := slices.Index(args, "-queue")
	if q < 0 {
		t.Fatal("redmap metrics serves every queue: the manifest should name the workers' queue")
	}
	workerEnv, _ := env(m.deployments["redmap-worker"].Spec.Template.Spec.Containers[0])
	if args[q+1] != workerEnv["REDMAP_QUEUE"] {
		t.Fatalf("metrics of queue %q, workers of %q", args[q+1], workerEnv["REDMAP_QUEUE"])
	}
	svc := m.services["redmap-metrics"]
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.String() != "http-metrics" ||
		svc.Annotations["prometheus.io/port"] != strconv.Itoa(int(httpPort)) || svc.Annotations["prometheus.io/path"] != "/metrics" {
		t.Fatalf("the Service does not point at port http-metrics and /metrics: %+v %v", svc.Spec.Ports, svc.Annotations)
	}
	for k, v := range svc.Spec.Selector {
		if d.Spec.Template.Labels[k] != v {
			t.Fatalf("the Service selects %s=%s, which the metrics pod lacks", k, v)
		}
	}
	so := m.scaled["redmap-worker"]
	if len(so.Spec.Triggers) != 1 || so.Spec.Triggers[0].Type != "prometheus" {
		t.Fatalf("triggers %+v, want one prometheus trigger", so.Spec.Triggers)
	}
	if so.Spec.MinReplicaCount == nil || *so.Spec.MinReplicaCount != 0 || so.Spec.Triggers[0].Metadata["activationThreshold"] == "" {
		t.Fatal("the ScaledObject does not scale from zero (minReplicaCount 0 and an activationThreshold)")
	}
	query := so.Spec.Triggers[0].Metadata["query"]
	names := regexp.MustCompile(`redmap_[a-z_]+`).FindAllString(query, -1)
	if len(names) == 0 || !strings.Contains(query, `queue="`+args[q+1]+`"`) {
		t.Fatalf("query %q reads no redmap metric of queue %q", query, args[q+1])
	}

	// Run it as the manifest says, on the test's Redis and a free port.
	srv := redistest.Shared(t)
	addr := freeAddr(t)
	args[i+1] = addr
	cmd := exec.Command(build(t, "./cmd/redmap"), args...)
	cmd.Env = append(os.Environ(), "REDIS_URL="+srv.URL())
	p := harness.Start(t, cmd)
	p.Expect(t, "metrics ")
	for _, path := range probes(t, c, "http-metrics") {
		if code, body, err := get("http://" + addr + path); err != nil || code != http.StatusOK {
			t.Fatalf("redmap metrics %s: %d %v %s", path, code, err, body)
		}
	}
	code, body, err := get("http://" + addr + "/metrics")
	if err != nil || code != http.StatusOK {
		t.Fatalf("redmap metrics /metrics: %d %v %s", code, err, body)
	}
	for _, name := range names {
		if !strings.Contains(body, name+`{queue="`+args[q+1]+`"}`) {
			t.Errorf("the query reads %s of queue %q, which redmap metrics does not serve:\n%s", name, args[q+1], body)
		}
	}
}

// The Dockerfile's image runs a worker: its runtime stage (FROM scratch,
// non-root, no shell, OCI labels from its build arguments), fed a static
// binary the test builds with the Dockerfile's -ldflags, run by podman with
// the host's network and the docs' --stop-timeout against the test's
// Redis; it logs its stamped version, serves a batch exactly, answers
// /readyz, and exits 0 on podman stop (SIGTERM). Without
// podman, or where podman cannot run a container here, it skips, saying why.
func TestImageRunsAWorker(t *testing.T) {
	t.Parallel() // each builds and runs processes of its own
	podman, dir := podmanHere(t)

	// The runtime stage of the Dockerfile, fed what its build stage would
	// make: a static binary and the CA bundle.
	df, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	stage := string(df)[strings.Index(string(df), "FROM scratch AS runtime"):]
	for from, to := range map[string]string{
		"COPY --from=build /etc/ssl/certs/ca-certificates.crt ": "COPY ca-certificates.crt ",
		"COPY --from=build /out/app ":                           "COPY app ",
	} {
		if !strings.Contains(stage, from) {
			t.Fatalf("the Dockerfile's runtime stage has no %q", from)
		}
		stage = strings.ReplaceAll(stage, from, to)
	}
	if !strings.Contains(stage, "USER 65532") {
		t.Fatal("the runtime stage does not run as a non-root user")
	}
	if err := os.WriteFile(filepath.Join(dir, "Containerfile"), []byte(stage), 0o644); err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if err != nil {
		ca = nil // an empty bundle: the test's Redis is not TLS
	}
	if err := os.WriteFile(filepath.Join(dir, "ca-certificates.crt"), ca, 0o644); err != nil {
		t.Fatal(err)
	}
	// The binary as the build stage makes it: static, with the stamp.
	ld := regexp.MustCompile(`-ldflags="([^"]*)"`).FindStringSubmatch(string(df))
	if ld == nil {
		t.Fatal("the Dockerfile's go build has no -ldflags")
	}
	const version, revision = "v0.0.0-image-test", "0123456789abcdef0123456789abcdef01234567"
	app := buildFlags(t, "./examples/squares", []string{"-ldflags=" + strings.ReplaceAll(ld[1], "${VERSION}", version)}, "CGO_ENABLED=0")
	if err := os.Rename(app, filepath.Join(dir, "app")); err != nil {
		t.Fatal(err)
	}
	image := "localhost/redmap-deploy-test:" + strconv.Itoa(os.Getpid())
	if out, err := podman("build", "-q", "-t", image, "--build-arg", "VERSION="+version, "--build-arg", "REVISION="+revision,
		"-f", filepath.Join(dir, "Containerfile"), dir); err != nil {
		t.Fatalf("podman build: %v\n%s", err, out)
	}
	t.Cleanup(func() { podman("rmi", "-f", image) })
	if user, err := podman("image", "inspect", "--format", "{{.Config.User}}", image); err != nil || user != "65532:65532" {
		t.Fatalf("the image runs as %q (%v), want 65532:65532", user, err)
	}
	for label, want := range map[string]string{"org.opencontainers.image.version": version,
		"org.opencontainers.image.revision": revision, "org.opencontainers.image.source": "https://github.com/redmap/redmap"} {
		if got, err := podman("image", "inspect", "--format", `{{index .Labels "`+label+`"}}`, image); err != nil || got != want {
			t.Errorf("the image's label %s is %q (%v), want %q", label, got, err, want)
		}
	}

	srv := redistest.Shared(t)
	queue := redistest.Queue(t)
	addr := freeAddr(t)
	name := "redmap-deploy-test-" + strconv.Itoa(os.Getpid())
	// The --stop-timeout the docs give, so that a plain podman stop uses it.
	out, err := podman("run", "-d", "--name", name, "--network", "host", "--read-only", "--stop-timeout", docStopTimeout(t),
		"-e", "REDIS_URL="+srv.URL(), "-e", "REDMAP_QUEUE="+queue, "-e", "REDMAP_METRICS="+addr, "-e", "REDMAP_GRACE=5s",
		image, "worker")
	if err != nil {
		t.Fatalf("podman run: %v\n%s", err, out)
	}
	t.Cleanup(func() { podman("rm", "-f", name) })
	redistest.Eventually(t, "the container's worker is ready", func() bool {
		code, _, err := get("http://" + addr + "/readyz")
		return err == nil && code == http.StatusOK
	})
	m, err := manager.New(srv.Client(t), manager.Options{Queue: queue})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	xs := make([]int, 1000)
	for i := range xs {
		xs[i] = i
	}
	outs, err := manager.Map(context.Background(), m, tasks.Square, xs)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range outs {
		if v != i*i {
			t.Fatalf("element %d = %d", i, v)
		}
	}
	if out, err := podman("stop", name); err != nil {
		t.Fatalf("podman stop: %v\n%s", err, out)
	}
	logs, _ := podman("logs", name)
	if code, err := podman("inspect", "--format", "{{.State.ExitCode}}", name); err != nil || code != "0" {
		t.Fatalf("the worker exited %s (%v) on SIGTERM, want 0; its log:\n%s", code, err, logs)
	}
	if !strings.Contains(logs, "version="+version) {
		t.Errorf("the worker's log does not name its version %s:\n%s", version, logs)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// podmanHere returns a function that runs podman with a configuration this
// machine accepts, and the test's scratch directory; without podman, or
// where podman cannot run, it skips the test, saying why.
func podmanHere(t *testing.T) (func(args ...string) (string, error), string) {
	t.Helper()
	if _, err := exec.LookPath("podman"); err != nil {
		t.Skip("podman is not installed (Debian: apt-get install podman runc): the image is not built here")
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "containers.conf")
	// runc, not crun (which fails on hybrid cgroups), and no ulimits or pids
	// limit a sandbox may refuse.
	if err := os.WriteFile(conf, []byte("[containers]\ndefault_ulimits = []\npids_limit = 0\n[engine]\nruntime = \"runc\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	podman := func(args ...string) (string, error) {
		cmd := exec.Command("podman", args...)
		cmd.Env = append(os.Environ(), "CONTAINERS_CONF="+conf)
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	if out, err := podman("info"); err != nil {
		t.Skipf("podman cannot run here: podman info: %v: %s", err, lastLine(out))
	}
	return podman, dir
}

// The whole Dockerfile builds with a stock podman (fully qualified base
// images): its build stage compiles the program, and the image carries
// its stamp. Where the build stage's registry cannot be reached (no network
// to it), it skips, saying so: TestImageRunsAWorker still builds and runs
// the runtime stage.
func TestImageBuildsWholeDockerfile(t *testing.T) {
	t.Parallel()
	podman, _ := podmanHere(t)
	df, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	from := regexp.MustCompile(`(?m)^FROM (\S+)`).FindStringSubmatch(string(df))
	if from == nil {
		t.Fatal("the Dockerfile has no FROM")
	}
	base := strings.ReplaceAll(from[1], "${GO_VERSION}", "1.26")
	registry, _, _ := strings.Cut(base, "/")
	if registry == "docker.io" {
		registry = "registry-1.docker.io"
	}
	conn, err := net.DialTimeout("tcp", registry+":443", 5*time.Second)
	if err != nil {
		t.Skipf("the build stage's registry %s is not reachable from here (%v): the build stage is not built, only the runtime stage (TestImageRunsAWorker)", registry, err)
	}
	conn.Close()
	const version = "v0.0.0-build-stage-test"
	image := "localhost/redmap-build-test:" + strconv.Itoa(os.Getpid())
	if out, err := podman("build", "-q", "-t", image, "-f", "deploy/Dockerfile", "--build-arg", "VERSION="+version, ".."); err != nil {
		t.Fatalf("podman build of the whole Dockerfile (base %s): %v\n%s", base, err, out)
	}
	t.Cleanup(func() { podman("rmi", "-f", image) })
	if got, err := podman("image", "inspect", "--format", `{{index .Labels "org.opencontainers.image.version"}}`, image); err != nil || got != version {
		t.Errorf("the image built from the whole Dockerfile is labelled %q (%v), want %q", got, err, version)
	}
}
