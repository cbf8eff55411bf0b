package manager_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redmap/redmap/inspect"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/keys"
)

// An operator cancels a durable pipeline whose manager process was
// SIGKILLed in its second by-key step's reduce, once nobody holds its
// claims (their leases lapsed): the pipeline is orphaned, its reduce
// batch's tasks still queued (the queue is paused meanwhile, so that they
// are). The cancel, as redmap cancel makes it, ends that batch as
// cancelled (its tasks withdrawn: nothing is left queued or running), and
// deletes the pipeline's record, its partitions (but for what a task
// running at the cancel stored after it, which expires), its claim and its
// phases' batches. The same call again, from another manager process,
// starts the pipeline from its start, fresh, and gives the sequential
// program's lines: it takes over nothing of the cancelled run, whose
// reduce would fail its elements with ErrCancelled.
func TestPipelineDurableOrphanCancelled(t *testing.T) {
	b := setup(t)
	for range 2 {
		// One task at a time each: the reduce's tasks, 400 ms a letter,
		// outlast the wait for its progress to be published.
		w := startChild(t, "worker", childEnv(b, "REDMAP_CONCURRENCY=1")...)
		w.Expect(t, "worker ")
	}
	in, err := inspect.New(b.Client, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	name := "pipe-orphan"
	reduce := name + "/reduce2@0"
	env := []string{"REDMAP_URL=" + b.URL, "REDMAP_QUEUE=" + b.Queue, "REDMAP_N=" + strconv.Itoa(3000), "REDMAP_DURABLE=" + name}
	first := startChild(t, "manager-pipeline", env...)
	first.Expect(t, "started")
	tasks := keys.Tasks("redmap", b.Queue, id.Durable(reduce))
	outstanding := func() int64 { return b.Client.HLen(context.Background(), tasks).Val() - 2 } // "_" and "_e" are no tasks
	eventually(t, "the second by-key step's reduce submitted, most of it outstanding", func() bool { return outstanding() >= 8 })
	if _, err := in.Pause(ctx, b.Queue, "test"); err != nil {
		t.Fatal(err)
	}
	first.Kill()
	<-first.Exited()
	eventuallyWithin(t, time.Minute, "no claim of the killed manager held", func() bool {
		return len(b.Keys(t, "*:{"+keys.Glob(b.Queue)+"*}:m:*:claim")) == 0
	})
	if n := outstanding(); n <= 0 {
		t.Fatalf("the killed manager's reduce batch has %d tasks outstanding; want it orphaned with some", n)
	}
	heads := pipelineHistory(t, in, b.Queue, name)
	if len(heads) != 2 || heads[1].Call.Stage != "1-3 map" || heads[1].Outcome != "done" {
		t.Fatalf("the pipeline's batches in the history before the cancel: %+v; want its head's, done, and its first reduce's", heads)
	}
	killedHead := heads[1]

	pc, err := cancelPipeline(ctx, in, b.Queue, name)
	if err != nil {
		t.Fatal(err)
	}
	if pc.Pipeline != name || pc.Durable == nil || pc.Durable.Batches[reduce] != "cancelled" || !pc.Durable.Pipeline.Record || pc.Durable.PartitionKeys == 0 {
		t.Fatalf("the cancel of the orphaned pipeline: %+v (%+v); want its reduce batch cancelled, its record and partitions deleted", pc, pc.Durable)
	}
	t.Logf("the cancel: %+v", *pc.Durable)
	if ok, err := b.Client.Exists(context.Background(), pipelineRecord(b, name)).Result(); err != nil || ok != 0 {
		t.Fatalf("the pipeline's record after the cancel: %d, %v; want it deleted", ok, err)
	}
	nothingOfPipeline(t, b, name, "map", "reduce1@0", "reduce2@0")
	if h, ok := historyOf(t, in, b.Queue, reduce); !ok || h.Outcome != "cancelled" || h.Total != 0 && h.Done >= h.Total {
		t.Fatalf("the cancelled reduce's record: %+v, %v; want it cancelled (before its end, if its progress was published)", h, ok)
	}
	if _, _, err := in.Resume(ctx, b.Queue); err != nil {
		t.Fatal(err)
	}
	// The workers drop the withdrawn tasks' ids they take: none runs.
	nothingRunsOrWaits(t, in, b)

	second := startChild(t, "manager-pipeline", env...)
	second.Expect(t, "exact")
	if <-second.Exited(); second.Err() != nil {
		t.Fatalf("the same call after the cancel exited with %v", second.Err())
	}
	// Its head ran again: its record, under the killed head's id, is a run
	// begun after the cancel, not the killed run's.
	again := pipelineHistory(t, in, b.Queue, name)
	var head *inspect.Batch
	for i := range again {
		if again[i].Call.Stage == "1-3 map" {
			head = &again[i]
		}
	}
	if head == nil || head.ID != killedHead.ID || head.Outcome != "done" || !head.Started.After(killedHead.Ended) {
		t.Fatalf("the second run's head: %+v; want it done, under id %s, begun after the killed run's head ended (%v)", head, killedHead.ID, killedHead.Ended)
	}
	noPartitionsLeft(t, b)
	if ks := append(ownerKeys(t, b, name+"/pipeline"), b.Keys(t, pipelineRecord(b, name))...); len(ks) != 0 {
		t.Fatalf("the ended durable pipeline left %q in Redis", ks)
	}
}
