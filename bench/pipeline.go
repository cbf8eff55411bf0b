package main

import (
	"cmp"
	"context"
	"fmt"
	"go/scanner"
	"go/token"
	"hash/fnv"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/manager"
)

// The pipeline scenario's job, over the contents of Go source files:
// files → identifiers → counts by identifier → the top identifiers per
// first letter → a line per letter.
const pipelineTop = 10

// identCount is an identifier and how often it occurs.
type identCount struct {
	Ident string `msgpack:"i"`
	N     int    `msgpack:"n"`
}

var (
	// goIdents emits each identifier of a Go source file (go/scanner,
	// comments skipped, syntax errors ignored).
	goIdents = redmap.FlatMap("goidents", func(_ context.Context, src string, emit func(string)) error {
		identsOf(src, emit)
		return nil
	})
	// identOne emits (identifier, 1).
	identOne = redmap.Emit("identone", func(_ context.Context, id string, emit func(string, int)) error {
		emit(id, 1)
		return nil
	})
	// fileIdents is the hand-chained job's first emitter: goIdents and
	// identOne in one, (identifier, 1) for each identifier of a file.
	fileIdents = redmap.Emit("fileidents", func(_ context.Context, src string, emit func(string, int)) error {
		identsOf(src, func(id string) { emit(id, 1) })
		return nil
	})
	// sumCounts adds counts.
	sumCounts = redmap.Reduce("sumcounts", func(_ context.Context, a, b int) (int, error) { return a + b, nil })
	// identLetter emits an identifier's count under its first letter.
	identLetter = redmap.Emit("identletter", func(_ context.Context, kv redmap.KV[string, int], emit func(string, []identCount)) error {
		emit(firstLetter(kv.Key), []identCount{{kv.Key, kv.Value}})
		return nil
	})
	// topIdents keeps the pipelineTop identifiers counted most, ties by
	// identifier: a total order, so associative and commutative (each
	// identifier is in one list only: the counts are by identifier).
	topIdents = redmap.Reduce("topidents", func(_ context.Context, a, b []identCount) ([]identCount, error) {
		return topOfIdents(slices.Concat(a, b)), nil
	})
	// letterLine formats a letter's top identifiers.
	letterLine = redmap.Func("letterline", func(_ context.Context, kv redmap.KV[string, []identCount]) (string, error) {
		return formatLetter(kv.Key, kv.Value), nil
	})
)

// identsOf calls emit with each identifier of the Go source src.
func identsOf(src string, emit func(string)) {
	fset := token.NewFileSet()
	f := fset.AddFile("", -1, len(src))
	var sc scanner.Scanner
	sc.Init(f, []byte(src), func(token.Position, string) {}, 0)
	for {
		_, tok, lit := sc.Scan()
		if tok == token.EOF {
			return
		}
		if tok == token.IDENT {
			emit(lit)
		}
	}
}

// firstLetter is the first rune of s, as a string.
func firstLetter(s string) string {
	_, n := utf8.DecodeRuneInString(s)
	return s[:n]
}

// topOfIdents sorts ics (in place) by count, most first, ties by
// identifier, and returns the first pipelineTop.
func topOfIdents(ics []identCount) []identCount {
	slices.SortFunc(ics, func(a, b identCount) int { return cmp.Or(cmp.Compare(b.N, a.N), strings.Compare(a.Ident, b.Ident)) })
	return ics[:min(pipelineTop, len(ics))]
}

func formatLetter(letter string, top []identCount) string {
	parts := make([]string, len(top))
	for i, ic := range top {
		parts[i] = ic.Ident + "=" + strconv.Itoa(ic.N)
	}
	return letter + ": " + strings.Join(parts, " ")
}

