package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redmap/redmap/connect"
	"github.com/redmap/redmap/dashboard"
	"github.com/redmap/redmap/inspect"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
)

// runPipelineChild is the "manager-pipeline" child: a manager of
// REDMAP_QUEUE on REDIS_URL, publishing every REDMAP_POLL, that runs
// durable pipeline REDMAP_DURABLE (pkey and psum by key over REDMAP_N
// elements, then phold, which runs until cancelled) until it is killed. It
// says "started" once it has a manager.
func runPipelineChild() error {
	rdb, err := connect.URL(os.Getenv("REDIS_URL"))
	if err != nil {
		return err
	}
	poll, err := time.ParseDuration(os.Getenv("REDMAP_POLL"))
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(os.Getenv("REDMAP_N"))
	if err != nil {
		return err
	}
	m, err := manager.New(rdb, manager.Options{Queue: os.Getenv("REDMAP_QUEUE"), Poll: poll, NoWorkerTimeout: -1})
	if err != nil {
		return err
	}
	fmt.Println("started")
	p := manager.Then(manager.ByKey(manager.From(ints(n)), pkey, psum), phold)
	_, err = manager.Collect(context.Background(), m, p, manager.Durable(os.Getenv("REDMAP_DURABLE")), manager.Partitions(2), manager.ChunkSize(10))
	return err
}

// startPipelineChild starts a manager-pipeline child on e's queue.
func startPipelineChild(t *testing.T, e *harness.Env, name string, poll time.Duration, n int) *harness.Proc {
	t.Helper()
	p := harness.Start(t, harness.Child("manager-pipeline", []string{"REDIS_URL=" + e.URL, "REDMAP_QUEUE=" + e.Queue,
		"REDMAP_DURABLE=" + name, "REDMAP_POLL=" + poll.String(), "REDMAP_N=" + strconv.Itoa(n)}))
	p.Expect(t, "started")
	return p
}

// pipelineLine returns the fields of the line of out that lists pipeline
// name (PIPELINE QUEUE STATE FUNC BATCHES ... CALL WAITING), or nil.
func pipelineLine(out, name string) []string {
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[0] == name {
			return f
		}
	}
	return nil
}

// batchesOf returns the rows of pipeline name that redmap batches -json
// lists.
func batchesOf(t *testing.T, e *harness.Env, name string) []inspect.Batch {
	t.Helper()
	var bs []inspect.Batch
	cliJSONAt(t, e.URL, &bs, "batches", "-queue", e.Queue)
	return slices.DeleteFunc(bs, func(b inspect.Batch) bool { return b.Call.Pipeline != name })
}

