package manager_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// stepRuns counts, in this process, the runs of the counted steps of a
// durable pipeline by step and value ("tokens\t<doc>", "byletter\t<word>",
// "line\t<letter>"), written to REDMAP_STEP_RUNS_FILE when a child worker
// stops (writeStepRuns).
var stepRuns struct {
	sync.Mutex
	runs map[string]int
}

func countRun(step, v string) {
	stepRuns.Lock()
	defer stepRuns.Unlock()
	if stepRuns.runs == nil {
		stepRuns.runs = make(map[string]int)
	}
	stepRuns.runs[step+"\t"+v]++
}

// writeStepRuns writes stepRuns to path, a line "<step>\t<value>\t<n>" each,
// if path is set.
func writeStepRuns(path string) error {
	if path == "" {
		return nil
	}
	stepRuns.Lock()
	defer stepRuns.Unlock()
	var b []byte
	for k, n := range stepRuns.runs {
		b = fmt.Appendf(b, "%s\t%d\n", k, n)
	}
	return os.WriteFile(path, b, 0o600)
}

// The counted steps of a durable pipeline: tokens, byLetter and line, each
// counting its runs (stepRuns), byLetter slow enough that the first by-key
// step's reduce takes a while and line slower still, so that a manager can
// be killed in either reduce phase.
var (
	countedTokens = redmap.FlatMap("countedtokens", func(ctx context.Context, doc string, emit func(string)) error {
		countRun("tokens", doc)
		for _, w := range strings.Fields(doc) {
			emit(w)
		}
		return nil
	})
	countedByLetter = redmap.Emit("countedbyletter", func(ctx context.Context, kv redmap.KV[string, int], emit func(string, []wordCount)) error {
		countRun("byletter", kv.Key)
		if err := pause(ctx, 3*time.Millisecond); err != nil {
			return err
		}
		emit(kv.Key[:1], []wordCount{{kv.Key, kv.Value}})
		return nil
	})
	countedLine = redmap.Func("countedline", func(ctx context.Context, kv redmap.KV[string, []wordCount]) (string, error) {
		countRun("line", kv.Key)
		if err := pause(ctx, 400*time.Millisecond); err != nil {
			return "", err
		}
		parts := make([]string, len(kv.Value))
		for i, wc := range kv.Value {
			parts[i] = fmt.Sprintf("%s=%d", wc.Word, wc.N)
		}
		return kv.Key + ": " + strings.Join(parts, " "), nil
	})
)

// countedPipeline is topPipeline with the counted steps: documents → words
// → upper case → counts by word → the top 3 words per first letter → a
// line per letter; topLines computes it.
func countedPipeline(docs []string) *manager.Pipeline[string] {
	words := manager.Then(manager.FlatThen(manager.From(docs), countedTokens), upper)
	counted := manager.ByKey(words, one, sum)
	tops := manager.ByKey(counted, countedByLetter, top3)
	return manager.Then(tops, countedLine)
}

// pipelineOpts are the call options of the durable pipeline name.
func pipelineOpts(name string) []manager.CallOption {
	return []manager.CallOption{manager.Durable(name), manager.ChunkSize(20), manager.Partitions(16)}
}

// childPipeline runs countedPipeline over letterDocs(REDMAP_N, 400) as
// durable pipeline REDMAP_DURABLE, printing "started" first, then "exact"
// once its lines equal topLines'.
func childPipeline(rdb redis.UniversalClient, queue string) error {
	n, _ := strconv.Atoi(os.Getenv("REDMAP_N"))
	m, err := manager.New(rdb, manager.Options{Queue: queue})
	if err != nil {
		return err
	}
	defer m.Close()
	docs := letterDocs(n, 400)
	fmt.Println("started")
	got, err := manager.Collect(context.Background(), m, countedPipeline(docs), pipelineOpts(os.Getenv("REDMAP_DURABLE"))...)
	if err != nil {
		return err
	}
	slices.Sort(got)
	if want := topLines(docs); !slices.Equal(got, want) {
		return fmt.Errorf("lines %q, want %q", got, want)
	}
	fmt.Println("exact")
	return nil
}