// sequentialTops is the job as a plain Go loop: its lines, sorted.
func sequentialTops(files []string) []string {
	counts := make(map[string]int)
	for _, src := range files {
		identsOf(src, func(id string) { counts[id]++ })
	}
	letters := make(map[string][]identCount)
	for id, n := range counts {
		l := firstLetter(id)
		letters[l] = append(letters[l], identCount{id, n})
	}
	lines := make([]string, 0, len(letters))
	for l, ics := range letters {
		lines = append(lines, formatLetter(l, topOfIdents(ics)))
	}
	slices.Sort(lines)
	return lines
}

// handChainedTops is the job with today's calls, each stage's outputs
// through the manager: a map/reduce by key of the files counting
// identifiers, another of those counts keeping the top per letter, a Map
// formatting the lines. Its lines, sorted.
func handChainedTops(ctx context.Context, m *manager.Manager, files []string) ([]string, error) {
	counts, err := manager.ReduceByKey(ctx, m, fileIdents, sumCounts, files)
	if err != nil {
		return nil, fmt.Errorf("counts: %w", err)
	}
	kvs := make([]redmap.KV[string, int], 0, len(counts))
	for id, n := range counts {
		kvs = append(kvs, redmap.KV[string, int]{Key: id, Value: n})
	}
	tops, err := manager.ReduceByKey(ctx, m, identLetter, topIdents, kvs)
	if err != nil {
		return nil, fmt.Errorf("tops: %w", err)
	}
	letters := make([]redmap.KV[string, []identCount], 0, len(tops))
	for l, top := range tops {
		letters = append(letters, redmap.KV[string, []identCount]{Key: l, Value: top})
	}
	lines, err := manager.Map(ctx, m, letterLine, letters)
	if err != nil {
		return nil, fmt.Errorf("lines: %w", err)
	}
	slices.Sort(lines)
	return lines, nil
}

// topsPipeline is the job as a typed pipeline.
func topsPipeline(files []string) *manager.Pipeline[string] {
	idents := manager.FlatThen(manager.From(files), goIdents)
	counts := manager.ByKey(idents, identOne, sumCounts)
	tops := manager.ByKey(counts, identLetter, topIdents)
	return manager.Then(tops, letterLine)
}

// pipelineTops runs topsPipeline with Collect: its lines, sorted.
func pipelineTops(ctx context.Context, m *manager.Manager, files []string) ([]string, error) {
	lines, err := manager.Collect(ctx, m, topsPipeline(files))
	if err != nil {
		return nil, err
	}
	slices.Sort(lines)
	return lines, nil
}

// goCorpus reads the .go files of GOROOT/src: all of them if they hold
// at most limit bytes, else a sample of about limit bytes (files taken in
// the order of a hash of their path, the sample in path order). It
// returns the contents, and the bytes and files of the whole tree.
func goCorpus(limit int) (files []string, treeBytes, treeFiles int, err error) {
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return nil, 0, 0, fmt.Errorf("go env GOROOT: %w", err)
	}
	root := filepath.Join(strings.TrimSpace(string(out)), "src")
	type file struct {
		path string
		size int
		hash uint64
	}
	var all []file
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		h := fnv.New64a()
		h.Write([]byte(p[len(root):]))
		all = append(all, file{p, int(info.Size()), h.Sum64()})
		treeBytes += int(info.Size())
		return nil
	})
	if err != nil {
		return nil, 0, 0, err
	}
	if len(all) == 0 {
		return nil, 0, 0, fmt.Errorf("no .go file under %s", root)
	}
	pick := all
	if treeBytes > limit {
		byHash := slices.SortedFunc(slices.Values(all), func(a, b file) int { return cmp.Compare(a.hash, b.hash) })
		pick = nil
		total := 0
		for _, f := range byHash {
			if total+f.size > limit {
				continue
			}
			pick, total = append(pick, f), total+f.size
		}
		slices.SortFunc(pick, func(a, b file) int { return strings.Compare(a.path, b.path) })
	}
	for _, f := range pick {
		b, err := os.ReadFile(f.path)
		if err != nil {
			return nil, 0, 0, err
		}
		files = append(files, string(b))
	}
	return files, treeBytes, len(all), nil
}

