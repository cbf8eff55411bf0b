package inspect

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
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
	// Outcome is "running" while a batch of it runs; "orphaned" while a
	// durable one's manager is gone (no manager holds it: it waits for the
	// same call to take it over), "cancelled" while an operator's cancel of
	// one none holds is under way; once none of its batches is listed, how
	// its last batch ended ("done", "failed", "cancelled", ...).
	Outcome string `json:"outcome"`
	// Waiting says why an orphaned or cancelled pipeline does not advance,
	// and that its stages' counts are the last its manager published.
	Waiting string `json:"waiting,omitempty"`
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
// reduce" its reduce side, then steps 4 and 5): those that ended, as the
// history counted them when it recorded each (every one, however many
// records it keeps now), and those listed now.
type Stage struct {
	Stage string `json:"stage"`
	Func  string `json:"func"`
	// Batches ran its elements; Reruns ran some of them again (a
	// partition's producers, after Redis lost what they stored), and are
	// counted nowhere else.
	Batches int `json:"batches"`
	Reruns  int `json:"reruns,omitempty"`
	// Unit is what Total, Done, Failed and Running count: "elements" (a
	// map stage's: the pipeline's elements that reached it) or
	// "partitions" (a reduce stage's: one a reduce task, a failed one
	// being one whose reduce failed whole).
	Unit string `json:"unit"`
	// Total, Done and Failed add up its batches' elements; Running are
	// those of its running batches without an outcome yet. An orphaned
	// batch's are as its manager last published them.
	Total   int `json:"total"`
	Done    int `json:"done"`
	Failed  int `json:"failed"`
	Running int `json:"running"`
	// FailedKeys are, in a reduce stage, the keys that failed in the
	// steps after its fold: counted apart, not in Failed, as a partition
	// whose keys failed in part is done.
	FailedKeys int `json:"failed_keys,omitempty"`
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
// start; rest are the batches of bs that are not. bs may hold listed
// batches (Batches) and ended ones (History); a batch in both counts once,
// as listed. A stage's counts add up the batches of it among bs:
// Inspector.Pipelines counts every batch of it that ended instead.
func Pipelines(bs []Batch) (ps []Pipeline, rest []Batch) {
	return pipelines(bs, nil)
}

// Pipelines is the package's Pipelines with each stage counted over all
// its batches that ended, as the queue's history counted them when it
// recorded each (keys.Stages), and its batches listed now: what it shows
// of a pipeline does not depend on how many of its batches bs holds, only
// one is enough. A round trip for each queue of the pipelines.
func (i *Inspector) Pipelines(ctx context.Context, bs []Batch) (ps []Pipeline, rest []Batch, err error) {
	names := make(map[string][]string)
	for _, b := range bs {
		if p := b.Call.Pipeline; p != "" && !slices.Contains(names[b.Queue], p) {
			names[b.Queue] = append(names[b.Queue], p)
		}
	}
	counts := make(map[pipeKey][]wire.StageCounts)
	for _, q := range slices.Sorted(maps.Keys(names)) {
		got, err := i.admin.Stages(ctx, &broker.StagesParams{Queue: q, Pipelines: names[q]})
		if err != nil {
			return nil, nil, err
		}
		for _, p := range names[q] {
			if len(got[p]) > 0 { // none: no batch of it ended yet, or an older build's
				counts[pipeKey{q, p}] = got[p]
			}
		}
	}
	ps, rest = pipelines(bs, counts)
	return ps, rest, nil
}

type pipeKey struct{ queue, name string }

// pipelines is Pipelines; with counts (each pipeline's ended stages), the
// ended batches of bs count only to find a pipeline and its label.
func pipelines(bs []Batch, counts map[pipeKey][]wire.StageCounts) (ps []Pipeline, rest []Batch) {
	groups := make(map[pipeKey][]Batch)
	var order []pipeKey
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
		k := pipeKey{b.Queue, b.Call.Pipeline}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], b)
	}
	for _, k := range order {
		ended, counted := counts[k]
		ps = append(ps, pipelineOf(k.queue, k.name, groups[k], ended, counted))
	}
	slices.SortStableFunc(ps, func(a, b Pipeline) int {
		if ar, br := a.Ended.IsZero(), b.Ended.IsZero(); ar != br {
			if ar {
				return -1
			}
			return 1
		}
		return a.Started.Compare(b.Started)
	})
	return ps, rest
}

// liveRank orders the states of a listed batch: the one a stage or a
// pipeline shows is its batches' highest.
var liveRank = map[string]int{"done": 1, "cancelled": 2, "orphaned": 3, "running": 4}

