package manager

import (
	"context"
	"maps"
	"slices"
	"sync"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
)

// stagesStore is a historyStore that keeps pipelines' stage counts for
// operators (keys.Stages) and can be given them back: Redis's; a store
// without it (a test's) has none to lose.
type stagesStore interface {
	RestoreStages(ctx context.Context, p *broker.RestoreStagesParams) error
}

// stageBook is what a manager knows of the stage counts of the pipelines
// it runs: the records of their batches it wrote into the history, by
// pipeline and batch id (a batch recorded again counts once, with its last
// record), counted as the history counts them (wire.StageCounts.Add). A
// record enters it once written, so that the counts it gives are never
// above Redis's while Redis keeps its data: restore then writes nothing,
// and, after a loss, writes back no batch twice. A pipeline leaves it when
// its run ends (forget).
type stageBook struct {
	mu    sync.Mutex
	pipes map[string]map[string]wire.BatchRecord
}

func newStageBook() *stageBook {
	return &stageBook{pipes: make(map[string]map[string]wire.BatchRecord)}
}

// add keeps the records of recs that are of a pipeline's stage, as written.
func (s *stageBook) add(recs []wire.BatchRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range recs {
		p := r.Call.Pipeline
		if p == "" || r.Call.Stage == "" {
			continue
		}
		if s.pipes[p] == nil {
			s.pipes[p] = make(map[string]wire.BatchRecord)
		}
		r.FailedBy = nil // not counted
		s.pipes[p][r.ID] = r
	}
}

// forget drops pipeline p: its run ended, and its manager holds it no more.
func (s *stageBook) forget(p string) {
	s.mu.Lock()
	delete(s.pipes, p)
	s.mu.Unlock()
}

// counts returns each pipeline's stage counts, by pipeline.
func (s *stageBook) counts() map[string][]wire.StageCounts {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]wire.StageCounts, len(s.pipes))
	for p, recs := range s.pipes {
		byStage := make(map[string]*wire.StageCounts)
		for _, id := range slices.Sorted(maps.Keys(recs)) {
			r := recs[id]
			c := byStage[r.Call.Stage]
			if c == nil {
				c = &wire.StageCounts{Stage: r.Call.Stage}
				byStage[r.Call.Stage] = c
			}
			c.Add(&r)
		}
		for _, st := range slices.Sorted(maps.Keys(byStage)) {
			out[p] = append(out[p], *byStage[st])
		}
	}
	return out
}

// restore puts back into store what Redis lost of the stage counts of
// the pipelines s holds (stages.lua: a count is raised to the book's,
// never lowered), and returns the first error. A script call a pipeline.
func (s *stageBook) restore(ctx context.Context, st stagesStore) error {
	var first error
	for p, cs := range s.counts() {
		if err := st.RestoreStages(ctx, &broker.RestoreStagesParams{Pipeline: p, Stages: cs}); err != nil && first == nil {
			first = err
		}
	}
	return first
}