// pipelineRecord is the key of durable pipeline name's record.
func pipelineRecord(b *harness.Env, name string) string {
	return keys.Pipeline("redmap", b.Queue, id.Durable(name+"/pipeline"))
}

// levelPartials reports whether partials of by-key step level (from 0) of
// a pipeline are in Redis.
func levelPartials(t *testing.T, b *harness.Env, level int) bool {
	for _, k := range b.Keys(t, "redmap:{"+b.Queue+"%*}:part") {
		if strings.Contains(k, "."+strconv.Itoa(level)+".") {
			return true
		}
	}
	return false
}

// A durable pipeline whose manager process is SIGKILLed past its head
// phase, in the reduce of its first by-key step or of its second, is taken
// over by the same call from another process: its lines equal a
// sequential program's, and nothing that had run runs again. The workers
// are not touched, so the tasks in flight at the kill end on them and
// their results wait in Redis: every document is tokenized once, every
// word's count is handed to the second by-key step once, every letter's
// line is made once.
func TestPipelineDurableManagerKilled(t *testing.T) {
	for _, at := range []string{"reduce1", "reduce2"} {
		t.Run(at, func(t *testing.T) { pipelineKilled(t, at) })
	}
}

func pipelineKilled(t *testing.T, at string) {
	b := setup(t)
	dir := t.TempDir()
	var workers []*harness.Proc
	for _, name := range []string{"a", "b"} {
		w := startChild(t, "worker", childEnv(b, "REDMAP_STEP_RUNS_FILE="+filepath.Join(dir, name))...)
		w.Expect(t, "worker ")
		workers = append(workers, w)
	}
	n := 3000
	docs := letterDocs(n, 400)
	name := "pipe-" + at
	env := []string{"REDMAP_URL=" + b.URL, "REDMAP_QUEUE=" + b.Queue, "REDMAP_N=" + strconv.Itoa(n), "REDMAP_DURABLE=" + name}
	first := startChild(t, "manager-pipeline", env...)
	first.Expect(t, "started")
	switch at {
	case "reduce1":
		// The first by-key step's reduce has handed some partials on.
		eventually(t, "the second by-key step's first partials", func() bool { return levelPartials(t, b, 1) })
	case "reduce2":
		// The first by-key step's partitions are all reduced (and
		// dropped): the second's reduce runs.
		eventually(t, "the first by-key step reduced, the second's partials stored", func() bool {
			return !levelPartials(t, b, 0) && levelPartials(t, b, 1)
		})
	}
	first.Kill()
	<-first.Exited()
	if ok, err := b.Client.Exists(context.Background(), pipelineRecord(b, name)).Result(); err != nil || ok != 1 {
		t.Fatalf("no record of the durable pipeline in Redis after the kill (%v): it had ended, or never recorded itself", err)
	}
	second := startChild(t, "manager-pipeline", env...)
	second.Expect(t, "exact")
	if <-second.Exited(); second.Err() != nil {
		t.Fatalf("the manager that took the pipeline over exited with %v", second.Err())
	}
	runs := make(map[string]int)
	for i, w := range workers {
		if err := w.Stop(t); err != nil {
			t.Fatalf("worker exited with %v", err)
		}
		data, err := os.ReadFile(filepath.Join(dir, []string{"a", "b"}[i]))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			f := strings.Split(l, "\t")
			k, err := strconv.Atoi(f[len(f)-1])
			if len(f) != 3 || err != nil {
				t.Fatalf("step runs file line %q", l)
			}
			runs[f[0]+"\t"+f[1]] += k
		}
	}
	// What each step ran over, once each, as a sequential program runs it.
	want := make(map[string]int)
	letters := map[string]bool{}
	for _, d := range docs {
		want["tokens\t"+d]++
		for _, w := range strings.Fields(d) {
			want["byletter\t"+strings.ToUpper(w)] = 1
			letters[strings.ToUpper(w[:1])] = true
		}
	}
	for l := range letters {
		want["line\t"+l] = 1
	}
	again := map[string]int{}
	for k, n := range want {
		step := strings.SplitN(k, "\t", 2)[0]
		switch got := runs[k]; {
		case got < n:
			t.Errorf("%s ran %d times, want %d", k, got, n)
		case got > n:
			again[step]++
		}
	}
	for k := range runs {
		if _, ok := want[k]; !ok {
			t.Errorf("%s ran, over nothing of the input", k)
		}
	}
	of := map[string]int{}
	for k := range want {
		of[strings.SplitN(k, "\t", 2)[0]]++
	}
	t.Logf("killed in %s: ran again: %d documents' tokens, %d words' byletter, %d letters' line (of %d, %d, %d)",
		at, again["tokens"], again["byletter"], again["line"], of["tokens"], of["byletter"], of["line"])
	if len(again) > 0 {
		t.Fatalf("work that had been done ran again after the takeover: %v", again)
	}
	noPartitionsLeft(t, b)
	if ks := append(ownerKeys(t, b, name+"/pipeline"), b.Keys(t, pipelineRecord(b, name))...); len(ks) != 0 {
		t.Fatalf("the ended durable pipeline left %q in Redis", ks)
	}
}

