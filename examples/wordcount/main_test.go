package main

import (
	"context"
	"maps"
	"os"
	"testing"

	"github.com/redmap/redmap/examples/internal/demo"
	"github.com/redmap/redmap/examples/wordcount/count"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/worker"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// The MapReduce count of this repository's .go files, on a real Redis with
// two workers, equals the sequential count, word for word.
func TestMapReduceMatchesSequential(t *testing.T) {
	e := harness.On(t, redistest.Shared(t))
	e.Worker(t, worker.Options{Concurrency: 2}, count.Files, count.Merge)
	e.Worker(t, worker.Options{Concurrency: 2}, count.Files, count.Merge)
	t.Setenv("REDIS_URL", e.Srv.URL())
	files, err := demo.GoFiles("../..")
	if err != nil || len(files) < 50 {
		t.Fatalf("%d files, %v", len(files), err)
	}
	want := make(count.Counts)
	for _, f := range files {
		b, err := os.ReadFile(f.Path)
		if err != nil {
			t.Fatal(err)
		}
		count.Words(b, want)
	}
	chunk = 3
	got, err := mapReduce(context.Background(), "manager", e.Queue, group(files, 20))
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got, want) {
		t.Fatalf("MapReduce counted %d distinct words, sequential %d; they differ", len(got), len(want))
	}
	if want["func"] == 0 || want["_"] == 0 {
		t.Fatalf("the counts miss obvious words: func %d, _ %d", want["func"], want["_"])
	}
}

// A word is a maximal run of ASCII letters, digits and '_'.
func TestWords(t *testing.T) {
	c := make(count.Counts)
	count.Words([]byte("a_b1 := x.y(a_b1)\n\té é2 _"), c)
	want := count.Counts{"a_b1": 2, "x": 1, "y": 1, "2": 1, "_": 1}
	if !maps.Equal(c, want) {
		t.Fatalf("got %v, want %v", c, want)
	}
}
