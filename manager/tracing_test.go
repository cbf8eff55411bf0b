package manager_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/manager"
)

// fileSpan is a span as a worker process wrote it (stdouttrace's JSON).
type fileSpan struct {
	Name        string
	SpanContext struct{ TraceID, SpanID string }
	Parent      struct{ TraceID, SpanID string }
	StartTime   time.Time
	Attributes  []fileAttr
	Events      []struct {
		Name       string
		Attributes []fileAttr
	}
	Status struct{ Code, Description string }
	file   string
}

type fileAttr struct {
	Key   string
	Value struct{ Value any }
}

// attr returns the value of attribute key as text, or "".
func attr(as []fileAttr, key string) string {
	for _, a := range as {
		if a.Key == key {
			return fmt.Sprint(a.Value.Value)
		}
	}
	return ""
}

// readSpans reads the spans the worker processes wrote to files.
func readSpans(t *testing.T, files ...string) []fileSpan {
	t.Helper()
	var out []fileSpan
	for _, path := range files {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(f)
		for {
			var s fileSpan
			if err := dec.Decode(&s); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			s.file = filepath.Base(path)
			out = append(out, s)
		}
		f.Close()
	}
	return out
}

// A traced batch is one trace across processes: the manager's batch span
// (in this process) is the parent of every task span the two worker
// processes write; a failing element gives its task span an error status
// with its kind; a task whose worker was SIGKILLed shows both takes and a
// requeued event on the run that finished it; the workers' log lines
// carry the span ids.
func TestTracingAcrossProcesses(t *testing.T) {
	b := setup(t)
	dir := t.TempDir()
	file := func(name string) string { return filepath.Join(dir, name) }
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	// No prefetch, two slots: the first batch's tasks spread over both.
	a := startChild(t, "worker", childEnv(b, "REDMAP_TRACE_FILE="+file("a.json"), "REDMAP_LOG_FILE="+file("a.log"), "REDMAP_BLOCK=1",
		"REDMAP_PREFETCH=-1", "REDMAP_CONCURRENCY=2")...)
	c := startChild(t, "worker", childEnv(b, "REDMAP_TRACE_FILE="+file("c.json"), "REDMAP_LOG_FILE="+file("c.log"),
		"REDMAP_PREFETCH=-1", "REDMAP_CONCURRENCY=2")...)
	a.ID, c.ID = a.Expect(t, "worker "), c.Expect(t, "worker ")
	m := b.Manager(t, manager.Options{TracerProvider: tp})
	ctx, root := tp.Tracer("test").Start(testCtx(t), "test")

	// One batch over both workers, element 7 failing.
	xs := make([]int, 40)
	for i := range xs {
		xs[i] = i
	}
	xs[7] = -7
	ys, err := manager.Map(ctx, m, traced, xs, manager.ChunkSize(4))
	var be *redmap.BatchError
	if !errors.As(err, &be) || !slices.Equal(be.Indexes(), []int{7}) || ys[8] != 16 {
		t.Fatalf("Map: %v, want element 7 failed and the rest doubled", err)
	}
	stats(t, c) // c stops; a alone takes the next batch's task

	// A task whose worker is SIGKILLed mid-run, finished by a new worker.
	batch, err := manager.Submit(ctx, m, traced, []int{1000})
	if err != nil {
		t.Fatal(err)
	}
	a.Expect(t, "blocking")
	a.Cmd.Process.Signal(syscall.SIGKILL)
	<-a.Exited()
	d := startChild(t, "worker", childEnv(b, "REDMAP_TRACE_FILE="+file("d.json"), "REDMAP_LOG_FILE="+file("d.log"))...)
	d.ID = d.Expect(t, "worker ")
	if ys, err := batch.Wait(ctx); err != nil || ys[0] != 2000 {
		t.Fatalf("after the kill: %v, %v; want [2000]", ys, err)
	}
	root.End()
	stats(t, d)

	// The manager's spans.
	var sends []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if strings.HasPrefix(s.Name, "send ") {
			sends = append(sends, s)
		}
	}
	if len(sends) != 2 {
		t.Fatalf("%d batch spans, want 2", len(sends))
	}
	first, second := sends[0], sends[1]
	if first.StartTime.After(second.StartTime) {
		first, second = second, first
	}
	want := map[string]string{"messaging.destination.name": b.Queue, "messaging.operation.type": "send",
		"redmap.function": "traced", "redmap.elements": "40", "redmap.tasks": "10", "redmap.failed": "1", "redmap.outcome": "failed"}
	for k, v := range want {
		if got := stubAttr(first, k); got != v {
			t.Errorf("batch span %s = %q, want %q", k, got, v)
		}
	}
	if first.Status.Code != codes.Error || first.Parent.SpanID() != root.SpanContext().SpanID() {
		t.Errorf("batch span: status %v, parent %v; want an error, under the caller's span", first.Status, first.Parent.SpanID())
	}

	spans := readSpans(t, file("a.json"), file("c.json"), file("d.json"))
	tree := spanTree(first, second, spans)
	t.Logf("the trace, as the processes wrote it:\n%s", tree)

	// Every worker span: in the caller's trace, under its batch's span;
	// every task of the first batch run once, the failing one an error.
	runs, byFile, failed := 0, map[string]int{}, 0
	for _, s := range spans {
		if s.SpanContext.TraceID != root.SpanContext().TraceID().String() {
			t.Errorf("span %s of %s is in trace %s, not the caller's", s.Name, s.file, s.SpanContext.TraceID)
		}
		if s.Parent.SpanID != first.SpanContext.SpanID().String() {
			if s.Parent.SpanID != second.SpanContext.SpanID().String() {
				t.Errorf("span %s of %s has parent %s, neither batch's span", s.Name, s.file, s.Parent.SpanID)
			}
			continue
		}
		if s.Name != "process "+b.Queue {
			continue
		}
		runs++
		byFile[s.file]++
		if s.Status.Code == "Error" {
			failed++
			if attr(s.Attributes, "redmap.error.kind") != codec.KindError.String() || !strings.Contains(s.Status.Description, "negative input -7") {
				t.Errorf("the failing task's span: kind %q, status %q", attr(s.Attributes, "redmap.error.kind"), s.Status.Description)
			}
		}
		if attr(s.Attributes, "messaging.message.id") == "" || attr(s.Attributes, "redmap.queue_wait_ms") == "" || attr(s.Attributes, "redmap.worker.id") == "" {
			t.Errorf("a task span lacks its task id, queue wait or worker: %+v", s.Attributes)
		}
	}
	if runs != 10 || failed != 1 {
		t.Errorf("first batch: %d task runs (by worker %v), %d failed; want 10, 1 failed", runs, byFile, failed)
	}
	t.Logf("first batch's task runs by worker: %v", byFile)

	// The killed run: a's take, then d's take and run with a requeued event.
	var takes []string
	requeued := false
	for _, s := range spans {
		if s.Parent.SpanID != second.SpanContext.SpanID().String() {
			continue
		}
		if strings.HasPrefix(s.Name, "receive ") {
			takes = append(takes, s.file+" attempt "+attr(s.Attributes, "redmap.attempt"))
		}
		if strings.HasPrefix(s.Name, "process ") && s.file == "d.json" {
			for _, e := range s.Events {
				requeued = requeued || e.Name == "requeued" && attr(e.Attributes, "redmap.attempt") == "2"
			}
		}
	}
	sort.Strings(takes)
	if !slices.Equal(takes, []string{"a.json attempt 1", "d.json attempt 2"}) || !requeued {
		t.Errorf("killed task: takes %v, requeued event %v; want a's attempt 1 and d's attempt 2, requeued", takes, requeued)
	}

	// Log lines written while a task ran carry its span's ids.
	ids := map[string]string{} // span id → trace id
	for _, s := range spans {
		ids[s.SpanContext.SpanID] = s.SpanContext.TraceID
	}
	lines := 0
	for _, name := range []string{"a.log", "c.log", "d.log"} {
		raw, _ := os.ReadFile(file(name))
		for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			var rec struct{ Msg, TraceID, SpanID string }
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) != nil || m["msg"] != "doubling" {
				continue
			}
			if name == "a.log" && m["x"] == float64(1000) {
				continue // its span never ended: a was killed
			}
			rec.TraceID, _ = m["trace_id"].(string)
			rec.SpanID, _ = m["span_id"].(string)
			if rec.TraceID == "" || ids[rec.SpanID] != rec.TraceID {
				t.Errorf("%s: %s: no trace_id and span_id of a task span", name, l)
			}
			lines++
		}
	}
	if lines < 40 {
		t.Errorf("%d log lines of the function, want at least 40", lines)
	}
}

