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
	"github.com/redmap/redmap/internal/rdb"
)

// historyStore is where the manager writes its batches' final records: the
// queue's history, in shard 0.
type historyStore interface {
	RecordBatch(ctx context.Context, mid string, rec rdb.BatchRecord, limit int, age time.Duration) error
}

// history writes each batch's final record into the queue's history when
// the batch ends, off the path that delivers results, and lets the batch's
// readers (Wait, Map, Results) and Close wait for the write.
type history struct {
	mid   string
	store historyStore
	limit int           // Options.History; negative: write nothing
	age   time.Duration // Options.HistoryAge
	log   *slog.Logger
	// budget bounds one write and its retries: a batch's readers wait for
	// it, so a Redis that is away delays their return by this at most.
	budget  time.Duration
	writing sync.WaitGroup
}

// record writes rec in the background and closes written when it is in
// Redis or the write gave up (a warning says so).
func (h *history) record(rec rdb.BatchRecord, written chan struct{}) {
	if h.limit < 0 {
		close(written)
		return
	}
	h.writing.Add(1)
	go func() {
		defer h.writing.Done()
		defer close(written)
		ctx, cancel := context.WithTimeout(context.Background(), h.budget)
		defer cancel()
		bo := backoff.Backoff{Min: 20 * time.Millisecond, Max: 500 * time.Millisecond}
		err := h.store.RecordBatch(ctx, h.mid, rec, h.limit, h.age)
		for err != nil && rdb.Transient(err) && bo.Wait(ctx) {
			err = h.store.RecordBatch(ctx, h.mid, rec, h.limit, h.age)
		}
		if err != nil {
			h.log.Warn("writing a batch's record into the queue's history failed; operators will not see how it ended",
				"batch", rec.ID, "outcome", rec.Outcome, "err", err)
		}
	}()
}

// wait waits for the writes under way.
func (h *history) wait() { h.writing.Wait() }

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
		{redmap.ErrLost, codec.KindLost.String()},
		{redmap.ErrTimeout, codec.KindTimeout.String()},
		{redmap.ErrReduce, codec.KindReduce.String()},
		{redmap.ErrNoWorker, "no worker"},
		{redmap.ErrUnavailable, "redis unavailable"},
		{redmap.ErrRedisFull, "redis full"},
		{redmap.ErrClosed, rdb.OutcomeClosed},
		{context.Canceled, rdb.OutcomeCancelled},
		{context.DeadlineExceeded, rdb.OutcomeCancelled},
	} {
		if errors.Is(err, c.sentinel) {
			return c.kind
		}
	}
	var remote *redmap.RemoteError
	if errors.As(err, &remote) {
		return codec.KindError.String()
	}
	return "other"
}

// outcomeOf names how a batch ended: early with err, or with failed
// elements failed.
func outcomeOf(err error, failed int) string {
	switch {
	case errors.Is(err, redmap.ErrClosed):
		return rdb.OutcomeClosed
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return rdb.OutcomeCancelled
	case err != nil, failed > 0:
		return rdb.OutcomeFailed
	}
	return rdb.OutcomeDone
}
