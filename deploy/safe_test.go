package deploy

import (
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	corev1 "k8s.io/api/core/v1"

	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/worker"
)

// goRuntimeEnv are variables the Go runtime reads, not the worker's flags.
var goRuntimeEnv = []string{"GOMEMLIMIT", "GOGC", "GOMAXPROCS", "GODEBUG"}

// The manifests are safe by default, each setting checked on the decoded
// Kubernetes and KEDA objects, so that an edit that drops one fails here.
func TestManifestsSafeByDefault(t *testing.T) {
	m := load(t)
	wd, md := m.deployments["redmap-worker"], m.deployments["redmap-metrics"]
	wc, mc := wd.Spec.Template.Spec.Containers[0], md.Spec.Template.Spec.Containers[0]
	workerEnv, _ := env(wc)

	t.Run("an outage is never read as zero", func(t *testing.T) {
		so := m.scaled["redmap-worker"]
		if len(so.Spec.Triggers) != 1 {
			t.Fatalf("%d triggers, want 1", len(so.Spec.Triggers))
		}
		tr := so.Spec.Triggers[0]
		// KEDA's prometheus scaler reads an empty answer as 0 unless told not to.
		if tr.Metadata["ignoreNullValues"] != "false" {
			t.Errorf(`the trigger's ignoreNullValues is %q, want "false": an empty answer (an outage) would read as 0`, tr.Metadata["ignoreNullValues"])
		}
		if q := tr.Metadata["query"]; strings.Contains(q, "vector(") || strings.Contains(q, " or ") {
			t.Errorf("query %q turns an empty answer into a value", q)
		}
		fb := so.Spec.Fallback
		if fb == nil {
			t.Fatal("no fallback: an erroring trigger leaves the replicas to chance")
		}
		if fb.FailureThreshold < 1 || fb.Replicas < 1 || so.Spec.MaxReplicaCount == nil || fb.Replicas > *so.Spec.MaxReplicaCount {
			t.Errorf("fallback %+v: want failureThreshold >= 1 and 1 <= replicas <= maxReplicaCount", *fb)
		}
		// Neither empties nor shrinks the fleet while the metric is gone.
		if fb.Behavior != kedav1alpha1.FallbackBehaviorCurrentReplicasIfHigher {
			t.Errorf("fallback behavior %q, want %q", fb.Behavior, kedav1alpha1.FallbackBehaviorCurrentReplicasIfHigher)
		}
		if tr.MetricType != "" && tr.MetricType != "AverageValue" {
			t.Errorf("metricType %q: KEDA's fallback needs AverageValue", tr.MetricType)
		}
		if err := kedav1alpha1.CheckFallbackValid(so); err != nil {
			t.Errorf("KEDA refuses the fallback: %v", err)
		}
	})

	t.Run("liveness never depends on Redis", func(t *testing.T) {
		for _, c := range []corev1.Container{wc, mc} {
			if c.LivenessProbe == nil || c.ReadinessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet == nil {
				t.Fatalf("container %s: want HTTP liveness and readiness probes", c.Name)
			}
			// /healthz of both binaries answers without Redis, /readyz
			// needs it: TestProbesOnRedisOutage runs them.
			if l, r := c.LivenessProbe.HTTPGet.Path, c.ReadinessProbe.HTTPGet.Path; l != "/healthz" || r != "/readyz" {
				t.Errorf("container %s: liveness %s, readiness %s, want /healthz and /readyz", c.Name, l, r)
			}
		}
	})

	t.Run("the worker's concurrency is named", func(t *testing.T) {
		n, err := strconv.Atoi(workerEnv["REDMAP_CONCURRENCY"])
		if err != nil || n < 1 {
			t.Fatalf("REDMAP_CONCURRENCY %q: want a positive number (its default is the node's CPUs, without a CPU limit)", workerEnv["REDMAP_CONCURRENCY"])
		}
		// The backlog per replica KEDA aims at: a few rounds of slots.
		th, err := strconv.Atoi(m.scaled["redmap-worker"].Spec.Triggers[0].Metadata["threshold"])
		if err != nil || th < n || th > 4*n {
			t.Errorf("KEDA's threshold %d tasks a replica is not within 1 to 4 times REDMAP_CONCURRENCY %d", th, n)
		}
	})

	t.Run("GOMEMLIMIT under the memory limit", func(t *testing.T) {
		limit, ok := wc.Resources.Limits[corev1.ResourceMemory]
		if !ok {
			t.Fatal("the worker has no memory limit")
		}
		soft, err := goMemLimit(workerEnv["GOMEMLIMIT"])
		if err != nil {
			t.Fatalf("GOMEMLIMIT: %v", err)
		}
		if hard := limit.Value(); soft >= hard || soft < hard*3/4 {
			t.Errorf("GOMEMLIMIT %s (%d bytes) is not 75%% to 100%% of the memory limit %s (%d)", workerEnv["GOMEMLIMIT"], soft, limit.String(), hard)
		}
	})

	t.Run("the worker's metrics are scraped", func(t *testing.T) {
		a := wd.Spec.Template.Annotations
		if a["prometheus.io/scrape"] != "true" || a["prometheus.io/port"] != strconv.Itoa(int(port(t, wc, "metrics"))) || a["prometheus.io/path"] != "/metrics" {
			t.Errorf("the worker pods' scrape annotations %v do not name port metrics and /metrics", a)
		}
	})

	t.Run("no service account token", func(t *testing.T) {
		for _, d := range []string{"redmap-worker", "redmap-metrics"} {
			if a := m.deployments[d].Spec.Template.Spec.AutomountServiceAccountToken; a == nil || *a {
				t.Errorf("%s mounts a service account token (automountServiceAccountToken: false)", d)
			}
		}
	})

	t.Run("the grace period outlasts the worker's", func(t *testing.T) {
		grace := worker.DefaultGrace
		if v, ok := workerEnv["REDMAP_GRACE"]; ok {
			var err error
			if grace, err = time.ParseDuration(v); err != nil {
				t.Fatalf("REDMAP_GRACE %q: %v", v, err)
			}
		}
		tg := wd.Spec.Template.Spec.TerminationGracePeriodSeconds
		if tg == nil {
			t.Fatal("no terminationGracePeriodSeconds (Kubernetes's default, 30 s, is no decision)")
		}
		if time.Duration(*tg)*time.Second < grace+5*time.Second {
			t.Errorf("terminationGracePeriodSeconds %d is not 5 s above the worker's grace %v", *tg, grace)
		}
	})
}

