package main

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/manager"
)

// The manindex scenario's job, as a new user writes it: an index of every
// gzip man page on the machine, per word ([a-z]{3,}) how many files hold it
// and how often.

// wordStat is what the index holds of a word.
type wordStat struct {
	Files int64 `msgpack:"f"`
	Count int64 `msgpack:"c"`
}

var (
	// manWords emits, per distinct word of the man page at path, that it
	// holds the word and how often.
	manWords = redmap.Emit("manwords", func(_ context.Context, path string, emit func(string, wordStat)) error {
		counts, err := wordsOf(path)
		for w, n := range counts {
			emit(w, wordStat{Files: 1, Count: n})
		}
		return err
	})
	addStats = redmap.Reduce("addstats", func(_ context.Context, a, b wordStat) (wordStat, error) {
		return wordStat{Files: a.Files + b.Files, Count: a.Count + b.Count}, nil
	})
)

// wordsOf counts the words ([a-z]{3,}) of the gzip file at path.
func wordsOf(path string) (map[string]int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	text, err := io.ReadAll(bufio.NewReader(z))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	counts := make(map[string]int64)
	start := -1
	for i := 0; i <= len(text); i++ {
		if i < len(text) && text[i] >= 'a' && text[i] <= 'z' {
			if start < 0 {
				start = i
			}
			continue
		}
		if start >= 0 && i-start >= 3 {
			counts[string(text[start:i])]++
		}
		start = -1
	}
	return counts, nil
}

