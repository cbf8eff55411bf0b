package inspect

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/keys"
)

// Cancelled is what Cancel did: one of its fields is set, by what its
// target named.
type Cancelled struct {
	// Batch is a running batch (neither durable nor a pipeline's) whose
	// manager, Manager, was asked to cancel it: it does at its next Poll,
	// its tasks withdrawn, its call ending with an error wrapping
	// redmap.ErrCancelled, its record in the history "cancelled".
	Batch   string `json:"batch,omitempty"`
	Manager string `json:"manager,omitempty"`
	// Pipeline is what cancelling a pipeline did (its name or the id of a
	// batch of it was the target).
	Pipeline *PipelineCancel `json:"pipeline,omitempty"`
	// Job is what cancelling a durable batch or job did (its name, or a
	// durable batch's id, was the target).
	Job *JobCancel `json:"job,omitempty"`
}

// Cancel ends what target names on queue, whatever it is, for an operator:
// redmap cancel and the dashboard's cancel call it. target is
//   - a pipeline's name, or the id of any batch of it, running or among
//     the history's last HistoryShown: the whole pipeline ends, every
//     stage (PipelineCancel says what was done);
//   - a running batch's id: its manager ends it at its next Poll, its
//     tasks withdrawn; its call returns an error wrapping
//     redmap.ErrCancelled, and the history records it "cancelled" with its
//     counts. A durable batch's id cancels it by its name (below);
//   - a durable batch's or job's name (manager.Durable): each of its
//     batches is marked cancelled and its tasks withdrawn, whoever holds it,
//     held or orphaned (JobCancel says what was done to each batch of the
//     job, and to a durable pipeline none holds); what ran of it, tallied from its
//     results, is recorded in the history and the ended totals, as its
//     manager's own end records it. One none holds that has ended is left
//     alone (its JobCancel says "ended") unless discard.
//
// A target Redis has nothing of is an error. A few round trips (reads of
// the running batches and the history, then the cancel's).
func (i *Inspector) Cancel(ctx context.Context, queue, target string, discard bool) (Cancelled, error) {
	var out Cancelled
	if err := keys.CheckQueue(queue); err != nil {
		return out, err
	}
	all, err := i.known(ctx, queue)
	if err != nil {
		return out, err
	}
	if p := pipelineNamed(target, all); p != "" {
		pc, err := i.cancelPipeline(ctx, queue, p, all)
		out.Pipeline = &pc
		return out, err
	}
	name := target
	if j := slices.IndexFunc(all, func(b Batch) bool { return b.ID == target }); j >= 0 { // the running first
		switch b := all[j]; {
		case b.Durable != "":
			name = b.Durable // cancelled by its name, whoever holds it
		case b.Outcome == "running" && !id.IsDurable(b.Manager):
			out.Batch, out.Manager = b.ID, b.Manager
			return out, i.admin.CancelBatch(ctx, &broker.CancelBatchParams{Queue: queue, Manager: b.Manager, Batch: b.ID})
		}
	}
	if keys.CheckDurable(name) == nil {
		jc, err := i.cancelJob(ctx, queue, name, discard)
		if err != nil || len(jc.Batches) > 0 || jc.PartitionKeys > 0 || jc.Pipeline != nil {
			out.Job = &jc
			return out, err
		}
	}
	return out, fmt.Errorf("inspect: queue %q has no running batch, pipeline, or durable batch or job %q", queue, target)
}

// known returns queue's running batches, then the history's last
// HistoryShown: what a target of Cancel may name.
func (i *Inspector) known(ctx context.Context, queue string) ([]Batch, error) {
	running, err := i.Batches(ctx, queue)
	if err != nil {
		return nil, err
	}
	ended, _, err := i.History(ctx, queue, HistoryShown)
	if err != nil {
		return nil, err
	}
	return append(running, ended...), nil
}

// JobCancel is what Cancel did to a durable batch or job.
type JobCancel struct {
	// Batches are the durable batches of the job, by name (the job's own,
	// or a phase's: "<name>/map", "<name>/reduce@0"), and what was done to
	// each: "asked" its holder (and withdrew its tasks), "cancelled",
	// "already" (it was cancelled before, and none holds it), or "ended"
	// (none holds it and every task has ended: its results wait for the
	// call that takes it over, and nothing is done unless Cancel's
	// discard).
	Batches map[string]string `json:"batches"`
	// PartitionKeys counts the keys of a map/reduce by key's partitions
	// deleted, or of a durable pipeline's.
	PartitionKeys int64 `json:"partition_keys"`
	// Pipeline is set when name is a durable pipeline that no manager
	// holds (its manager died): what was deleted of it.
	Pipeline *PipelineDeleted `json:"pipeline,omitempty"`
}

