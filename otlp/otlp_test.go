package otlp_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/otlp"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// screenshotEnv names the variable that, set to a path, makes
// TestExamplesExportOverOTLP save its rendering of the trace there (make
// screenshot).
const screenshotEnv = "REDMAP_SCREENSHOT_TRACE"

// Without OTEL_EXPORTER_OTLP_ENDPOINT, Setup installs nothing: the global
// provider stays OpenTelemetry's no-op, and nothing is traced.
func TestSetupInstallsNothingWithoutEndpoint(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	shutdown, err := otlp.Setup(context.Background(), "test")
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(context.Background())
	if _, ok := otel.GetTracerProvider().(*sdktrace.TracerProvider); ok || otlp.Enabled() {
		t.Fatal("Setup installed a tracer provider with no endpoint set")
	}
	_, span := otel.Tracer("test").Start(context.Background(), "x")
	if span.SpanContext().IsValid() {
		t.Fatal("a span started with no provider installed has a valid context: something traces")
	}
}

// span is one span a fake OTLP collector received, with its service.
type span struct {
	service string
	*tracepb.Span
}

func (s span) attr(key string) string {
	for _, a := range s.Attributes {
		if a.Key == key {
			return anyValue(a.Value)
		}
	}
	return ""
}

func anyValue(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	}
	return ""
}

// collector is a fake OTLP/HTTP trace endpoint: it keeps what it receives.
type collector struct {
	mu    sync.Mutex
	spans []span
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = gz
	}
	raw, err := io.ReadAll(body)
	var req coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(raw, &req)
	}
	if r.URL.Path != "/v1/traces" || err != nil {
		http.Error(w, fmt.Sprintf("%s: %v", r.URL.Path, err), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	for _, rs := range req.ResourceSpans {
		service := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.Key == "service.name" {
				service = anyValue(a.Value)
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				c.spans = append(c.spans, span{service, s})
			}
		}
	}
	c.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

func (c *collector) received() []span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]span(nil), c.spans...)
}