// stubAttr returns the value of attribute key of s as text.
func stubAttr(s tracetest.SpanStub, key string) string {
	for _, a := range s.Attributes {
		if string(a.Key) == key {
			return a.Value.String()
		}
	}
	return ""
}

// spanTree renders the batch spans and the worker spans under them as text.
func spanTree(batches ...any) string {
	var sb strings.Builder
	var files []fileSpan
	var sends []tracetest.SpanStub
	for _, x := range batches {
		switch v := x.(type) {
		case tracetest.SpanStub:
			sends = append(sends, v)
		case []fileSpan:
			files = v
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].StartTime.Before(files[j].StartTime) })
	for _, s := range sends {
		fmt.Fprintf(&sb, "%s  [manager] trace %s span %s: %s elements, %s tasks, %s failed, outcome %s, %v\n",
			s.Name, s.SpanContext.TraceID(), s.SpanContext.SpanID(), stubAttr(s, "redmap.elements"), stubAttr(s, "redmap.tasks"),
			stubAttr(s, "redmap.failed"), stubAttr(s, "redmap.outcome"), s.EndTime.Sub(s.StartTime).Round(time.Millisecond))
		for _, f := range files {
			if f.Parent.SpanID != s.SpanContext.SpanID().String() {
				continue
			}
			var events []string
			for _, e := range f.Events {
				events = append(events, e.Name)
			}
			fmt.Fprintf(&sb, "  └─ %s  [%s] task %s attempt %s, %s elements, queue wait %s ms, status %s %s events %v\n",
				f.Name, strings.TrimSuffix(f.file, ".json"), attr(f.Attributes, "messaging.message.id"), attr(f.Attributes, "redmap.attempt"),
				attr(f.Attributes, "redmap.elements"), attr(f.Attributes, "redmap.queue_wait_ms"), f.Status.Code, f.Status.Description, events)
		}
	}
	return sb.String()
}

// A batch of a manager with no tracer provider installed carries no trace
// context: its tasks are the 14-field envelope of every version-2 task, as
// before tracing.
func TestUntracedTasksCarryNothing(t *testing.T) {
	b := setup(t)
	m := b.Manager(t, manager.Options{Shards: 1})                        // its task set where the test reads it
	ctx := trace.ContextWithSpanContext(testCtx(t), trace.SpanContext{}) // no span
	batch, err := manager.Submit(ctx, m, traced, []int{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	defer batch.Cancel()
	payloads, err := b.Client.HGetAll(ctx, keys.Tasks(manager.DefaultPrefix, b.Queue, m.ID())).Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for field, p := range payloads {
		if strings.HasPrefix(field, "_") {
			continue // the set's own fields: the count and epoch
		}
		task, err := codec.DecodeTask([]byte(p), 0)
		if err != nil || task.Trace != nil || task.Sent != 0 || p[0] != 0x90|14 {
			t.Fatalf("task %s: %+v (%v), first byte %x; want no trace context, 14 fields", field, task, err, p[0])
		}
		n++
	}
	if n == 0 {
		t.Fatal("no task found in the manager's task set")
	}
}
