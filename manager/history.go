package manager

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/backoff"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/failure"
	"github.com/redmap/redmap/internal/part"
)

// historyStore is where the manager writes its batches' final records: the
// queue's history, in shard 0.
type historyStore interface {
	RecordBatches(ctx context.Context, p *broker.RecordBatchesParams) error
	CountFailures(ctx context.Context, p *broker.CountFailuresParams) (*broker.CountFailuresResult, error)
}

// failedStore is a historyStore that records batches' failed elements
// for operators (redmap failures -batch): Redis's; a store without it
// (a test's) records none.
type failedStore interface {
	RecordFailed(ctx context.Context, p *broker.RecordFailedParams) error
}

// history writes each batch's final record into the queue's history when
// the batch ends, off the path that delivers results, and lets the batch's
// readers (Wait, Map) wait for the write. It is a part: its writer runs from
// New to Close, and writes every record that waits in one script call, so
// batches that end together (many small Maps at once) cost one round trip
// between them. Stopped, it writes what still waits before it returns
// (Close ends its batches first: they are recorded as closed).
type history struct {
	*part.Runner
	historyParams

	mu      sync.Mutex
	waiting []pendingRecord // records not yet taken by the writer
	ended   bool            // the writer has returned: record writes itself
	wake    chan struct{}   // a token when records wait
}

// historyParams is what a history writer is built from.
type historyParams struct {
	mid   string
	store historyStore
	limit int           // Options.History; negative: write nothing
	age   time.Duration // Options.HistoryAge
	// unsaid is told, with each write, of the elements ended since the
	// last publish, for the throughput counters (the keeper shares it).
	unsaid *unsaid
	// failures holds what failed on the manager's side: written with the
	// records, so that redmap failures counts it by the time Map returns.
	failures *failure.Log
	// stages is told of each record written of a pipeline's batch, so
	// that the recoverer can put back its stage counts if Redis loses them.
	stages *stageBook
	log    *slog.Logger
	// budget bounds one write and its retries: a batch's readers wait for
	// it, so a Redis that is away delays their return by this at most.
	budget time.Duration
}

// pendingRecord is a record to write, and the channel closed once it is.
type pendingRecord struct {
	rec wire.BatchRecord
	// failed are the batch's failed elements, written beside its record.
	failed wire.FailedElements
	// only says the record is written already (its task's finish wrote
	// it): only its failed elements are to write.
	only    bool
	written chan struct{}
}

// newHistory returns a history writer.
func newHistory(p historyParams) *history {
	h := &history{historyParams: p, wake: make(chan struct{}, 1)}
	h.Runner = part.New(h.run)
	return h
}

// record writes rec in the background and closes written when it is in
// Redis or the write gave up (a warning says so). Once the writer has
// ended, it writes rec itself.
func (h *history) record(rec wire.BatchRecord, failed wire.FailedElements, written chan struct{}) {
	h.add(pendingRecord{rec: rec, failed: failed, written: written})
}

// recordFailed writes, in the background, the failed elements of batch
// rec, whose record is in the history already, and closes written then.
func (h *history) recordFailed(rec wire.BatchRecord, failed wire.FailedElements, written chan struct{}) {
	h.add(pendingRecord{rec: rec, failed: failed, only: true, written: written})
}

// add has p written, by the writer or, once it has ended, at once.
func (h *history) add(p pendingRecord) {
	if h.limit < 0 {
		close(p.written)
		return
	}
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		h.write([]pendingRecord{p})
		return
	}
	h.waiting = append(h.waiting, p)
	h.mu.Unlock()
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// writeFailures adds the failures log counted on manager mid's side to the
// queue's failure groups, as a worker does (failures.lua; the group names
// "manager <mid>" among who saw it), and counts them again if the write
// fails.
func writeFailures(ctx context.Context, store historyStore, mid string, log *failure.Log) error {
	gs := log.Take()
	if len(gs) == 0 {
		return nil
	}
	if _, err := store.CountFailures(ctx, &broker.CountFailuresParams{Worker: "manager " + mid, Groups: gs}); err != nil {
		log.PutBack(gs)
		return err
	}
	return nil
}

// run writes what waits, in turns, until ctx ends; then what still waits.
func (h *history) run(ctx context.Context) {
	for {
		select {
		case <-h.wake:
			h.write(h.take(false))
		case <-ctx.Done():
			h.write(h.take(true))
			return
		}
	}
}

// take returns the records that wait, and with end marks the writer ended.
func (h *history) take(end bool) []pendingRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	batch := h.waiting
	h.waiting = nil
	h.ended = h.ended || end
	return batch
}

