package manager_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// The map/reduce by key's emitters (child workers register them too).
var (
	// words emits (word, 1) for each word of a document; a document that
	// starts with "fail" emits one pair and then fails.
	words = redmap.Emit("words", func(_ context.Context, doc string, emit func(string, int)) error {
		if strings.HasPrefix(doc, "fail") {
			emit("fail", 1)
			return errors.New("a document that fails")
		}
		for _, w := range strings.Fields(doc) {
			emit(w, 1)
		}
		return nil
	})
	// slowWords is words after 2 ms a document, so that a job is still
	// running when a test breaks something.
	slowWords = redmap.Emit("slowwords", func(ctx context.Context, doc string, emit func(string, int)) error {
		if err := pause(ctx, 2*time.Millisecond); err != nil {
			return err
		}
		for _, w := range strings.Fields(doc) {
			emit(w, 1)
		}
		return nil
	})
	// poisonWords is words, but kills the process that runs it on a
	// document "poison": a poison pill.
	poisonWords = redmap.Emit("poisonwords", func(_ context.Context, doc string, emit func(string, int)) error {
		if doc == "poison" {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
		for _, w := range strings.Fields(doc) {
			emit(w, 1)
		}
		return nil
	})
	// slowSum is sum, after a millisecond when a+b > 20: slow where counts
	// are large, in the reduce phase (a map task of documents(n, 1000 or
	// more) counts no word 20 times), so that it lasts seconds.
	slowSum = redmap.Reduce("slowsum", func(ctx context.Context, a, b int) (int, error) {
		if a+b > 20 {
			if err := pause(ctx, time.Millisecond); err != nil {
				return 0, err
			}
		}
		return a + b, nil
	})
)

// documents returns n documents of words drawn from a vocabulary of vocab
// words (w0 the most common), the same for the same arguments.
func documents(n, vocab int) []string {
	r := rand.New(rand.NewPCG(uint64(n), uint64(vocab)))
	docs := make([]string, n)
	for i := range docs {
		var b strings.Builder
		for range 1 + r.IntN(30) {
			fmt.Fprintf(&b, "w%d ", min(r.IntN(vocab), r.IntN(vocab)))
		}
		docs[i] = b.String()
	}
	return docs
}

// counts is the word count of docs, computed here.
func counts(docs []string) map[string]int {
	c := make(map[string]int)
	for _, d := range docs {
		for _, w := range strings.Fields(d) {
			c[w]++
		}
	}
	return c
}

// sameCounts fails t unless got is want.
func sameCounts(t *testing.T, what string, got, want map[string]int) {
	t.Helper()
	if !maps.Equal(got, want) {
		for k, v := range want {
			if got[k] != v {
				t.Fatalf("%s: %q counted %d, want %d (%d keys, want %d)", what, k, got[k], v, len(got), len(want))
			}
		}
		t.Fatalf("%s: %d keys, want %d", what, len(got), len(want))
	}
}

// noPartitionsLeft fails t if any key of a map/reduce by key is left in
// Redis.
func noPartitionsLeft(t *testing.T, b *harness.Env) {
	t.Helper()
	if ks := b.Keys(t, "redmap:{"+b.Queue+"%*"); len(ks) > 0 {
		t.Fatalf("%d keys of partitions left in Redis, %q first", len(ks), ks[0])
	}
}

// cancelledPartitionsExpire fails t if a key of partitions is left in Redis
// that does not expire: after a cancel, a map task that was running may
// store its partials after the manager deleted the partitions (it checks
// it is still wanted first, but not in the same call); those expire on
// their own (docs/operations.md).
func cancelledPartitionsExpire(t *testing.T, b *harness.Env) {
	t.Helper()
	for _, k := range b.Keys(t, "redmap:{"+b.Queue+"%*") {
		if d, err := b.Client.PTTL(context.Background(), k).Result(); err != nil || d <= 0 {
			t.Fatalf("a key of partitions left in Redis with no expiry: %q (PTTL %v, %v)", k, d, err)
		}
	}
}

// ReduceByKey and ReduceByKeySeq give exactly the sequential counts, for
// any number of partitions and any chunk size, and leave nothing in Redis.
func TestReduceByKeyExact(t *testing.T) {
	b := setup(t)
	b.Worker(t, worker.Options{Concurrency: 2}, words, sum)
	b.Worker(t, worker.Options{Concurrency: 2}, words, sum)
	m := b.Manager(t, manager.Options{})
	docs := documents(3000, 5000)
	want := counts(docs)
	for _, opts := range [][]manager.CallOption{nil, {manager.Partitions(1)}, {manager.Partitions(7), manager.ChunkSize(3)},
		{manager.Partitions(64), manager.ChunkSize(1000)}} {
		got, err := manager.ReduceByKey(testCtx(t), m, words, sum, docs, opts...)
		if err != nil {
			t.Fatalf("ReduceByKey, %d options: %v", len(opts), err)
		}
		sameCounts(t, fmt.Sprintf("ReduceByKey, %d options", len(opts)), got, want)

		seq, errOf := manager.ReduceByKeySeq(testCtx(t), m, words, sum, docs, opts...)
		got = make(map[string]int)
		for k, v := range seq {
			if _, dup := got[k]; dup {
				t.Fatalf("ReduceByKeySeq gave %q twice", k)
			}
			got[k] = v
		}
		if err := errOf(); err != nil {
			t.Fatalf("ReduceByKeySeq, %d options: %v", len(opts), err)
		}
		sameCounts(t, fmt.Sprintf("ReduceByKeySeq, %d options", len(opts)), got, want)
		noPartitionsLeft(t, b)
	}
	if got, err := manager.ReduceByKey(testCtx(t), m, words, sum, nil); err != nil || len(got) != 0 {
		t.Fatalf("ReduceByKey of nothing: %v, %v", got, err)
	}
	if _, err := manager.ReduceByKey(testCtx(t), m, words, sum, docs, manager.Partitions(-1)); err == nil {
		t.Fatal("Partitions(-1) accepted")
	}
	if _, err := manager.ReduceByKey[string, string, int](testCtx(t), m, words, nil, docs); err == nil || !strings.Contains(err.Error(), "nil reducer") {
		t.Fatalf("ReduceByKey without a reducer: %v", err)
	}
}

// Elements whose emitter fails contribute none of their pairs (not even
// those emitted before the failure) and are named in a *redmap.BatchError;
// the others count exactly. Breaking out of a ReduceByKeySeq leaves
// nothing in Redis.
func TestReduceByKeyFailedElements(t *testing.T) {
	b := setup(t)
	b.Worker(t, worker.Options{Concurrency: 2}, words, sum)
	m := b.Manager(t, manager.Options{})
	docs := documents(500, 100)
	bad := []int{0, 17, 18, 499}
	for _, i := range bad {
		docs[i] = "fail w1 w2"
	}
	var good []string
	for i, d := range docs {
		if !strings.HasPrefix(d, "fail") {
			good = append(good, docs[i])
		}
	}
	got, err := manager.ReduceByKey(testCtx(t), m, words, sum, docs, manager.ChunkSize(10), manager.Partitions(5))
	var be *redmap.BatchError
	if !errors.As(err, &be) || be.Total != len(docs) || len(be.Failed) != len(bad) {
		t.Fatalf("ReduceByKey: %v; want a BatchError of %d elements", err, len(bad))
	}
	for i, f := range be.Failed {
		if f.Index != bad[i] || !strings.Contains(f.Error(), "a document that fails") {
			t.Fatalf("failure %d: %v; want element %d's", i, f, bad[i])
		}
	}
	sameCounts(t, "ReduceByKey with failed elements", got, counts(good))

	seq, errOf := manager.ReduceByKeySeq(testCtx(t), m, words, sum, documents(500, 100))
	n := 0
	for range seq {
		if n++; n == 3 {
			break
		}
	}
	if err := errOf(); err != nil || n != 3 {
		t.Fatalf("ReduceByKeySeq broken out of after %d pairs: %v", n, err)
	}
	noPartitionsLeft(t, b)
}

// A worker process SIGKILLed in the map phase, and another in the reduce
// phase, lose nothing and count nothing twice: the counts are exact.
func TestReduceByKeyWorkerKilled(t *testing.T) {
	b := setup(t)
	a, c, m := twoWorkers(t, b)
	docs := documents(3000, 2000)
	ch := slowCount(t, m, docs, 32)
	// The map phase: kill a once a tenth of the map tasks stored partials.
	eventually(t, "a tenth of the map tasks done", func() bool {
		return len(partialFields(t, b)) >= 15*32
	})
	a.Cmd.Process.Signal(syscall.SIGKILL)
	// The reduce phase: a third worker, and c killed once a partition
	// has its output.
	d := startChild(t, "worker", childEnv(b)...)
	d.ID = d.Expect(t, "worker ")
	var reduced int
	eventually(t, "a partition reduced", func() bool {
		reduced = len(b.Keys(t, "redmap:{"+b.Queue+"%*}:out"))
		return reduced > 0
	})
	c.Cmd.Process.Signal(syscall.SIGKILL)
	if reduced == 32 {
		t.Fatal("every partition was reduced before the kill: the test kills nothing in the reduce phase")
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	sameCounts(t, "ReduceByKey with workers killed", r.got, counts(docs))
	noPartitionsLeft(t, b)
}

// counted is what a ReduceByKey returned.
type counted struct {
	got map[string]int
	err error
}

// slowCount runs a ReduceByKey of slowWords and slowSum over docs, in
// parts partitions, and sends what it returns on the channel.
func slowCount(t *testing.T, m *manager.Manager, docs []string, parts int) <-chan counted {
	ch := make(chan counted, 1)
	go func() {
		got, err := manager.ReduceByKey(testCtx(t), m, slowWords, slowSum, docs, manager.ChunkSize(20), manager.Partitions(parts))
		ch <- counted{got, err}
	}()
	return ch
}

// partialFields returns the fields of every partition's partials in
// Redis.
func partialFields(t *testing.T, b *harness.Env) []string {
	t.Helper()
	var fs []string
	for _, k := range b.Keys(t, "redmap:{"+b.Queue+"%*}:part") {
		ks, _ := b.Client.HKeys(context.Background(), k).Result()
		fs = append(fs, ks...)
	}
	return fs
}

// Redis losing every key mid-shuffle (FLUSHALL) loses nothing: the lost
// partials' map tasks run again, and the counts are exact.
func TestReduceByKeyFlushAll(t *testing.T) {
	if testing.Short() {
		t.Skip("10 s of slow map tasks around a FLUSHALL")
	}
	b := harness.On(t, redistest.Start(t))
	b.Worker(t, worker.Options{Concurrency: 4}, slowWords, slowSum)
	var logs harness.LogBuffer
	m := b.Manager(t, manager.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	docs := documents(2000, 1000)
	ch := slowCount(t, m, docs, 16)
	eventually(t, "a partition reduced", func() bool {
		return len(b.Keys(t, "redmap:{"+b.Queue+"%*}:out")) > 0
	})
	if err := b.Client.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	sameCounts(t, "ReduceByKey across a FLUSHALL", r.got, counts(docs))
	if !strings.Contains(logs.String(), "their map tasks run again") {
		t.Fatalf("no map task ran again after the FLUSHALL; the manager logged:\n%s", logs.String())
	}
	noPartitionsLeft(t, b)
}

// On a Cluster of three masters, the partitions spread over all three, and
// the counts are exact.
func TestReduceByKeyClusterSpread(t *testing.T) {
	redistest.OwnTopology(t)
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	b := &harness.Env{Client: cl.Client(t), URL: cl.URL(), Queue: "shuffle"}
	b.Worker(t, worker.Options{Concurrency: 4}, words, sum)
	m := b.Manager(t, manager.Options{})
	docs := documents(3000, 20000)
	seq, errOf := manager.ReduceByKeySeq(testCtx(t), m, words, sum, docs, manager.Partitions(12))
	got := make(map[string]int)
	first := true
	for k, v := range seq {
		if first {
			// Every partition is reduced before the first pair comes:
			// their outputs are in Redis.
			first = false
			masters := map[int]int{}
			for _, key := range b.Keys(t, "redmap:{shuffle%*}:out") {
				masters[cl.NodeOf(t, key).Port]++
			}
			if len(masters) != 3 {
				t.Fatalf("partitions' outputs on masters %v, want all 3", masters)
			}
		}
		got[k] = v
	}
	if err := errOf(); err != nil {
		t.Fatal(err)
	}
	sameCounts(t, "ReduceByKey on a Cluster", got, counts(docs))
	noPartitionsLeft(t, b)
}

// A document that kills every worker process that runs it fails after its
// attempt budget with ErrLost, contributing nothing; every other document
// counts exactly.
func TestReduceByKeyPoisonPill(t *testing.T) {
	b := setup(t)
	_, stop := supervise(t, 2, childEnv(b, "REDMAP_CONCURRENCY=2")...)
	defer stop()
	m := b.Manager(t, manager.Options{})
	eventually(t, "two workers live", func() bool {
		live, _ := m.Workers(context.Background())
		return len(live) == 2
	})
	docs := documents(200, 300)
	docs[57] = "poison"
	got, err := manager.ReduceByKey(testCtx(t), m, poisonWords, sum, docs, manager.ChunkSize(1), manager.Attempts(2))
	var be *redmap.BatchError
	if !errors.As(err, &be) || fmt.Sprint(be.Indexes()) != "[57]" || !errors.Is(err, redmap.ErrLost) {
		t.Fatalf("got %v, want element 57 failing with ErrLost", err)
	}
	sameCounts(t, "ReduceByKey with a poison pill", got, counts(slices.Delete(slices.Clone(docs), 57, 58)))
	noPartitionsLeft(t, b)
}

// A durable map/reduce by key whose manager process is SIGKILLed in the
// map phase is taken over by the same call from another process, which
// returns the exact counts.
func TestReduceByKeyDurableManagerKilled(t *testing.T) {
	b := setup(t)
	for range 2 {
		w := startChild(t, "worker", childEnv(b, "REDMAP_CONCURRENCY=4")...)
		w.Expect(t, "worker ")
	}
	name := "shuffle-" + b.Queue
	env := []string{"REDMAP_URL=" + b.URL, "REDMAP_QUEUE=" + b.Queue, "REDMAP_N=4000",
		"REDMAP_DURABLE=" + name, "REDMAP_MODE=shuffle"}
	first := startChild(t, "manager-durable", env...)
	first.Expect(t, "submitted")
	// 200 map tasks of 20 documents, 16 partitions each: kill it with a
	// fifth of them done.
	eventually(t, "a fifth of the map tasks done", func() bool { return len(partialFields(t, b)) >= 40*16 })
	first.Kill()
	if n, err := b.Client.HExists(context.Background(), keys.Durables("redmap", b.Queue), id.Durable(name+"/map")).Result(); err != nil || !n {
		t.Fatalf("no durable batch %q in Redis after the kill (%v): nothing to take over", name+"/map", err)
	}
	second := startChild(t, "manager-durable", env...)
	second.Expect(t, "exact")
	if <-second.Exited(); second.Err() != nil {
		t.Fatalf("the restarted manager exited with %v", second.Err())
	}
	noPartitionsLeft(t, b)
}

// A map/reduce by key cuts few, large map tasks, on its first call and
// after: the reduce phase's tasks (a partition each, slow) do not teach
// the emitter a cost that would cut the next call's map tasks small.
func TestReduceByKeyMapTasksFollowCost(t *testing.T) {
	b := setup(t)
	w := b.Worker(t, worker.Options{Concurrency: 2}, words, sum)
	m := b.Manager(t, manager.Options{})
	docs := documents(3000, 5000)
	want := counts(docs)
	for i := range 2 {
		before := w.Stats().Taken
		got, err := manager.ReduceByKey(testCtx(t), m, words, sum, docs)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		sameCounts(t, fmt.Sprintf("call %d", i), got, want)
		// Quiet: at most 4 blind map tasks, 17 to the cost (the spread),
		// and a reduce task per partition: 37. Costs measured on a starved
		// machine (two make tests at once on 2 cores) cut up to 81. The
		// fault this catches, map tasks cut to the reduce phase's cost,
		// makes 375 map tasks of 8: the bound is well below that.
		if n, most := w.Stats().Taken-before, int64(150); n > most {
			t.Fatalf("call %d: %d tasks, want at most %d", i, n, most)
		}
	}
}