// goMemLimit parses GOMEMLIMIT as the Go runtime does: bytes, with an
// optional unit B, KiB, MiB, GiB or TiB.
func goMemLimit(s string) (int64, error) {
	m := regexp.MustCompile(`^([0-9]+)(B|KiB|MiB|GiB|TiB)?$`).FindStringSubmatch(s)
	if m == nil {
		return 0, &strconv.NumError{Func: "GOMEMLIMIT", Num: s, Err: strconv.ErrSyntax}
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	shift := map[string]uint{"": 0, "B": 0, "KiB": 10, "MiB": 20, "GiB": 30, "TiB": 40}[m[2]]
	return n << shift, err
}

// With the manifests' arguments and environment, the worker and redmap
// metrics keep answering their liveness probe while their Redis is down,
// and fail their readiness probe: Kubernetes takes them out of service
// rather than restarting them for an outage a restart cannot mend.
func TestProbesOnRedisOutage(t *testing.T) {
	t.Parallel() // each builds and runs processes of its own
	m := load(t)
	for _, c := range []struct {
		name, pkg, port string
		ready           string // what the program prints once it serves
	}{
		{"redmap-worker", "./examples/squares", "metrics", "worker "},
		{"redmap-metrics", "./cmd/redmap", "http-metrics", "metrics "},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ct := m.deployments[c.name].Spec.Template.Spec.Containers[0]
			srv := redistest.Start(t) // its own: the test stops it
			addr := freeAddr(t)
			args := slices.Clone(ct.Args)
			if i := slices.Index(args, "-addr"); i >= 0 {
				args[i+1] = addr
			}
			vals, _ := env(ct)
			cmd := exec.Command(build(t, c.pkg), args...)
			cmd.Env = append(os.Environ(), "REDIS_URL="+srv.URL())
			for k, v := range vals {
				switch k {
				case "REDMAP_METRICS":
					v = addr
				case "REDMAP_QUEUE":
					v = redistest.Queue(t)
				}
				cmd.Env = append(cmd.Env, k+"="+v)
			}
			p := harness.Start(t, cmd)
			p.Expect(t, c.ready)
			live, ready := "http://"+addr+ct.LivenessProbe.HTTPGet.Path, "http://"+addr+ct.ReadinessProbe.HTTPGet.Path
			redistest.Eventually(t, "ready with Redis up", func() bool {
				code, _, err := get(ready)
				return err == nil && code == http.StatusOK
			})
			srv.Kill(t)
			// The worker is unready once Redis has taken no heartbeat for its lease.
			redistest.Eventually(t, "unready with Redis down", func() bool {
				code, _, err := get(ready)
				return err == nil && code == http.StatusServiceUnavailable
			})
			if code, body, err := get(live); err != nil || code != http.StatusOK {
				t.Fatalf("liveness %s with Redis down: %d %v %s", live, code, err, body)
			}
		})
	}
}

// docs/kubernetes.md and docs/operations.md give a --stop-timeout for
// docker and podman above the worker's grace, so that a stop lets it give
// its tasks back rather than being killed (their default is 10 s).
func TestDocsGiveStopTimeout(t *testing.T) {
	for _, doc := range []string{"../docs/kubernetes.md", "../docs/operations.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		ms := stopTimeout.FindAllStringSubmatch(string(b), -1)
		if len(ms) == 0 {
			t.Errorf("%s gives no --stop-timeout for docker or podman", doc)
		}
		for _, m := range ms {
			if s, _ := strconv.Atoi(m[1]); time.Duration(s)*time.Second <= worker.DefaultGrace {
				t.Errorf("%s: --stop-timeout %s is not above the worker's default grace %v", doc, m[1], worker.DefaultGrace)
			}
		}
	}
}

var stopTimeout = regexp.MustCompile(`--stop-timeout[\s=]+([0-9]+)`)

// docStopTimeout is the --stop-timeout docs/kubernetes.md gives.
func docStopTimeout(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../docs/kubernetes.md")
	if err != nil {
		t.Fatal(err)
	}
	m := stopTimeout.FindStringSubmatch(string(b))
	if m == nil {
		t.Fatal("docs/kubernetes.md gives no --stop-timeout")
	}
	return m[1]
}