// pipelineOf is pipeline name of queue from its batches bs and, if counted,
// the counts of its ended stages (the ended batches of bs then count for
// nothing else).
func pipelineOf(queue, name string, bs []Batch, ended []wire.StageCounts, counted bool) Pipeline {
	p := Pipeline{Queue: queue, Name: name}
	stages := make(map[string]*Stage)
	stageOf := func(name, fn string) *Stage {
		s := stages[name]
		if s == nil {
			s = &Stage{Stage: name, Func: fn, Unit: unitOf(name)}
			stages[name] = s
		}
		return s
	}
	early := func(t *time.Time, at time.Time) {
		if !at.IsZero() && (t.IsZero() || at.Before(*t)) {
			*t = at
		}
	}
	var lastEnd time.Time
	endedAt := func(s *Stage, outcome string, at time.Time) {
		if !at.Before(s.Ended) {
			s.Ended, s.Outcome = at, outcome
		}
		if !at.Before(lastEnd) {
			lastEnd, p.Outcome = at, outcome
		}
	}
	for _, c := range ended {
		s := stageOf(c.Stage, c.Func)
		s.Batches, s.Reruns = c.Batches, c.Reruns
		s.Total, s.Done, s.Failed, s.FailedKeys = c.Total, succeeded(c.Done, c.Failed), c.Failed, c.FailedKeys
		if c.Started > 0 {
			early(&s.Started, time.UnixMilli(c.Started))
		}
		endedAt(s, c.Outcome, time.UnixMilli(c.Ended))
	}
	live := ""     // the highest state of its listed batches
	liveBy := ""   // why it waits, as its batch of that state says
	var own *Batch // a durable pipeline's own row (its claim)
	liveStage := make(map[string]string)
	for _, b := range bs {
		p.Durable = p.Durable || b.Durable != ""
		p.Label = cmp.Or(p.Label, b.Call.Label)
		early(&p.Started, b.Started)
		listed := b.Ended.IsZero()
		if listed && b.Call.Stage == "" {
			own = &b
			continue
		}
		if !listed && counted {
			continue // counted in ended
		}
		s := stageOf(b.Call.Stage, b.Func)
		s.Func = cmp.Or(b.Func, s.Func)
		early(&s.Started, b.Started)
		if b.Call.Rerun {
			s.Reruns++
		} else {
			s.Batches++
			s.Total += b.Total
			s.Done += b.Done
			s.Failed += b.Failed
			s.FailedKeys += b.FailedKeys
		}
		if !listed {
			endedAt(s, b.Outcome, b.Ended)
			continue
		}
		if b.Outcome == "running" {
			p.Manager, p.Batch = b.Manager, b.ID
			if !b.Call.Rerun {
				s.Running += max(b.Total-b.Done-b.Failed, 0)
			}
			s.Rate += b.Rate
		}
		if liveRank[b.Outcome] > liveRank[liveStage[s.Stage]] {
			liveStage[s.Stage] = b.Outcome
		}
		if liveRank[b.Outcome] > liveRank[live] {
			live, liveBy = b.Outcome, b.Waiting
		}
	}
	if own != nil {
		p.Durable = true
		if liveRank[own.Outcome] >= liveRank[live] {
			live, liveBy = own.Outcome, own.Waiting
		}
	}
	for _, s := range stages {
		if o, ok := liveStage[s.Stage]; ok {
			s.Outcome, s.Ended = o, time.Time{}
		}
		if s.Outcome != "running" {
			s.Rate = 0
			if d := s.Ended.Sub(s.Started).Seconds(); d > 0 {
				s.Rate = float64(s.Done+s.Failed) / d
			}
		}
		p.Stages = append(p.Stages, *s)
	}
	slices.SortFunc(p.Stages, func(a, b Stage) int { return compareStages(a.Stage, b.Stage) })
	switch live {
	case "":
		p.Ended = lastEnd
	case "running":
		p.Outcome = "running"
	case "cancelled":
		p.Outcome, p.Waiting = "cancelled", liveBy
	default:
		// A phase with every result in Redis, none holding it: the
		// pipeline waits for the call that takes it over all the same.
		p.Outcome = "orphaned"
		p.Waiting = "no manager holds it: its stages' counts are as its manager last published them; the same call takes it over"
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

// unitOf is what the counts of stage (codec.CallInfo's Stage) count: a
// reduce side's batches run a task a partition, a map side's the
// pipeline's elements.
func unitOf(stage string) string {
	if strings.HasSuffix(stage, " reduce") {
		return "partitions"
	}
	return "elements"
}

// ownFuncs sets Func of each durable pipeline's own row among bs (its
// claim: Call.Pipeline, no Call.Stage), which runs no function itself, to
// what runs of it, as redmap batches shows its stages: the functions of
// its stages' batches among bs, in the order of its steps; if none is
// listed (between two phases, say), those of its stages that ended
// (keys.Stages). A round trip if any pipeline has none listed.
func (i *Inspector) ownFuncs(ctx context.Context, queue string, bs []Batch) error {
	funcs := make(map[string][]Stage) // pipeline -> its stages listed
	var own []int
	for j, b := range bs {
		switch {
		case b.Call.Pipeline == "":
		case b.Call.Stage == "":
			own = append(own, j)
		case b.Func != "":
			funcs[b.Call.Pipeline] = append(funcs[b.Call.Pipeline], Stage{Stage: b.Call.Stage, Func: b.Func})
		}
	}
	var unlisted []string
	for _, j := range own {
		if p := bs[j].Call.Pipeline; len(funcs[p]) == 0 && !slices.Contains(unlisted, p) {
			unlisted = append(unlisted, p)
		}
	}
	if len(unlisted) > 0 {
		got, err := i.admin.Stages(ctx, &broker.StagesParams{Queue: queue, Pipelines: unlisted})
		if err != nil {
			return err
		}
		for _, p := range unlisted {
			for _, c := range got[p] {
				funcs[p] = append(funcs[p], Stage{Stage: c.Stage, Func: c.Func})
			}
		}
	}
	for _, j := range own {
		ss := funcs[bs[j].Call.Pipeline]
		slices.SortFunc(ss, func(a, b Stage) int { return compareStages(a.Stage, b.Stage) })
		var names []string
		for _, s := range ss {
			if s.Func != "" && !slices.Contains(names, s.Func) {
				names = append(names, s.Func)
			}
		}
		bs[j].Func = cmp.Or(bs[j].Func, strings.Join(names, ","))
	}
	return nil
}
