package manager_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/inspect"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// A pipeline's steps (child workers register them too): documents →
// words → counts by word → the top 3 words per first letter → a line per
// letter.
var (
	// tokens emits the words of a document; a document that starts with
	// "fail" emits one and then fails.
	tokens = redmap.FlatMap("tokens", func(_ context.Context, doc string, emit func(string)) error {
		for _, w := range strings.Fields(doc) {
			emit(w)
			if strings.HasPrefix(doc, "fail") {
				return errors.New("a document that fails")
			}
		}
		return nil
	})
	// slowTokens is tokens after 2 ms a document, so that a pipeline is
	// still running when a test breaks something.
	slowTokens = redmap.FlatMap("slowtokens", func(ctx context.Context, doc string, emit func(string)) error {
		if err := pause(ctx, 2*time.Millisecond); err != nil {
			return err
		}
		for _, w := range strings.Fields(doc) {
			emit(w)
		}
		return nil
	})
	// upper upper-cases a word.
	upper = redmap.Func("upper", func(_ context.Context, w string) (string, error) { return strings.ToUpper(w), nil })
	// one emits (word, 1).
	one = redmap.Emit("one", func(_ context.Context, w string, emit func(string, int)) error {
		emit(w, 1)
		return nil
	})
	// byLetter emits a word's count under its first letter; it fails on
	// the word "UNLUCKY" (after upper).
	byLetter = redmap.Emit("byletter", func(_ context.Context, kv redmap.KV[string, int], emit func(string, []wordCount)) error {
		if kv.Key == "UNLUCKY" {
			return errors.New("unlucky word")
		}
		emit(kv.Key[:1], []wordCount{{kv.Key, kv.Value}})
		return nil
	})
	// top3 keeps the 3 words counted most (ties by word): associative and
	// commutative.
	top3 = redmap.Reduce("top3", func(_ context.Context, a, b []wordCount) ([]wordCount, error) {
		return topOf(append(slices.Clone(a), b...), 3), nil
	})
	// line prints a letter's top words.
	line = redmap.Func("line", func(_ context.Context, kv redmap.KV[string, []wordCount]) (string, error) {
		parts := make([]string, len(kv.Value))
		for i, wc := range kv.Value {
			parts[i] = fmt.Sprintf("%s=%d", wc.Word, wc.N)
		}
		return kv.Key + ": " + strings.Join(parts, " "), nil
	})
)

// wordCount is a word and its count.
type wordCount struct {
	Word string `msgpack:"w"`
	N    int    `msgpack:"n"`
}

// topOf returns the n words of wcs counted most, ties by word.
func topOf(wcs []wordCount, n int) []wordCount {
	slices.SortFunc(wcs, func(a, b wordCount) int {
		return cmp.Or(b.N-a.N, strings.Compare(a.Word, b.Word))
	})
	return wcs[:min(n, len(wcs))]
}

// topLines is what the pipeline of tokens, upper, one, byLetter, top3 and
// line gives, as a sequential program computes it, sorted.
func topLines(docs []string) []string {
	counts := map[string]int{}
	for _, d := range docs {
		if strings.HasPrefix(d, "fail") {
			continue
		}
		for _, w := range strings.Fields(d) {
			counts[strings.ToUpper(w)]++
		}
	}
	letters := map[string][]wordCount{}
	for w, n := range counts {
		if w == "UNLUCKY" {
			continue
		}
		letters[w[:1]] = append(letters[w[:1]], wordCount{w, n})
	}
	var out []string
	for l, wcs := range letters {
		top := topOf(wcs, 3)
		parts := make([]string, len(top))
		for i, wc := range top {
			parts[i] = fmt.Sprintf("%s=%d", wc.Word, wc.N)
		}
		out = append(out, l+": "+strings.Join(parts, " "))
	}
	slices.Sort(out)
	return out
}

// topPipeline is the pipeline topLines computes, with tok as its first
// step.
func topPipeline(docs []string, tok *redmap.FlatHandle[string, string]) *manager.Pipeline[string] {
	words := manager.Then(manager.FlatThen(manager.From(docs), tok), upper)
	counted := manager.ByKey(words, one, sum)
	tops := manager.ByKey(counted, byLetter, top3)
	return manager.Then(tops, line)
}

// letterDocs returns n documents of words drawn from a vocabulary of
// vocab words w0 ... and x0 ...: two first letters.
func letterDocs(n, vocab int) []string {
	docs := documents(n, vocab)
	for i := range docs {
		if i%3 == 0 {
			docs[i] = strings.ReplaceAll(docs[i], "w", "x")
		}
	}
	return docs
}