// write writes batch's records in one call, retried within the budget
// while Redis is away, and closes their channels.
func (h *history) write(batch []pendingRecord) {
	if len(batch) == 0 {
		return
	}
	recs := make([]wire.BatchRecord, 0, len(batch))
	for _, p := range batch {
		if !p.only {
			recs = append(recs, p.rec)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.budget)
	bo := backoff.Backoff{Min: 20 * time.Millisecond, Max: 500 * time.Millisecond}
	// The batches' last elements go into the throughput with their records:
	// a batch shorter than a Poll, or a manager closed right after, is
	// counted whole.
	ended := h.unsaid.take()
	var err error
	if len(recs) > 0 || ended > 0 {
		err = h.store.RecordBatches(ctx, &broker.RecordBatchesParams{Manager: h.mid, Records: recs, Limit: h.limit, Age: h.age, Ended: ended})
		for err != nil && broker.Transient(err) && bo.Wait(ctx) {
			err = h.store.RecordBatches(ctx, &broker.RecordBatchesParams{Manager: h.mid, Records: recs, Limit: h.limit, Age: h.age, Ended: ended})
		}
	}
	if err == nil {
		h.writeFailed(ctx, batch)
		if h.stages != nil {
			written := make([]wire.BatchRecord, len(batch))
			for i, p := range batch {
				written[i] = p.rec // those written before (only) too: their records are in
			}
			h.stages.add(written)
		}
	}
	if err != nil {
		h.unsaid.giveBack(ended)
		h.log.Warn("writing batches' records into the queue's history failed; operators will not see how they ended",
			"batches", len(recs), "first", batch[0].rec.ID, "err", err)
	} else if h.failures != nil {
		// Apart from the records: they are written, and their elements
		// counted, whether or not this write goes through (the failures
		// are counted again with the next Poll's if it does not).
		if err := writeFailures(ctx, h.store, h.mid, h.failures); err != nil {
			h.log.Warn("counting the manager's failures in the queue's failure groups failed; the next Poll tries again", "err", err)
		}
	}
	cancel()
	for _, p := range batch {
		close(p.written)
	}
}

// writeFailed writes the failed elements of the batches of batch that
// have any, after their records: a failed element listed is one of a batch
// in the history (and the record's trim deletes the list).
func (h *history) writeFailed(ctx context.Context, batch []pendingRecord) {
	fs, ok := h.store.(failedStore)
	if !ok {
		return
	}
	for _, p := range batch {
		if len(p.failed.Elements) == 0 && p.failed.Omitted == 0 {
			continue
		}
		bo := backoff.Backoff{Min: 20 * time.Millisecond, Max: 500 * time.Millisecond}
		err := fs.RecordFailed(ctx, &broker.RecordFailedParams{Batch: p.rec.ID, Failed: p.failed.Elements, Omitted: p.failed.Omitted, Age: h.age})
		for err != nil && broker.Transient(err) && bo.Wait(ctx) {
			err = fs.RecordFailed(ctx, &broker.RecordFailedParams{Batch: p.rec.ID, Failed: p.failed.Elements, Omitted: p.failed.Omitted, Age: h.age})
		}
		if err != nil {
			h.log.Warn("writing a batch's failed elements failed; redmap failures -batch will not list them",
				"batch", p.rec.ID, "failed", len(p.failed.Elements), "err", err)
		}
	}
}

// causeOf names what made an element fail, for the history's failed-by
// counts: the kind a worker reported ("panic", "error", "lost", ...), or
// the manager's own reason.
func causeOf(err error) string {
	for _, c := range [...]struct {
		sentinel error
		kind     string
	}{
		{redmap.ErrPanic, codec.KindPanic.String()},
		{redmap.ErrUnknownFunc, codec.KindUnknownFunc.String()},
		{redmap.ErrTypeMismatch, codec.KindTypeMismatch.String()},
		{redmap.ErrDecode, codec.KindDecode.String()},
		{redmap.ErrEncode, codec.KindEncode.String()},
		{redmap.ErrTooLarge, codec.KindTooLarge.String()},
		{redmap.ErrConstantMissing, codec.KindConstMissing.String()},
		{redmap.ErrConstantCorrupt, codec.KindConstCorrupt.String()},
		{redmap.ErrPurged, wire.CausePurged}, // before ErrLost, which it is too
		{redmap.ErrLost, codec.KindLost.String()},
		{redmap.ErrTimeout, codec.KindTimeout.String()},
		{redmap.ErrReduce, codec.KindReduce.String()},
		{redmap.ErrThrottled, codec.KindThrottled.String()},
		{redmap.ErrNoWorker, wire.CauseNoWorker},
		{redmap.ErrUnavailable, wire.CauseUnavailable},
		{redmap.ErrRedisFull, codec.KindRedisFull.String()},
		{redmap.ErrClosed, wire.OutcomeClosed},
		{redmap.ErrCancelled, wire.OutcomeCancelled},
		{context.Canceled, wire.OutcomeCancelled},
		{context.DeadlineExceeded, wire.OutcomeCancelled},
	} {
		if errors.Is(err, c.sentinel) {
			return c.kind
		}
	}
	var remote *redmap.RemoteError
	if errors.As(err, &remote) {
		return codec.KindError.String()
	}
	return wire.CauseOther
}

// outcomeOf names how a batch ended: early with err, or with failed
// elements failed.
func outcomeOf(err error, failed int) string {
	switch {
	case errors.Is(err, redmap.ErrClosed):
		return wire.OutcomeClosed
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return wire.OutcomeCancelled
	case err != nil, failed > 0:
		return wire.OutcomeFailed
	}
	return wire.OutcomeDone
}