// pipeline: the job of topsPipeline over the Go source tree, in the same
// run, interleaved: the plain sequential loop in this process; the same
// stages hand-chained with ReduceByKey, ReduceByKey and Map (every
// stage's outputs through the manager); the pipeline with Collect; and,
// to tell what its FlatThen step costs, the pipeline with the tokenizer
// in its first by-key step's emitter instead. Each redmap contender gets a
// fleet of its own, two worker processes of 2 slots (GOMAXPROCS 1 each),
// warmed up on 100 files; every contender's lines must equal the loop's.
// Reported besides the time: Redis's and the manager's peak memory above
// their start (the corpus, in this process's heap throughout, excluded),
// and the worker processes' peak RSS.
func pipeline(e *env) ([]row, error) {
	limit := e.pick(pipelineCap, 8<<20)
	files, treeBytes, treeFiles, err := goCorpus(limit)
	if err != nil {
		return nil, err
	}
	total := 0
	for _, f := range files {
		total += len(f)
	}
	corpus := fmt.Sprintf("%d .go files of GOROOT/src, %.1f MiB", len(files), float64(total)/(1<<20))
	if len(files) < treeFiles {
		corpus += fmt.Sprintf(" (a sample by path hash, capped at %d MiB, of the tree's %d files, %.1f MiB)", limit>>20, treeFiles, float64(treeBytes)/(1<<20))
	} else {
		corpus += " (the whole tree)"
	}
	ctx := context.Background()
	want := sequentialTops(files)
	noFlat := func(ctx context.Context, m *manager.Manager, files []string) ([]string, error) {
		counts := manager.ByKey(manager.From(files), fileIdents, sumCounts)
		lines, err := manager.Collect(ctx, m, manager.Then(manager.ByKey(counts, identLetter, topIdents), letterLine))
		slices.Sort(lines)
		return lines, err
	}
	var rows []row
	for _, c := range []struct {
		name string
		run  func(ctx context.Context, m *manager.Manager, files []string) ([]string, error) // nil: the loop
	}{
		{"sequential loop, bench process", nil},
		{"hand-chained: ReduceByKey, ReduceByKey, Map", handChainedTops},
		{"pipeline: Collect", pipelineTops},
		{"pipeline: Collect, no FlatThen (tokenizer in the first emitter)", noFlat},
	} {
		var m *manager.Manager
		stop := func() {}
		if c.run != nil {
			// A fleet of its own, stopped before the next contender's
			// starts: their CPU and RSS are this contender's alone.
			fm, _, fstop, err := e.fleet(2, 1, 2)
			if err != nil {
				return nil, err
			}
			m, stop = fm, sync.OnceFunc(fstop)
			defer stop()
			// Warm up: connections open, the manager learns the
			// functions' costs.
			if _, err := c.run(ctx, m, files[:min(len(files), 100)]); err != nil {
				return nil, fmt.Errorf("%s, warm-up: %w", c.name, err)
			}
		}
		var got []string
		bytes0 := e.netBytes()
		resetPeakRSS(e.children)
		live := peakLive()
		rmem := e.redisPeak() // sampled: Redis 7.0's CONFIG RESETSTAT does not reset used_memory_peak
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		heap0 := ms.HeapAlloc
		r, heap, err := e.measureHeap("pipeline", c.name, len(files), func() error {
			if c.run == nil {
				got = sequentialTops(files)
				return nil
			}
			var err error
			got, err = c.run(ctx, m, files)
			return err
		})
		rpeak := rmem()
		live0, livePeak := live()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.name, err)
		}
		if !slices.Equal(got, want) {
			return nil, fmt.Errorf("%s: its %d lines differ from the sequential loop's %d: %s", c.name, len(got), len(want), firstDiff(got, want))
		}
		r.bytes = e.netBytes() - bytes0
		r.redisPeak, r.heapPeak, r.livePeak = rpeak, int64(heap)-int64(heap0), livePeak-live0
		r.note = fmt.Sprintf("%s; %d lines, equal to the loop's; %.1f MB crossed Redis", corpus, len(got), float64(r.bytes)/1e6)
		if c.run != nil {
			r.workerRSS = peakRSS(e.children)
			r.note += "; 2 worker processes × 2 slots, GOMAXPROCS 1 each"
		}
		stop()
		rows = append(rows, r)
	}
	return rows, nil
}