// A different pipeline under the name of a durable pipeline that has not
// ended (other input, another step, other partitions) is refused with
// ErrDurableMismatch, saying so, and leaves it as it was: the same call
// then takes it over and finishes it exact.
func TestPipelineDurableOtherRefused(t *testing.T) {
	b := setup(t)
	b.Worker(t, worker.Options{Concurrency: 4}, countedTokens, tokens, upper, one, sum, countedByLetter, byLetter, top3, countedLine, line)
	m := b.Manager(t, manager.Options{})
	docs := letterDocs(600, 200)
	name := "pipe-other"
	ctx, cancel := context.WithCancel(testCtx(t))
	ch := make(chan error, 1)
	go func() {
		_, err := manager.Collect(ctx, m, countedPipeline(docs), pipelineOpts(name)...)
		ch <- err
	}()
	eventually(t, "the second by-key step's first partials", func() bool { return levelPartials(t, b, 1) })
	cancel()
	if err := <-ch; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled call returned %v, want context.Canceled", err)
	}
	record := func() string {
		v, err := b.Client.Get(context.Background(), pipelineRecord(b, name)).Result()
		if err != nil {
			t.Fatalf("the durable pipeline's record: %v", err)
		}
		return v
	}
	before := record()
	others := []struct {
		what string
		p    *manager.Pipeline[string]
		opts []manager.CallOption
	}{
		{"other input", countedPipeline(docs[1:]), pipelineOpts(name)},
		{"another step", topPipeline(docs, tokens), pipelineOpts(name)},
		{"other partitions", countedPipeline(docs), append(pipelineOpts(name), manager.Partitions(8))},
	}
	for _, o := range others {
		_, err := manager.Collect(testCtx(t), m, o.p, o.opts...)
		if !errors.Is(err, redmap.ErrDurableMismatch) || !strings.HasPrefix(err.Error(), "manager: durable pipeline \""+name+"\" was begun as another pipeline") {
			t.Fatalf("%s under the name of a durable pipeline: %v, want the ErrDurableMismatch that says so", o.what, err)
		}
		if after := record(); after != before {
			t.Fatalf("%s, refused, changed the durable pipeline's record", o.what)
		}
	}
	got, err := manager.Collect(testCtx(t), m, countedPipeline(docs), pipelineOpts(name)...)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if want := topLines(docs); !slices.Equal(got, want) {
		t.Fatalf("the pipeline taken over after the refusals:\n%q\nwant\n%q", got, want)
	}
	noPartitionsLeft(t, b)
}