// PipelineDeleted is what Cancel deleted of a durable pipeline none
// held: the same call again runs it from its start.
type PipelineDeleted struct {
	// Record says its record (what its ended phases gave) was deleted.
	Record bool `json:"record"`
	// Deleted are its claim ("<name>/pipeline") and its phases' durable
	// batches whose keys were deleted; Held those left because a manager
	// holds them (they are cancelled, and the call that takes one over
	// fails its elements with ErrCancelled).
	Deleted []string `json:"deleted,omitempty"`
	Held    []string `json:"held,omitempty"`
}

// cancelJob is Cancel of durable batch or job name.
func (i *Inspector) cancelJob(ctx context.Context, queue, name string, discard bool) (JobCancel, error) {
	out := JobCancel{Batches: make(map[string]string)}
	if err := keys.CheckDurable(name); err != nil {
		return out, err
	}
	names, err := i.admin.DurableNames(ctx, &broker.QueueParams{Queue: queue})
	if err != nil {
		return out, err
	}
	owners := map[string]string{id.Durable(name): name} // the name itself, even if its entry expired
	for o, n := range names {
		if n == name || strings.HasPrefix(n, name+"/") {
			owners[o] = n
		}
	}
	claim := id.Durable(name + "/pipeline")
	dp, err := i.admin.DropPipeline(ctx, &broker.DropPipelineParams{Queue: queue, Name: name})
	if dp == nil {
		return out, err
	}
	if _, listed := owners[claim]; !dp.Held && (dp.Record || listed) {
		return i.cancelOrphanPipeline(ctx, queue, name, owners, dp, err)
	}
	if err != nil {
		return out, err
	}
	// The job has ended only if every batch of it has: a phase still
	// running cancels them all, the ended ones' results with them.
	ended := 0
	// A pipeline's phases first, its claim last: the claim's cancel has
	// its manager end the pipeline, and the phases' records name what
	// they ran from the progress it then deletes.
	for _, o := range claimLast(owners, claim) {
		n := owners[o]
		did, err := i.admin.CancelOwner(ctx, &broker.CancelOwnerParams{Queue: queue, Owner: o, Reason: "cancelled by an operator", Discard: discard})
		if err != nil {
			return out, err
		}
		if did == "unknown" {
			continue
		}
		out.Batches[n] = did
		if did == "ended" {
			ended++
		}
	}
	if ended > 0 && ended < len(out.Batches) {
		for o, n := range owners {
			if out.Batches[n] != "ended" {
				continue
			}
			if out.Batches[n], err = i.admin.CancelOwner(ctx, &broker.CancelOwnerParams{Queue: queue, Owner: o, Reason: "cancelled by an operator", Discard: true}); err != nil {
				return out, err
			}
		}
		ended = 0
	}
	if ended > 0 {
		return out, nil // nothing done: the results wait
	}
	out.PartitionKeys, err = i.admin.DropShuffle(ctx, &broker.DropShuffleParams{Queue: queue, Job: id.DurableJob(name)})
	return out, err
}

// cancelOrphanPipeline is Cancel of a durable pipeline none holds,
// whose record DropPipeline deleted (dp; dropErr if it could not delete
// all it named): its phases' batches among owners are cancelled, their
// results discarded (the record that said what to do with them is gone),
// then their keys and those of the pipeline's claim are deleted, the
// claim's last, so that a cancel that fails half-way and is made again
// finds the pipeline by its claim's entry and goes on.
func (i *Inspector) cancelOrphanPipeline(ctx context.Context, queue, name string, owners map[string]string, dp *broker.DropPipelineResult, dropErr error) (JobCancel, error) {
	claim := id.Durable(name + "/pipeline")
	out := JobCancel{Batches: make(map[string]string), PartitionKeys: dp.PartitionKeys, Pipeline: &PipelineDeleted{Record: dp.Record}}
	phases := slices.Sorted(maps.Keys(owners))
	phases = slices.DeleteFunc(phases, func(o string) bool { return o == claim })
	for _, o := range phases {
		did, err := i.admin.CancelOwner(ctx, &broker.CancelOwnerParams{Queue: queue, Owner: o, Reason: "cancelled by an operator", Discard: true})
		if err != nil {
			return out, err
		}
		if did != "unknown" {
			out.Batches[owners[o]] = did
		}
	}
	for _, o := range append(phases, claim) {
		n := owners[o]
		if o == claim {
			n = name + "/pipeline"
		} else if _, ok := out.Batches[n]; !ok {
			continue // Redis had nothing of it
		}
		forgot, err := i.admin.ForgetOwner(ctx, &broker.CancelOwnerParams{Queue: queue, Owner: o})
		if err != nil {
			return out, err
		}
		if forgot {
			out.Pipeline.Deleted = append(out.Pipeline.Deleted, n)
		} else {
			out.Pipeline.Held = append(out.Pipeline.Held, n)
		}
	}
	if dropErr != nil {
		return out, fmt.Errorf("inspect: %w", dropErr)
	}
	return out, nil
}

