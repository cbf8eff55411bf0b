package main

import (
	"context"
	"slices"
	"testing"

	"github.com/redmap/redmap/examples/pipeline/steps"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/worker"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// The pipeline's ranking of this repository's .go files, on a real Redis
// with two workers, equals the sequential program's, line for line.
func TestPipelineMatchesSequential(t *testing.T) {
	e := harness.On(t, redistest.Shared(t))
	e.Worker(t, worker.Options{Concurrency: 2}, steps.All...)
	e.Worker(t, worker.Options{Concurrency: 2}, steps.All...)
	t.Setenv("REDIS_URL", e.Srv.URL())
	paths, err := goFiles("../..")
	if err != nil || len(paths) < 50 {
		t.Fatalf("%d files, %v", len(paths), err)
	}
	want, err := sequential(paths)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pipeline(context.Background(), "manager", e.Queue, paths)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) || len(want) < 20 {
		t.Fatalf("the pipeline gave %d lines, the sequential program %d; they differ:\n%q\n%q", len(got), len(want), got, want)
	}
}