// A pipeline of six steps and two by-key steps gives what a sequential
// program does, whatever the partitions and chunks, by Collect, Stream and
// Fold alike; it leaves nothing in Redis.
func TestPipelineExact(t *testing.T) {
	b := setup(t)
	hs := []redmap.AnyHandle{tokens, upper, one, sum, byLetter, top3, line, kvCount}
	b.Worker(t, worker.Options{Concurrency: 2}, hs...)
	b.Worker(t, worker.Options{Concurrency: 2}, hs...)
	m := b.Manager(t, manager.Options{})
	docs := letterDocs(2000, 300)
	want := topLines(docs)
	if len(want) != 2 {
		t.Fatalf("the sequential program gives %d lines, want 2 letters", len(want))
	}
	p := topPipeline(docs, tokens)
	for _, opts := range [][]manager.CallOption{nil, {manager.Partitions(1)}, {manager.Partitions(5), manager.ChunkSize(7)}} {
		got, err := manager.Collect(testCtx(t), m, p, opts...)
		if err != nil {
			t.Fatalf("Collect, %d options: %v", len(opts), err)
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("Collect, %d options:\n%q\nwant\n%q", len(opts), got, want)
		}
		noPartitionsLeft(t, b)
	}
	seq, errOf := manager.Stream(testCtx(t), m, p)
	var got []string
	for s := range seq {
		got = append(got, s)
	}
	slices.Sort(got)
	if err := errOf(); err != nil || !slices.Equal(got, want) {
		t.Fatalf("Stream: %q, %v; want %q", got, err, want)
	}
	// A fold of the by-key counts: every word counted once.
	total, err := manager.Fold(testCtx(t), m, manager.Then(manager.ByKey(manager.FlatThen(manager.From(docs), tokens), one, sum), kvCount), sum)
	words := 0
	for _, d := range docs {
		words += len(strings.Fields(d))
	}
	if err != nil || total != words {
		t.Fatalf("Fold: %d, %v; want %d", total, err, words)
	}
	noPartitionsLeft(t, b)
}

// kvCount is a pair's count.
var kvCount = redmap.Func("kvcount", func(_ context.Context, kv redmap.KV[string, int]) (int, error) { return kv.Value, nil })

// A pipeline with no by-key step gives its outputs in the order of the
// input, each element's in the order emitted: a sequential loop's.
func TestPipelineWithoutByKey(t *testing.T) {
	b := setup(t)
	b.Worker(t, worker.Options{Concurrency: 2}, tokens, upper)
	m := b.Manager(t, manager.Options{})
	docs := documents(500, 50)
	var want []string
	for _, d := range docs {
		for _, w := range strings.Fields(d) {
			want = append(want, strings.ToUpper(w))
		}
	}
	got, err := manager.Collect(testCtx(t), m, manager.Then(manager.FlatThen(manager.From(docs), tokens), upper), manager.ChunkSize(9))
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("Collect: %d outputs, %v; want %d in order", len(got), err, len(want))
	}
	if _, err := manager.Collect(testCtx(t), m, manager.From(docs)); err == nil {
		t.Fatal("a pipeline with no step ran")
	}
}

// An element that fails drops out of the steps after, and is named in the
// BatchError with its step: in the input by its index, past a by-key step
// by its key. The others' outputs are exact.
func TestPipelineFailedElements(t *testing.T) {
	b := setup(t)
	hs := []redmap.AnyHandle{tokens, upper, one, sum, byLetter, top3, line}
	b.Worker(t, worker.Options{Concurrency: 2}, hs...)
	m := b.Manager(t, manager.Options{})
	docs := letterDocs(600, 40)
	bad := []int{0, 17, 599}
	for _, i := range bad {
		docs[i] = "fail w1 w2"
	}
	docs[5] += " unlucky"
	got, err := manager.Collect(testCtx(t), m, topPipeline(docs, tokens), manager.ChunkSize(10), manager.Partitions(3))
	var be *redmap.BatchError
	if !errors.As(err, &be) {
		t.Fatalf("Collect: %v; want a BatchError", err)
	}
	var inTokens []int
	keyFailed := false
	for _, f := range be.Failed {
		switch {
		case f.Stage == 1 && f.Func == "tokens" && strings.Contains(f.Error(), "a document that fails"):
			inTokens = append(inTokens, f.Index)
		case f.Stage == 4 && f.Func == "byletter" && f.Key == "UNLUCKY" && f.Index == -1:
			keyFailed = true
		default:
			t.Fatalf("unexpected failure %v (stage %d, func %q, key %q, index %d)", f, f.Stage, f.Func, f.Key, f.Index)
		}
	}
	if !slices.Equal(inTokens, bad) || !keyFailed {
		t.Fatalf("failures in tokens %v, want %v; UNLUCKY's in byletter: %v", inTokens, bad, keyFailed)
	}
	slices.Sort(got)
	if want := topLines(docs); !slices.Equal(got, want) {
		t.Fatalf("Collect with failures:\n%q\nwant\n%q", got, want)
	}
}

