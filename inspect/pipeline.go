package inspect

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Pipeline is a pipeline (manager.From) as its batches show it: one job,
// named by what its batches say they are a phase of (codec.CallInfo's
// Pipeline: its durable name, or its job id), and its stages, in the order
// of its steps.
type Pipeline struct {
	Queue string `json:"queue"`
	Name  string `json:"name"`
	// Durable is set for a durable pipeline (manager.Durable): its
	// batches are durable batches named after it.
	Durable bool `json:"durable,omitempty"`
	// Outcome is "running" while a batch of it runs; once none does, how
	// its last batch ended ("done", "failed", "cancelled", ...).
	Outcome string `json:"outcome"`
	// Label is what its call said of it (manager.Label).
	Label string `json:"label,omitempty"`
	// Manager and Batch name a running batch of it: the cancel of that
	// batch (CancelBatch, the dashboard's) cancels the whole pipeline.
	Manager string    `json:"manager,omitempty"`
	Batch   string    `json:"batch,omitempty"`
	Stages  []Stage   `json:"stages"`
	Started time.Time `json:"started,omitzero"`
	Ended   time.Time `json:"ended,omitzero"` // zero while running
}

// Stage is the batches of one stage of a pipeline (codec.CallInfo's Stage:
// "1-3 map" runs steps 1 to 3, the third a by-key step's map side; "3-5
// reduce" its reduce side, then steps 4 and 5): its first batch, and any
// run again after Redis lost what they stored.
type Stage struct {
	Stage   string `json:"stage"`
	Func    string `json:"func"`
	Batches int    `json:"batches"`
	// Total, Done and Failed add up its batches' elements; Running are
	// those of its running batches without an outcome yet.
	Total   int `json:"total"`
	Done    int `json:"done"`
	Failed  int `json:"failed"`
	Running int `json:"running"`
	// Rate is elements ended a second: its running batches' recent rates
	// added up, or once none runs, over the time from its first batch's
	// start to its last one's end.
	Rate    float64   `json:"rate"`
	Outcome string    `json:"outcome"` // as Pipeline.Outcome, of its batches
	Started time.Time `json:"started,omitzero"`
	Ended   time.Time `json:"ended,omitzero"`
}

// Pipelines groups the batches of bs that are a phase of a pipeline by
// queue and pipeline, and returns them, the running ones first, then by
// start; rest are the batches of bs that are not. bs may hold running
// batches (Batches) and ended ones (History); a batch in both counts once,
// as running.
func Pipelines(bs []Batch) (ps []Pipeline, rest []Batch) {
	type key struct{ queue, name string }
	groups := make(map[key][]Batch)
	var order []key
	seen := make(map[string]bool)
	for _, b := range bs {
		if b.Call.Pipeline == "" {
			rest = append(rest, b)
			continue
		}
		if seen[b.Queue+"\x00"+b.ID] {
			continue
		}
		seen[b.Queue+"\x00"+b.ID] = true
		k := key{b.Queue, b.Call.Pipeline}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], b)
	}
	for _, k := range order {
		ps = append(ps, pipelineOf(k.queue, k.name, groups[k]))
	}
	slices.SortStableFunc(ps, func(a, b Pipeline) int {
		if ar, br := a.Outcome == "running", b.Outcome == "running"; ar != br {
			if ar {
				return -1
			}
			return 1
		}
		return a.Started.Compare(b.Started)
	})
	return ps, rest
}

// pipelineOf is pipeline name of queue from its batches bs.
func pipelineOf(queue, name string, bs []Batch) Pipeline {
	p := Pipeline{Queue: queue, Name: name}
	stages := make(map[string]*Stage)
	var lastEnd time.Time
	running := false
	for _, b := range bs {
		p.Durable = p.Durable || b.Durable != ""
		p.Label = cmp.Or(p.Label, b.Call.Label)
		if p.Started.IsZero() || !b.Started.IsZero() && b.Started.Before(p.Started) {
			p.Started = b.Started
		}
		s := stages[b.Call.Stage]
		if s == nil {
			s = &Stage{Stage: b.Call.Stage, Func: b.Func}
			stages[b.Call.Stage] = s
		}
		s.Batches++
		s.Total += b.Total
		s.Done += b.Done
		s.Failed += b.Failed
		if s.Started.IsZero() || !b.Started.IsZero() && b.Started.Before(s.Started) {
			s.Started = b.Started
		}
		if b.Outcome == "running" {
			running, p.Manager, p.Batch = true, b.Manager, b.ID
			s.Running += max(b.Total-b.Done-b.Failed, 0)
			s.Rate += b.Rate
			s.Outcome = "running"
			continue
		}
		if b.Ended.After(s.Ended) {
			s.Ended = b.Ended
			if s.Outcome != "running" {
				s.Outcome = b.Outcome
			}
		}
		if b.Ended.After(lastEnd) {
			lastEnd, p.Outcome = b.Ended, b.Outcome
		}
	}
	for _, s := range stages {
		if s.Outcome != "running" {
			s.Rate = 0
			if d := s.Ended.Sub(s.Started).Seconds(); d > 0 {
				s.Rate = float64(s.Done+s.Failed) / d
			}
		} else {
			s.Ended = time.Time{}
		}
		p.Stages = append(p.Stages, *s)
	}
	slices.SortFunc(p.Stages, func(a, b Stage) int { return compareStages(a.Stage, b.Stage) })
	if running {
		p.Outcome = "running"
	} else {
		p.Ended = lastEnd
	}
	return p
}

// compareStages orders stages by their first step, a map side before the
// reduce side of the same step.
func compareStages(a, b string) int {
	first := func(s string) (int, int) {
		steps, side, _ := strings.Cut(s, " ")
		from, _, _ := strings.Cut(steps, "-")
		n, _ := strconv.Atoi(from)
		if side == "reduce" {
			return n, 1
		}
		return n, 0
	}
	an, as := first(a)
	bn, bs := first(b)
	return cmp.Or(cmp.Compare(an, bn), cmp.Compare(as, bs), strings.Compare(a, b))
}