// resetPeakRSS resets the peak RSS (VmHWM) of the live worker processes
// to their RSS now (Linux: clear_refs 5; elsewhere nothing).
func resetPeakRSS(c *children) {
	for pid := range c.cpu() {
		_ = os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
	}
}

// peakRSS returns the sum of the live worker processes' peak RSS
// (VmHWM), 0 where unknown.
func peakRSS(c *children) int64 {
	var total int64
	for pid := range c.cpu() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				total += kb << 10
			}
		}
	}
	return total
}

// pipelineCap is the pipeline scenario's cap on the corpus's bytes at
// full size.
const pipelineCap = 128 << 20

// firstDiff describes where two sorted line lists first differ.
func firstDiff(got, want []string) string {
	for i := range max(len(got), len(want)) {
		g, w := "(none)", "(none)"
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			return fmt.Sprintf("line %d is %.200q, want %.200q", i, g, w)
		}
	}
	return "same lines"
}

// peakLive samples the live heap (runtime/metrics /gc/heap/live:bytes:
// what the last GC found reachable) every 20 ms until stop, which returns
// it at the start and its largest sample. Unlike HeapAlloc, it leaves out
// the garbage that GOGC lets pile up beside a large live heap (the
// corpus), so it says what the manager holds, as of each GC.
func peakLive() (stop func() (start, peak int64)) {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	read := func() int64 {
		metrics.Read(sample)
		if sample[0].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return int64(sample[0].Value.Uint64())
	}
	runtime.GC()
	start := read()
	var peak atomic.Int64
	peak.Store(start)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			peak.Store(max(peak.Load(), read()))
		}
	}()
	return func() (int64, int64) {
		close(done)
		wg.Wait()
		return start, max(peak.Load(), read())
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// printPipeline prints, for the pipeline scenario's contenders, the wall
// time (median and spread over the runs) and the median peak memory of
// Redis and the manager above their start.
func printPipeline(rows []row) {
	var hand, pipe *row
	for i := range rows {
		r := &rows[i]
		if r.scenario != "pipeline" {
			continue
		}
		secs := func(rate float64) float64 { return float64(r.elements) / rate }
		spread := "-"
		if len(r.rates) > 1 {
			spread = fmt.Sprintf("%.2f–%.2f s", secs(slices.Max(r.rates)), secs(slices.Min(r.rates)))
		}
		rss := ""
		if r.workerRSS > 0 {
			rss = fmt.Sprintf("; workers' peak RSS %.0f MiB (sum of 2)", mib(r.workerRSS))
		}
		fmt.Printf("pipeline, %s: wall %.2f s (median; %s); Redis used_memory peak +%.1f MiB; manager heap peak +%.1f MiB, live heap peak +%.1f MiB%s (medians)\n",
			r.contender, secs(r.rate()), spread, mib(r.redisPeak), mib(r.heapPeak), mib(r.livePeak), rss)
		switch {
		case strings.HasPrefix(r.contender, "hand-chained"):
			hand = r
		case r.contender == "pipeline: Collect":
			pipe = r
		}
	}
	if hand != nil && pipe != nil {
		fmt.Printf("pipeline: Collect takes %.2fx the hand-chained time\n", hand.rate()/pipe.rate())
	}
}
