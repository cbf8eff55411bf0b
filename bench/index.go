package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/manager"
)

// index: an index of the man pages (per word, how many files hold it and
// how often), with ReduceByKey on two worker processes, durable
// (manager.Durable) and not, in turns: what a durable batch costs. Each
// way runs with the chunk size redmap picks, and with one fixed chunk size
// for both (the durable default's, 1/4,096 of the input), which separates
// what durability costs from what its chunks cost. Every run's index must
// be the same.
func index(e *env) ([]row, error) {
	paths, err := manPages(e.pick(1<<30, 5_000))
	if err != nil {
		return nil, err
	}
	m, stop, err := e.processFleet(2)
	if err != nil {
		return nil, err
	}
	defer stop()
	ctx := context.Background()
	chunk := (len(paths) + 4095) / 4096
	var want map[string]wordStat
	var rows []row
	for _, c := range []struct {
		name string
		opts []manager.CallOption
	}{
		{"redmap ReduceByKey", nil},
		{"redmap ReduceByKey, Durable", []manager.CallOption{manager.Durable("")}},
		{fmt.Sprintf("redmap ReduceByKey, ChunkSize(%d)", chunk), []manager.CallOption{manager.ChunkSize(chunk)}},
		{fmt.Sprintf("redmap ReduceByKey, ChunkSize(%d), Durable", chunk), []manager.CallOption{manager.ChunkSize(chunk), manager.Durable("")}},
	} {
		opts := slices.Clone(c.opts)
		if strings.HasSuffix(c.name, "Durable") {
			opts[len(opts)-1] = manager.Durable("bench-index-" + id.New()[:8]) // a new batch each run
		}
		st0 := m.Stats()
		var got map[string]wordStat
		r, err := e.measure("index", c.name, len(paths), func() error {
			var err error
			got, err = manager.ReduceByKey(ctx, m, manWords, addStats, paths, opts...)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.name, err)
		}
		if want == nil {
			want = got
		} else if err := sameIndex(got, want); err != nil {
			return nil, fmt.Errorf("%s: %w", c.name, err)
		}
		st := m.Stats()
		r.note = fmt.Sprintf("%d files, %d words; Stats: %d elements, %.1f MiB of results, %.1f MiB of partials",
			len(paths), len(got), st.Elements-st0.Elements, float64(st.ResultBytes-st0.ResultBytes)/(1<<20),
			float64(st.PartialBytes-st0.PartialBytes)/(1<<20))
		fmt.Fprintf(os.Stderr, "  %s: %v\n", c.name, r.elapsed.Round(time.Millisecond))
		rows = append(rows, r)
	}
	return rows, nil
}

// sameIndex says how two indexes differ, if they do.
func sameIndex(got, want map[string]wordStat) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d words, want %d", len(got), len(want))
	}
	for w, u := range want {
		if got[w] != u {
			return fmt.Errorf("word %q: %+v, want %+v", w, got[w], u)
		}
	}
	return nil
}
