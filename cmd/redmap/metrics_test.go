package main

import (
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/redistest"
)

// redmap metrics's liveness (/healthz) answers with its Redis stopped, so
// that Kubernetes does not restart it for an outage a restart cannot mend;
// its readiness (/readyz) and its scrape fail then, and recover with Redis.
func TestMetricsProbesOnRedisOutage(t *testing.T) {
	srv := redistest.Start(t) // its own: the test stops it
	cmd := exec.Command(harness.Build(t, "github.com/redmap/redmap/cmd/redmap"), "metrics", "-addr", "127.0.0.1:0",
		"-queue", redistest.Queue(t))
	cmd.Env = append(os.Environ(), "REDIS_URL="+srv.URL())
	p := harness.Start(t, cmd)
	base := strings.TrimSuffix(p.Expect(t, "metrics "), "/metrics")
	status := func(path string) int {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if code := status(path); code != http.StatusOK {
			t.Fatalf("with Redis up, %s: %d", path, code)
		}
	}
	srv.Kill(t)
	if code := status("/healthz"); code != http.StatusOK {
		t.Errorf("with Redis down, /healthz: %d, want 200 (liveness must not depend on Redis)", code)
	}
	if code := status("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("with Redis down, /readyz: %d, want 503", code)
	}
	if code := status("/metrics"); code == http.StatusOK {
		t.Errorf("with Redis down, /metrics: %d, want an error, never zeros", code)
	}
	srv.Restart(t)
	redistest.Eventually(t, "/readyz answers once Redis is back", func() bool { return status("/readyz") == http.StatusOK })
}
