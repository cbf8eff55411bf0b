package manager_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// A pipeline's run is one trace: a span of the pipeline, the parent of
// every batch span of its stages, each saying its pipeline and stage.
func TestPipelineOneTrace(t *testing.T) {
	b := setup(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	b.Worker(t, worker.Options{Concurrency: 2}, tokens, upper, one, sum, byLetter, top3, line)
	m := b.Manager(t, manager.Options{TracerProvider: tp})
	docs := letterDocs(60, 40)
	got, err := manager.Collect(testCtx(t), m, topPipeline(docs, tokens), manager.ChunkSize(20), manager.Partitions(2))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if want := topLines(docs); !slices.Equal(got, want) {
		t.Fatalf("Collect: %q, want %q", got, want)
	}
	var roots, sends []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		switch {
		case strings.HasPrefix(s.Name, "pipeline "):
			roots = append(roots, s)
		case strings.HasPrefix(s.Name, "send "):
			sends = append(sends, s)
		}
	}
	if len(roots) != 1 {
		t.Fatalf("%d pipeline spans, want 1", len(roots))
	}
	root := roots[0]
	name := stubAttr(root, "redmap.pipeline")
	var stages []string
	for _, s := range sends {
		if s.Parent.SpanID() != root.SpanContext.SpanID() || s.SpanContext.TraceID() != root.SpanContext.TraceID() {
			t.Errorf("batch span %s (stage %q) is not a child of the pipeline's span", s.Name, stubAttr(s, "redmap.pipeline.stage"))
		}
		if p := stubAttr(s, "redmap.pipeline"); p != name || name == "" {
			t.Errorf("batch span of pipeline %q, want %q", p, name)
		}
		stages = append(stages, stubAttr(s, "redmap.pipeline.stage"))
	}
	slices.Sort(stages)
	if want := []string{"1-3 map", "3-4 reduce", "4-5 reduce"}; !slices.Equal(stages, want) {
		t.Fatalf("the batch spans' stages %q, want %q", stages, want)
	}
}
