package inspect

import (
	"context"

	"github.com/redmap/redmap/internal/broker"
)

// FailedElement is one failed element of an ended batch.
type FailedElement struct {
	Index    int    `json:"index"`            // in the batch's input
	Kind     string `json:"kind"`             // "error", "panic", "lost", "timeout", "no worker", ...
	Error    string `json:"error"`            // its message (at most 512 bytes)
	Attempts int    `json:"attempts"`         // the runs its failure came from: the failed attempt + 1
	Worker   string `json:"worker,omitempty"` // the worker whose attempt failed; "" on the manager's side
	// Stage and Key are set for an element of a pipeline that failed in
	// a step: the step's number, and past a by-key step the key it came
	// from (Index is then -1). Index is in the pipeline's input.
	Stage int    `json:"stage,omitempty"`
	Key   string `json:"key,omitempty"`
}

// FailedElements are the failed elements of an ended batch, as its
// manager recorded them beside its history record: the first 1,000 by
// index, and how many more failed (Omitted).
type FailedElements struct {
	Queue    string          `json:"queue"`
	Batch    string          `json:"batch"`
	InRecord bool            `json:"in_history"` // the queue's history holds the batch's record
	Elements []FailedElement `json:"elements"`   // in index order
	Omitted  int             `json:"omitted"`
	// Malformed counts entries that could not be read (skipped).
	Malformed int `json:"malformed,omitempty"`
}

// FailedElements returns the failed elements of queue's batch bid, for as
// long as the queue's history holds its record (Options.History and
// HistoryAge of its manager): none if it had none, or if its record is
// gone (InRecord false). Two round trips for up to 250 elements, one more
// per 250.
func (i *Inspector) FailedElements(ctx context.Context, queue, bid string) (FailedElements, error) {
	out := FailedElements{Queue: queue, Batch: bid, Elements: []FailedElement{}}
	in, err := i.admin.InHistory(ctx, &broker.InHistoryParams{Queue: queue, IDs: []string{bid}})
	if err != nil {
		return out, err
	}
	out.InRecord = in[bid]
	got, err := i.admin.FailedElements(ctx, &broker.FailedElementsParams{Queue: queue, Batch: bid})
	if err != nil {
		return out, err
	}
	fs := got.Elements
	out.Omitted, out.Malformed = fs.Omitted, got.Malformed
	for _, f := range fs.Elements {
		out.Elements = append(out.Elements, FailedElement{Index: f.Index, Kind: f.Kind, Error: f.Error, Attempts: f.Attempts, Worker: f.Worker, Stage: f.Stage, Key: f.Key})
	}
	return out, nil
}
