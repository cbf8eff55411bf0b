package redisbroker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/keys"
)

// A batch's failed elements are recorded up to wire.MaxFailedElements, the
// rest counted; recorded again, the list is replaced; and they leave with
// the batch's record when the history is trimmed.
func TestFailedElements(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	a := NewAdmin(f.c, "rm")
	rec := wire.BatchRecord{ID: "b1", Manager: f.mid, Func: "f", Total: 2000, Failed: 1050, Outcome: wire.OutcomeFailed, Started: 1, Ended: 2}
	if err := f.r.RecordBatches(ctx, &broker.RecordBatchesParams{Manager: f.mid, Records: []wire.BatchRecord{rec}, Limit: 3, Age: time.Hour}); err != nil {
		t.Fatal(err)
	}
	fs := make([]wire.FailedElement, 1050)
	for i := range fs {
		fs[i] = wire.FailedElement{Index: 2 * i, Kind: "error", Error: fmt.Sprint("bad ", i), Attempts: 1, Worker: "w1"}
	}
	fs[3].Error = string(make([]byte, 4000)) // cut to MaxFailedError
	if err := f.r.RecordFailed(ctx, &broker.RecordFailedParams{Batch: "b1", Failed: fs, Omitted: 7, Age: time.Hour}); err != nil {
		t.Fatal(err)
	}
	got, malformed, err := failedElementsOf(a.FailedElements(ctx, &broker.FailedElementsParams{Queue: f.queue, Batch: "b1"}))
	if err != nil || malformed != 0 || len(got.Elements) != wire.MaxFailedElements || got.Omitted != 57 {
		t.Fatalf("failed elements: %d listed, %d omitted, %d malformed, %v; want 1000, 57 (7 + 50 past the cap)", len(got.Elements), got.Omitted, malformed, err)
	}
	for j, e := range got.Elements {
		if e.Index != 2*j || e.Worker != "w1" || (j != 3 && e.Error != fmt.Sprint("bad ", j)) {
			t.Fatalf("element %d: %+v; want index %d of w1, in index order", j, e, 2*j)
		}
	}
	if n := len(got.Elements[3].Error); n > wire.MaxFailedError {
		t.Fatalf("an error of 4000 bytes recorded as %d bytes; want at most %d", n, wire.MaxFailedError)
	}
	// Recorded again (a manager that came back): its list, not both.
	if err := f.r.RecordFailed(ctx, &broker.RecordFailedParams{Batch: "b1", Failed: fs[:2], Age: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := failedElementsOf(a.FailedElements(ctx, &broker.FailedElementsParams{Queue: f.queue, Batch: "b1"})); len(got.Elements) != 2 || got.Omitted != 0 {
		t.Fatalf("recorded again: %d listed, %d omitted; want 2, 0", len(got.Elements), got.Omitted)
	}
	k := keys.FailedElements("rm", f.queue, "b1")
	if ttl := f.c.PTTL(ctx, k).Val(); ttl <= 0 || ttl > time.Hour {
		t.Fatalf("the list lives %v; want the history's hour", ttl)
	}
	// Three more batches: b1's record is trimmed, and its list with it.
	for i := range 3 {
		r := rec
		r.ID = fmt.Sprint("x", i)
		if err := f.r.RecordBatches(ctx, &broker.RecordBatchesParams{Manager: f.mid, Records: []wire.BatchRecord{r}, Limit: 3, Age: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	if f.c.HExists(ctx, keys.History("rm", f.queue), "b1").Val() || f.c.Exists(ctx, k).Val() != 0 {
		t.Fatal("b1's record or failed elements outlived its trim")
	}
}