// The squares example, as an operator runs it, with the standard variable
// set: its manager and its worker (worker.Main) export their spans over
// OTLP, and they make one trace: the batch's span, and a task span per task
// under it.
func TestExamplesExportOverOTLP(t *testing.T) {
	redistest.Slow(t) // before the build of the example its processes run
	e := harness.Setup(t)
	col := &collector{}
	srv := httptest.NewServer(col)
	t.Cleanup(srv.Close)
	bin := harness.Build(t, "github.com/redmap/redmap/examples/squares")
	env := append(os.Environ(), "REDIS_URL="+e.URL, "REDMAP_QUEUE="+e.Queue,
		"OTEL_EXPORTER_OTLP_ENDPOINT="+srv.URL, "OTEL_BSP_SCHEDULE_DELAY=100")

	cmd := exec.Command(bin, "worker", "-concurrency", "2")
	cmd.Env = env
	w := harness.Start(t, cmd)
	w.Expect(t, "worker ")
	mcmd := exec.Command(bin, "manager", "-n", "16", "-queue", e.Queue)
	mcmd.Env = env
	out, err := mcmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "elements 16") {
		t.Fatalf("squares manager: %v\n%s", err, out)
	}
	w.Cmd.Process.Signal(syscall.SIGTERM) // worker.Main flushes its spans as it stops
	<-w.Exited()

	var send span
	var runs []span
	for _, s := range col.received() {
		switch {
		case s.service == "squares-manager" && s.Name == "send "+e.Queue:
			send = s
		case s.service == "redmap-worker" && s.Name == "process "+e.Queue:
			runs = append(runs, s)
		}
	}
	if send.Span == nil {
		t.Fatalf("no batch span from the manager among %d spans", len(col.received()))
	}
	tasks := send.attr("redmap.tasks")
	if fmt.Sprint(len(runs)) != tasks || send.attr("redmap.elements") != "16" || send.attr("redmap.outcome") != "done" {
		t.Fatalf("batch span: %s tasks, %s elements, outcome %q; %d task runs exported",
			tasks, send.attr("redmap.elements"), send.attr("redmap.outcome"), len(runs))
	}
	for _, r := range runs {
		if !bytes.Equal(r.TraceId, send.TraceId) || !bytes.Equal(r.ParentSpanId, send.SpanId) {
			t.Fatalf("task span %s: trace %x parent %x, want trace %x parent %x",
				r.attr("messaging.message.id"), r.TraceId, r.ParentSpanId, send.TraceId, send.SpanId)
		}
	}
	t.Logf("one trace %x: the manager's batch span and %d task spans under it, from two processes", send.TraceId, len(runs))

	if path := os.Getenv(screenshotEnv); path != "" {
		page := filepath.Join(t.TempDir(), "trace.html")
		if err := os.WriteFile(page, []byte(render(col.received(), send)), 0o644); err != nil {
			t.Fatal(err)
		}
		ctx := harness.Browser(t, 1200, 700)
		if err := chromedp.Do(ctx, chromedp.Navigate("file://"+page)); err != nil {
			t.Fatal(err)
		}
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Clean(path), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// render draws the trace of batch span root as a trace viewer does: one row
// per span, a bar over the batch's time line, parents above children.
func render(all []span, root span) string {
	var spans []span
	for _, s := range all {
		if bytes.Equal(s.TraceId, root.TraceId) {
			spans = append(spans, s)
		}
	}
	// The batch's span first, then each task's spans together (receive,
	// process), tasks in the order they were first taken.
	first := map[string]uint64{}
	for _, s := range spans {
		id := s.attr("messaging.message.id")
		if t, ok := first[id]; !ok || s.StartTimeUnixNano < t {
			first[id] = s.StartTimeUnixNano
		}
	}
	sort.SliceStable(spans, func(i, j int) bool {
		a, b := spans[i], spans[j]
		if bytes.Equal(a.SpanId, root.SpanId) != bytes.Equal(b.SpanId, root.SpanId) {
			return bytes.Equal(a.SpanId, root.SpanId)
		}
		ia, ib := a.attr("messaging.message.id"), b.attr("messaging.message.id")
		if fa, fb := first[ia], first[ib]; fa != fb {
			return fa < fb
		}
		if ia != ib {
			return ia < ib
		}
		return a.StartTimeUnixNano < b.StartTimeUnixNano
	})
	t0, t1 := root.StartTimeUnixNano, root.EndTimeUnixNano
	for _, s := range spans {
		t0, t1 = min(t0, s.StartTimeUnixNano), max(t1, s.EndTimeUnixNano)
	}
	width := float64(t1 - t0)
	var b strings.Builder
	fmt.Fprintf(&b, `<!doctype html><meta charset="utf-8"><style>
body{font:13px system-ui,sans-serif;margin:16px;color:#222}
h1{font-size:16px;margin:0 0 4px} .sub{color:#666;margin-bottom:12px}
.row{display:grid;grid-template-columns:600px 1fr;align-items:center;border-bottom:1px solid #eee;height:22px}
.name{white-space:nowrap;overflow:hidden;text-overflow:ellipsis} .lane{position:relative;height:14px}
.bar{position:absolute;height:14px;border-radius:2px;min-width:2px} .m{background:#4c78a8} .w{background:#59a14f} .r{background:#bab0ac}
.child .name{padding-left:18px} .dur{color:#666;font-size:11px;margin-left:6px}
</style><h1>trace %s</h1><div class="sub">%s · %d spans · %.1f ms · the batch's span (manager) and its tasks' spans (worker), as the fake OTLP collector received them</div>`,
		hex.EncodeToString(root.TraceId), html.EscapeString(root.Name), len(spans), float64(t1-t0)/1e6)
	for _, s := range spans {
		class, row := "w", "child"
		switch {
		case bytes.Equal(s.SpanId, root.SpanId):
			class, row = "m", ""
		case strings.HasPrefix(s.Name, "receive "):
			class = "r"
		}
		left := float64(s.StartTimeUnixNano-t0) / width * 100
		w := float64(s.EndTimeUnixNano-s.StartTimeUnixNano) / width * 100
		label := fmt.Sprintf("%s <span class=dur>%s", html.EscapeString(s.Name), html.EscapeString(s.service))
		if id := s.attr("messaging.message.id"); id != "" && class != "m" {
			label += " · task …" + html.EscapeString(id[len(id)-min(6, len(id)):]) + " · " + s.attr("redmap.elements") + " elements"
		} else {
			label += " · " + s.attr("redmap.elements") + " elements, " + s.attr("redmap.tasks") + " tasks, " + s.attr("redmap.outcome")
		}
		fmt.Fprintf(&b, `<div class="row %s"><div class="name">%s</span></div><div class="lane"><div class="bar %s" style="left:%.2f%%;width:%.2f%%" title="%s"></div></div></div>`,
			row, label, class, left, w, time.Duration(s.EndTimeUnixNano-s.StartTimeUnixNano))
	}
	return b.String()
}