// manPages lists the gzip man pages under /usr/share/man, sorted, at most
// limit of them.
func manPages(limit int) ([]string, error) {
	var paths []string
	err := filepath.WalkDir("/usr/share/man", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // an unreadable folder: skip it
		}
		if d.Type().IsRegular() && strings.HasSuffix(p, ".gz") {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	if len(paths) == 0 {
		return nil, fmt.Errorf("no gzip man pages under /usr/share/man")
	}
	return paths[:min(limit, len(paths))], nil
}

// manIndexLoop is the sequential baseline: the same words, one file after
// another in one goroutine.
func manIndexLoop(paths []string) (map[string]wordStat, error) {
	index := make(map[string]wordStat)
	for _, p := range paths {
		counts, err := wordsOf(p)
		if err != nil {
			return nil, err
		}
		for w, n := range counts {
			s := index[w]
			index[w] = wordStat{Files: s.Files + 1, Count: s.Count + n}
		}
	}
	return index, nil
}

// redisPeak samples Redis's used_memory every 5 ms until stop, and
// returns the largest it saw above what it used at the start.
func (e *env) redisPeak() (stop func() int64) {
	used := func() int64 {
		info, err := e.rdb.Info(context.Background(), "memory").Result()
		if err != nil {
			return 0
		}
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		return 0
	}
	base := used()
	var peak atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			peak.Store(max(peak.Load(), used()-base))
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() int64 { close(done); wg.Wait(); return peak.Load() }
}

// manindex: the index of man pages, by the sequential loop and by
// ReduceByKey with default options and with chosen ChunkSizes, in the same
// run, two worker processes; each redmap contender on a manager of its
// own, so that the defaults start from nothing learnt, as a new program
// does. Each row's note gives its time against the loop's of the same
// run, Redis's peak above its start and the partials the map tasks stored.
func manindex(e *env) ([]row, error) {
	paths, err := manPages(e.pick(1<<30, 4000))
	if err != nil {
		return nil, err
	}
	_, queue, stop, err := e.fleet(2, 1, 0)
	if err != nil {
		return nil, err
	}
	defer stop()
	ctx := context.Background()
	var want map[string]wordStat
	var loop time.Duration
	var rows []row
	for _, c := range []struct {
		name  string
		chunk int // 0: defaults; -1: the loop
	}{
		{"sequential loop, one goroutine", -1},
		{"redmap ReduceByKey, defaults", 0},
		{"redmap ReduceByKey, ChunkSize(64)", 64},
		{"redmap ReduceByKey, ChunkSize(256)", 256},
		{"redmap ReduceByKey, ChunkSize(512)", 512},
		{"redmap ReduceByKey, ChunkSize(2048)", 2048},
	} {
		var m *manager.Manager
		if c.chunk >= 0 {
			if m, err = manager.New(e.rdb, manager.Options{Queue: queue}); err != nil {
				return nil, err
			}
		}
		peak := e.redisPeak()
		r, err := e.measure("manindex", c.name, len(paths), func() error {
			if m == nil {
				want, err = manIndexLoop(paths)
				return err
			}
			var opts []manager.CallOption
			if c.chunk > 0 {
				opts = append(opts, manager.ChunkSize(c.chunk))
			}
			got, err := manager.ReduceByKey(ctx, m, manWords, addStats, paths, opts...)
			if err == nil && !maps.Equal(got, want) {
				err = fmt.Errorf("%d words, the loop's %d: not the same index", len(got), len(want))
			}
			return err
		})
		redis := peak()
		if err != nil {
			if m != nil {
				m.Close()
			}
			return nil, fmt.Errorf("%s: %w", c.name, err)
		}
		if m == nil {
			loop = r.elapsed
			r.note = fmt.Sprintf("%d files, %d words, %.2f s", len(paths), len(want), r.elapsed.Seconds())
		} else {
			parts := m.Stats().PartialBytes
			m.Close()
			r.note = fmt.Sprintf("%.2f s, %.2f× the loop's time; Redis peak %.1f MiB above its start, partials stored %.1f MiB (%.2f×)",
				r.elapsed.Seconds(), r.elapsed.Seconds()/loop.Seconds(), float64(redis)/(1<<20), float64(parts)/(1<<20), float64(redis)/float64(max(parts, 1)))
		}
		fmt.Fprintf(os.Stderr, "manindex, %s: %s\n", c.name, r.note)
		rows = append(rows, r)
	}
	r, err := daskIndex(paths, want, loop)
	switch {
	case errors.Is(err, errNoDask):
		fmt.Fprintln(os.Stderr, "manindex: no Dask (python3 -c 'import dask.distributed' failed; Debian: apt-get install python3-distributed): its row left out")
	case err != nil:
		return nil, err
	default:
		fmt.Fprintf(os.Stderr, "manindex, %s: %s\n", r.contender, r.note)
		rows = append(rows, r)
	}
	return rows, nil
}

// errNoDask: Python's Dask is not installed.
var errNoDask = errors.New("no Dask")

// daskPartitions are the partition counts the Dask contender tries; its
// row is the fastest.
var daskPartitions = []int{4, 64, 512}

// daskIndex runs the same index in Dask (bench/dask/manindex.py: a bag's
// foldby on a LocalCluster of 2 processes, started before the clock, as
// the redmap workers are), once per partition count, checks each index
// against the loop's (its words, and the sums of files and counts), and
// returns the fastest run's row.
func daskIndex(paths []string, want map[string]wordStat, loop time.Duration) (row, error) {
	python := ""
	for _, p := range []string{"python3", "/usr/bin/python3"} { // a pyenv's python3 may shadow Debian's
		if exec.Command(p, "-c", "import dask.distributed").Run() == nil {
			python = p
			break
		}
	}
	if python == "" {
		return row{}, errNoDask
	}
	_, self, _, _ := runtime.Caller(0)
	args := []string{filepath.Join(filepath.Dir(self), "dask", "manindex.py")}
	for _, p := range daskPartitions {
		args = append(args, strconv.Itoa(p))
	}
	cmd := exec.Command(python, args...)
	cmd.Stdin = strings.NewReader(strings.Join(paths, "\n"))
	cmd.Stderr = io.Discard // the cluster's logs
	out, err := cmd.Output()
	if err != nil {
		return row{}, fmt.Errorf("dask: %w", err)
	}
	var files, count int64
	for _, s := range want {
		files, count = files+s.Files, count+s.Count
	}
	best := row{scenario: "manindex", elements: len(paths)}
	var tried []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r struct {
			Partitions          int
			Seconds             float64
			Words, Files, Count int64
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return row{}, fmt.Errorf("dask: %q: %w", line, err)
		}
		if r.Words != int64(len(want)) || r.Files != files || r.Count != count {
			return row{}, fmt.Errorf("dask, %d partitions: %d words, %d file uses, %d occurrences; the loop's %d, %d, %d: not the same index",
				r.Partitions, r.Words, r.Files, r.Count, len(want), files, count)
		}
		took := time.Duration(r.Seconds * float64(time.Second))
		tried = append(tried, fmt.Sprintf("%d: %.2f s", r.Partitions, r.Seconds))
		if best.elapsed == 0 || took < best.elapsed {
			best.elapsed = took
			best.contender = fmt.Sprintf("Dask bag foldby, LocalCluster of 2 processes, best of %v partitions", daskPartitions)
			best.note = fmt.Sprintf("%.2f s, %.2f× the loop's time, with %d partitions", r.Seconds, r.Seconds/loop.Seconds(), r.Partitions)
		}
	}
	if best.elapsed == 0 {
		return row{}, errors.New("dask: no run reported")
	}
	best.note += " (" + strings.Join(tried, ", ") + ")"
	return best, nil
}