// Worker processes SIGKILLed while a pipeline runs, in its map side and in
// its reduce side, lose nothing and count nothing twice.
func TestPipelineWorkerKilled(t *testing.T) {
	b := setup(t)
	a, c, m := twoWorkers(t, b)
	docs := letterDocs(3000, 500)
	ch := make(chan error, 1)
	var got []string
	go func() {
		var err error
		got, err = manager.Collect(testCtx(t), m, topPipeline(docs, slowTokens), manager.ChunkSize(20), manager.Partitions(16))
		ch <- err
	}()
	eventually(t, "a tenth of the map tasks done", func() bool {
		return len(partialFields(t, b)) >= 15*16
	})
	a.Cmd.Process.Signal(syscall.SIGKILL)
	d := startChild(t, "worker", childEnv(b)...)
	d.ID = d.Expect(t, "worker ")
	eventually(t, "the second by-key step's partials", func() bool {
		for _, k := range b.Keys(t, "redmap:{"+b.Queue+"%*}:part") {
			if strings.Contains(k, ".1.") {
				return true
			}
		}
		return false
	})
	c.Cmd.Process.Signal(syscall.SIGKILL)
	if err := <-ch; err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if want := topLines(docs); !slices.Equal(got, want) {
		t.Fatalf("Collect with workers killed:\n%q\nwant\n%q", got, want)
	}
	noPartitionsLeft(t, b)
}

// Redis losing every key while a pipeline runs (FLUSHALL), once its
// second by-key step's partials are being stored, loses nothing: what
// stored the lost partials runs again, back to the input if need be, and
// the outputs are exact. Each phase's batches say which pipeline and
// steps they run.
func TestPipelineFlushAll(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of slow map tasks around a FLUSHALL")
	}
	b := harness.On(t, redistest.Start(t))
	b.Worker(t, worker.Options{Concurrency: 4}, slowTokens, upper, one, sum, byLetter, top3, line)
	var logs harness.LogBuffer
	m := b.Manager(t, manager.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	docs := letterDocs(2000, 400)
	ch := make(chan error, 1)
	var got []string
	go func() {
		var err error
		got, err = manager.Collect(testCtx(t), m, topPipeline(docs, slowTokens), manager.ChunkSize(20), manager.Partitions(8), manager.Label("flushed"))
		ch <- err
	}()
	in, err := inspect.New(b.Client, "")
	if err != nil {
		t.Fatal(err)
	}
	var stages []string
	eventually(t, "the head's batch, named for its pipeline", func() bool {
		bs, _ := in.Batches(context.Background(), b.Queue)
		for _, p := range bs {
			if p.Call.Pipeline != "" && p.Call.Label == "flushed" {
				stages = append(stages, p.Call.Stage)
			}
		}
		return len(stages) > 0
	})
	if stages[0] != "1-3 map" {
		t.Fatalf("the head's batch says stage %q, want \"1-3 map\"", stages[0])
	}
	eventually(t, "the second by-key step's partials", func() bool {
		for _, k := range b.Keys(t, "redmap:{"+b.Queue+"%*}:part") {
			if strings.Contains(k, ".1.") {
				return true
			}
		}
		return false
	})
	if err := b.Client.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := <-ch; err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if want := topLines(docs); !slices.Equal(got, want) {
		t.Fatalf("Collect across a FLUSHALL:\n%q\nwant\n%q", got, want)
	}
	if !strings.Contains(logs.String(), "what stored them runs again") {
		t.Fatalf("nothing ran again after the FLUSHALL; the manager logged:\n%s", logs.String())
	}
	noPartitionsLeft(t, b)
	// The batches that ran the head's elements again say so, and the
	// pipeline's head stage counts them among its reruns, not in its
	// total. Its first batch's record went with the FLUSHALL, and its
	// stage counts with it: the manager, which held the pipeline, put
	// them back once it found the loss, so its stages are whole: the
	// head's first batch, of every document, and the first by-key step's
	// reduce, which ended before the FLUSHALL too.
	hist, _, err := in.History(context.Background(), b.Queue, 0)
	if err != nil {
		t.Fatal(err)
	}
	reruns, firsts := 0, 0
	for _, h := range hist {
		if h.Call.Label == "flushed" && h.Call.Stage == "1-3 map" {
			if h.Call.Rerun {
				reruns++
			} else {
				firsts++
			}
		}
	}
	ps, _, err := in.Pipelines(context.Background(), hist)
	if err != nil || len(ps) != 1 || len(ps[0].Stages) != 3 {
		t.Fatalf("the pipelines of the history: %+v, %v; want the flushed one, of 3 stages", ps, err)
	}
	head := ps[0].Stages[0]
	if reruns == 0 || firsts != 0 || head.Stage != "1-3 map" || head.Reruns != reruns || head.Batches != 1 || head.Total != len(docs) || head.Done != len(docs) {
		t.Fatalf("the head stage %+v; want its %d reruns apart, its first batch (whose record the FLUSHALL took: %d in the history) of %d documents put back", head, reruns, firsts, len(docs))
	}
	if red := ps[0].Stages[1]; red.Unit != "partitions" || red.Batches < 1 || red.Total < 8 {
		t.Fatalf("the first by-key step's reduce stage %+v; want its batch of 8 partitions put back", red)
	}
	t.Logf("the stages after the FLUSHALL: %+v", ps[0].Stages)
}
