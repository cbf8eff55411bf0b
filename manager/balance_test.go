package manager_test

import (
	"testing"

	"github.com/redmap/redmap/manager"
)

// Long tasks spread evenly over worker processes: a worker takes ahead only
// what it can run within about 10 ms, so 20 tasks of 50 ms on two workers
// of concurrency 1 split about 10/10, not onto whoever asked first (on a
// loaded machine a worker that waits for a core runs a task or two fewer:
// 12/8 was seen under a load of 12 on 2 cores; taking ahead gave 15/5).
func TestLongTasksSpreadEvenly(t *testing.T) {
	b := setup(t)
	_, _, m := twoWorkers(t, b, "REDMAP_CONCURRENCY=1")
	for round := range 3 {
		pids, err := manager.Map(testCtx(t), m, nap, ints(20), manager.ChunkSize(1))
		if err != nil {
			t.Fatal(err)
		}
		per := map[int]int{}
		for _, p := range pids {
			per[p]++
		}
		if len(per) != 2 {
			t.Fatalf("round %d: tasks per worker process %v, want both workers to run some", round, per)
		}
		for pid, n := range per {
			if n < 7 || n > 13 {
				t.Fatalf("round %d: worker %d ran %d of 20 tasks (%v), want 10 ± 3", round, pid, n, per)
			}
		}
		t.Logf("round %d: tasks per worker process %v", round, per)
	}
}