// A durable pipeline whose manager process is SIGKILLed while its reduce
// runs (its tasks held by workers, which run on without it) is listed by
// redmap batches, text and -json, orphaned once its claims are not renewed
// (before they lapse), and still once they lapse: its reduce stage's
// counts said to be the last published, its head stage's counted whole.
// It is listed until it is cancelled.
func TestKilledPipelineListedOrphaned(t *testing.T) {
	e := harness.Setup(t)
	startWorker(t, e.Srv, e.Queue, "-concurrency", "4")
	in, err := inspect.New(e.Client, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	name := "killed-pipe"
	mgr := startPipelineChild(t, e, name, 100*time.Millisecond, 200)
	var reduce inspect.Batch
	redistest.Eventually(t, "the pipeline's reduce running", func() bool {
		bs, err := in.Batches(ctx, e.Queue)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bs {
			if b.Call.Pipeline == name && b.Call.Stage == "1-2 reduce" && b.Outcome == "running" && b.Total == 2 {
				reduce = b
				return true
			}
		}
		return false
	})
	mgr.Kill()
	<-mgr.Exited()
	d, err := dashboard.New(e.Client, dashboard.Options{Queue: e.Queue})
	if err != nil {
		t.Fatal(err)
	}
	check := func() {
		t.Helper()
		out, errs, code := runCLI(t, e.Srv, "batches", "-queue", e.Queue)
		t.Logf("redmap batches:\n%s", out)
		if code != 0 {
			t.Fatalf("redmap batches: exit %d: %s", code, errs)
		}
		// PIPELINE QUEUE STATE FUNC BATCHES ... WAITING
		if job := pipelineLine(out, name); len(job) < 3 || job[1] != e.Queue || job[2] != "orphaned" || !strings.Contains(out, "last published") {
			t.Fatalf("the killed pipeline's line %q; want it listed, orphaned, its counts said to be the last published", job)
		}
		// STATE FUNC BATCHES DONE FAILED RUNNING TOTAL
		if head := stageLine(out, "1 map"); len(head) < 7 || !slices.Equal(head[:7], []string{"done", "pkey", "1", "200", "0", "0", "200"}) {
			t.Fatalf("the head stage's line %q; want it done, its 200 elements", head)
		}
		if red := stageLine(out, "1-2 reduce"); len(red) < 7 || red[0] != "orphaned" || red[1] != "pkey" || red[6] != "2" || red[5] != "0" {
			t.Fatalf("the reduce stage's line %q; want it orphaned, of its 2 partitions, none said running", red)
		}
		bs := batchesOf(t, e, name)
		i := slices.IndexFunc(bs, func(b inspect.Batch) bool { return b.ID == reduce.ID })
		if i < 0 || bs[i].Outcome != "orphaned" || bs[i].Counts != "last published" || bs[i].Total != 2 {
			t.Fatalf("redmap batches -json of the pipeline: %+v; want its reduce batch %s orphaned, of 2, its counts the last published", bs, reduce.ID)
		}
		own := slices.IndexFunc(bs, func(b inspect.Batch) bool { return b.Durable == name+"/pipeline" })
		if own < 0 || bs[own].Outcome != "orphaned" {
			t.Fatalf("redmap batches -json of the pipeline: %+v; want its own row (its claim), orphaned", bs)
		}
		// The dashboard and the metrics read the same records.
		st, err := d.State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if i := slices.IndexFunc(st.Pipelines, func(p inspect.Pipeline) bool { return p.Name == name }); i < 0 || st.Pipelines[i].Outcome != "orphaned" {
			t.Fatalf("the dashboard's pipelines: %+v; want %s orphaned", st.Pipelines, name)
		}
		if m, err := in.Metrics(ctx, e.Queue); err != nil || m.Durable["orphaned"] != 1 || m.Durable["running"] != 0 {
			t.Fatalf("the metrics' durable batches: %v, %v; want the reduce orphaned, none running", m.Durable, err)
		}
	}
	// Its claims live out their leases (10 s at this Poll), but none is
	// renewed: the pipeline is orphaned within a few Polls of the kill.
	redistest.Eventually(t, "the killed pipeline's reduce orphaned", func() bool {
		bs, err := in.Batches(ctx, e.Queue)
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(bs, func(b inspect.Batch) bool { return b.ID == reduce.ID && b.Outcome == "orphaned" })
	})
	t.Logf("%d claim(s) left of the killed manager", len(e.Keys(t, "*:{"+keys.Glob(e.Queue)+"*}:m:*:claim")))
	check()
	// Once they lapse, nothing but the records its manager left says what
	// the pipeline is: it stays listed.
	redistest.Eventually(t, "the killed manager's claims lapsed", func() bool {
		return len(e.Keys(t, "*:{"+keys.Glob(e.Queue)+"*}:m:*:claim")) == 0
	})
	check()
	if out, errs, code := runCLI(t, e.Srv, "cancel", e.Queue, name); code != 0 {
		t.Fatalf("redmap cancel of the orphaned pipeline: exit %d %q %q", code, out, errs)
	}
	if bs := batchesOf(t, e, name); slices.ContainsFunc(bs, func(b inspect.Batch) bool { return b.Outcome == "orphaned" || b.Outcome == "running" }) {
		t.Fatalf("the pipeline after its cancel: %+v; want none of it running or orphaned", bs)
	}
	// It is listed with the history, cancelled, with what ran: its head
	// stage's 200 elements done, its reduce stage's 2 partitions
	// cancelled.
	out, _, _ := runCLI(t, e.Srv, "batches", "-all", "-queue", e.Queue)
	t.Logf("redmap batches -all after the cancel:\n%s", out)
	if job := pipelineLine(out, name); len(job) < 3 || job[2] != "cancelled" {
		t.Fatalf("the cancelled pipeline's line %q; want it listed, cancelled", job)
	}
	if head := stageLine(out, "1 map"); len(head) < 7 || !slices.Equal(head[:7], []string{"done", "pkey", "1", "200", "0", "0", "200"}) {
		t.Fatalf("the head stage's line %q after the cancel; want it done, its 200 elements", head)
	}
	if red := stageLine(out, "1-2 reduce"); len(red) < 7 || red[0] != "cancelled" || red[6] != "2" {
		t.Fatalf("the reduce stage's line %q after the cancel; want it cancelled, of its 2 partitions", red)
	}
}

// A durable pipeline whose manager process is SIGKILLed before its first
// Poll (a Poll of a minute: it had published nothing), its head submitted
// (its tasks in Redis, no worker to run them), is listed all the same: its
// head stage of 300 elements, its pipeline running while the claims its
// manager took last, orphaned once they lapse (their TTLs run out here at
// once, rather than in five minutes).
func TestPipelineKilledBeforeFirstPollListed(t *testing.T) {
	e := harness.Setup(t)
	ctx := context.Background()
	name := "early-pipe"
	mgr := startPipelineChild(t, e, name, time.Minute, 300)
	tasks := keys.Tasks("redmap", e.Queue, id.Durable(name+"/map"))
	redistest.Eventually(t, "the pipeline's head submitted", func() bool { return e.Client.HLen(ctx, tasks).Val() > 2 }) // "_" and "_e" are no tasks
	mgr.Kill()
	<-mgr.Exited()
	check := func(state, counts string) {
		t.Helper()
		out, errs, code := runCLI(t, e.Srv, "batches", "-queue", e.Queue)
		t.Logf("redmap batches:\n%s", out)
		if code != 0 {
			t.Fatalf("redmap batches: exit %d: %s", code, errs)
		}
		if job := pipelineLine(out, name); len(job) < 3 || job[2] != state {
			t.Fatalf("the killed pipeline's line %q; want it listed, %s", job, state)
		}
		if head := stageLine(out, "1 map"); len(head) < 7 || head[0] != state || head[1] != "pkey" || head[6] != "300" {
			t.Fatalf("the head stage's line %q; want it %s, of 300 elements", head, state)
		}
		bs := batchesOf(t, e, name)
		i := slices.IndexFunc(bs, func(b inspect.Batch) bool { return b.Durable == name+"/map" })
		if i < 0 || bs[i].Outcome != state || bs[i].Total != 300 || bs[i].Counts != counts {
			t.Fatalf("redmap batches -json of the pipeline: %+v; want its head %s, of 300, counts %q", bs, state, counts)
		}
	}
	check("running", "")
	for _, k := range e.Keys(t, "*:{"+keys.Glob(e.Queue)+"*}:m:*:claim") {
		if err := e.Client.PExpire(ctx, k, time.Millisecond).Err(); err != nil {
			t.Fatal(err)
		}
	}
	redistest.Eventually(t, "the killed manager's claims lapsed", func() bool {
		return len(e.Keys(t, "*:{"+keys.Glob(e.Queue)+"*}:m:*:claim")) == 0
	})
	check("orphaned", "last published")
}

// A pipeline's stage rows are counted over every batch of it that ended,
// whatever -n read of the history: redmap batches -all -n 1, -n 300 and
// the default list its stages alike.
func TestPipelineStagesNotOfN(t *testing.T) {
	e := harness.Setup(t)
	startWorker(t, e.Srv, e.Queue, "-concurrency", "4")
	m := e.Manager(t, manager.Options{Poll: 100 * time.Millisecond})
	ys, err := manager.Collect(context.Background(), m, manager.ByKey(manager.From(ints(500)), pkey, psum), manager.Partitions(3), manager.ChunkSize(10), manager.Label("nstages"))
	if err != nil || len(ys) != 100 {
		t.Fatalf("Collect: %d outputs, %v; want 100", len(ys), err)
	}
	stages := func(args ...string) []string {
		t.Helper()
		out, errs, code := runCLI(t, e.Srv, append([]string{"batches", "-all", "-queue", e.Queue}, args...)...)
		if code != 0 {
			t.Fatalf("redmap batches %q: exit %d: %s", args, code, errs)
		}
		var rows []string
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "  ") {
				f := strings.Fields(l)
				rows = append(rows, strings.Join(f[:min(len(f), 9)], " ")) // STAGE (two words) STATE FUNC BATCHES DONE FAILED RUNNING TOTAL
			}
		}
		t.Logf("redmap batches -all %q: %q", args, rows)
		return rows
	}
	want := []string{"1 map done pkey 1 500 0 0 500", "1 reduce done pkey 1 3 0 0 3"}
	for _, args := range [][]string{{"-n", "1"}, nil, {"-n", "300"}} {
		if got := stages(args...); !slices.Equal(got, want) {
			t.Fatalf("the pipeline's stages with %q: %q; want %q", args, got, want)
		}
	}
}
