package manager_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// A durable call's counts are its manager's (Stats), once it has ended as
// well as while it runs, though it ran on an owner of its own: its
// elements, the bytes of its results, and of a map/reduce by key's
// partials and outputs.
func TestDurableStatsCountEnded(t *testing.T) {
	b := setup(t)
	b.Worker(t, worker.Options{Concurrency: 4}, durableSquare, words, sum)
	m := b.Manager(t, manager.Options{})
	plain := b.Manager(t, manager.Options{})

	xs := span(300)
	if _, err := manager.Map(testCtx(t), plain, durableSquare, xs, manager.ChunkSize(10)); err != nil {
		t.Fatal(err)
	}
	if _, err := manager.Map(testCtx(t), m, durableSquare, xs, manager.ChunkSize(10), manager.Durable("counted")); err != nil {
		t.Fatal(err)
	}
	want := plain.Stats() // the same tasks, the same results
	if st := m.Stats(); st.Elements != int64(len(xs)) || st.ResultBytes != want.ResultBytes || st.Pending != 0 {
		t.Fatalf("after a durable Map of %d elements, Stats %+v; the same Map not durable: %+v", len(xs), st, want)
	}

	docs := make([]string, 200)
	for i := range docs {
		docs[i] = fmt.Sprintf("w%d w%d common", i%7, i%13)
	}
	before := m.Stats()
	got, err := manager.ReduceByKey(testCtx(t), m, words, sum, docs, manager.Durable("counted-by-key"), manager.Partitions(4))
	if err != nil {
		t.Fatal(err)
	}
	if got["common"] != len(docs) {
		t.Fatalf("common counted %d times, want %d", got["common"], len(docs))
	}
	st := m.Stats()
	// Every document is an element of the map phase, every partition one
	// of the reduce phase.
	if n := st.Elements - before.Elements; n != int64(len(docs)+4) {
		t.Fatalf("a durable ReduceByKey of %d documents over 4 partitions counted %d elements, want %d", len(docs), n, len(docs)+4)
	}
	if st.ResultBytes == before.ResultBytes || st.PartialBytes == before.PartialBytes || st.OutputBytes == before.OutputBytes {
		t.Fatalf("a durable ReduceByKey left Stats' bytes as they were: %+v, before %+v", st, before)
	}
}

// A durable call returns once its results are in, not after its
// collector's wait for a next result times out: with a Poll of 10 minutes,
// a call that waited would hold the test until go test's -timeout (10 min
// by default) ends it, its stack in the owner's Close.
func TestDurableCallEndsWithoutWaitingAPoll(t *testing.T) {
	b := setup(t)
	b.Worker(t, worker.Options{Concurrency: 4}, durableSquare)
	m := b.Manager(t, manager.Options{Poll: 10 * time.Minute})
	for i := range 2 { // the name is free again once the first has ended
		xs := span(50)
		ys, err := manager.Map(testCtx(t), m, durableSquare, xs, manager.Durable("prompt"))
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		checkSquaresOf(t, xs, ys)
	}
}