// PipelineCancel is what Cancel did to a pipeline.
type PipelineCancel struct {
	// Pipeline is the pipeline's name (codec.CallInfo's Pipeline), found
	// from the name or batch id it was asked to cancel.
	Pipeline string `json:"pipeline"`
	// Managers are the managers asked to cancel it, each at its next
	// Poll: every running batch of it, and any stage still to come.
	Managers []string `json:"managers,omitempty"`
	// Running are its batches that were running when it was cancelled.
	Running []string `json:"running,omitempty"`
	// Durable is what cancelling a durable pipeline did (Cancel of its
	// name); nil for another.
	Durable *JobCancel `json:"durable,omitempty"`
}

// pipelineNamed returns the pipeline that target names among batches all (its
// name, or the id of a batch of it), or "".
func pipelineNamed(target string, all []Batch) string {
	for _, b := range all {
		if b.Call.Pipeline != "" && (b.Call.Pipeline == target || b.ID == target) {
			return b.Call.Pipeline
		}
	}
	return ""
}

// cancelPipeline is Cancel of pipeline name, whose batches are among all.
// Each manager that ran a batch of it and still publishes its progress is
// asked to cancel the whole pipeline, which it does at its next Poll: its
// running batch ends, its tasks withdrawn; no later stage is submitted;
// and the call (Collect, Stream, Fold) returns an error wrapping
// redmap.ErrCancelled. A durable pipeline's batches are cancelled as
// cancelJob does its name, whoever holds them; so is its claim
// (<name>/pipeline), which asks the manager running it, between two
// phases too, and which then deletes what it keeps in Redis.
func (i *Inspector) cancelPipeline(ctx context.Context, queue, name string, all []Batch) (PipelineCancel, error) {
	out := PipelineCancel{Pipeline: name}
	durable := false
	mids := make(map[string]bool)
	for _, b := range all {
		if b.Call.Pipeline != out.Pipeline {
			continue
		}
		if b.Outcome == "running" && b.Call.Stage != "" { // not the pipeline's own row, nor a phase none published yet
			out.Running = append(out.Running, b.ID)
		}
		if b.Durable != "" || id.IsDurable(b.Manager) {
			durable = true
			continue
		}
		mids[b.Manager] = true
	}
	if durable {
		jc, err := i.cancelJob(ctx, queue, out.Pipeline, false)
		out.Durable = &jc
		if err != nil {
			return out, err
		}
	}
	// Each manager is asked, not only those with a batch running: between
	// two stages none runs, and the ask still stops the next.
	var lastErr error
	for _, mid := range slices.Sorted(func(yield func(string) bool) {
		for m := range mids {
			if !yield(m) {
				return
			}
		}
	}) {
		if err := i.admin.CancelBatch(ctx, &broker.CancelBatchParams{Queue: queue, Manager: mid, Batch: wire.PipelineCancel(out.Pipeline)}); err != nil {
			lastErr = err
			continue
		}
		out.Managers = append(out.Managers, mid)
	}
	if len(out.Managers) == 0 && lastErr != nil && len(out.Running) > 0 {
		return out, fmt.Errorf("inspect: pipeline %q of queue %q: %w", out.Pipeline, queue, lastErr)
	}
	return out, nil
}

// claimLast returns the owners of a job, sorted, with its pipeline's
// claim last.
func claimLast(owners map[string]string, claim string) []string {
	out := slices.Sorted(maps.Keys(owners))
	if i := slices.Index(out, claim); i >= 0 {
		out = append(slices.Delete(out, i, i+1), claim)
	}
	return out
}
