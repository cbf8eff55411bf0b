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
	"github.com/redmap/redmap/internal/wire"
)

// historyStore is where the manager writes its batches' final records: the
// queue's history, in shard 0.
type historyStore interface {
	RecordBatches(ctx context.Context, mid string, recs []wire.BatchRecord, limit int, age time.Duration) error
}

// history writes each batch's final record into the queue's history when
// the batch ends, off the path that delivers results, and lets the batch's
// readers (Wait, Map) and Close wait for the write. One writer goroutine
// writes every record that waits in one script call, so batches that end
// together (many small Maps at once) cost one round trip between them.
type history struct {
	mid   string
	store historyStore
	limit int           // Options.History; negative: write nothing
	age   time.Duration // Options.HistoryAge
	log   *slog.Logger
	// budget bounds one write and its retries: a batch's readers wait for
	// it, so a Redis that is away delays their return by this at most.
	budget time.Duration

	mu      sync.Mutex
	waiting []pendingRecord // records not yet taken by the writer
	writing bool            // the writer goroutine runs
	idle    sync.Cond       // signalled when the writer has nothing left (wait)
}

// pendingRecord is a record to write, and the channel closed once it is.
type pendingRecord struct {
	rec     wire.BatchRecord
	written chan struct{}
}

// newHistory returns the history writer of manager mid.
func newHistory(mid string, store historyStore, limit int, age, budget time.Duration, log *slog.Logger) *history {
	h := &history{mid: mid, store: store, limit: limit, age: age, budget: budget, log: log}
	h.idle.L = &h.mu
	return h
}

// record writes rec in the background and closes written when it is in
// Redis or the write gave up (a warning says so).
func (h *history) record(rec wire.BatchRecord, written chan struct{}) {
	if h.limit < 0 {
		close(written)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.waiting = append(h.waiting, pendingRecord{rec, written})
	if !h.writing {
		h.writing = true
		go h.write()
	}
}

// write writes what waits, in turns, until nothing does.
func (h *history) write() {
	for {
		h.mu.Lock()
		batch := h.waiting
		h.waiting = nil
		if len(batch) == 0 {
			h.writing = false
			h.idle.Broadcast()
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
		recs := make([]wire.BatchRecord, len(batch))
		for i, p := range batch {
			recs[i] = p.rec
		}
		ctx, cancel := context.WithTimeout(context.Background(), h.budget)
		bo := backoff.Backoff{Min: 20 * time.Millisecond, Max: 500 * time.Millisecond}
		err := h.store.RecordBatches(ctx, h.mid, recs, h.limit, h.age)
		for err != nil && rdb.Transient(err) && bo.Wait(ctx) {
			err = h.store.RecordBatches(ctx, h.mid, recs, h.limit, h.age)
		}
		cancel()
		if err != nil {
			h.log.Warn("writing batches' records into the queue's history failed; operators will not see how they ended",
				"batches", len(recs), "first", recs[0].ID, "err", err)
		}
		for _, p := range batch {
			close(p.written)
		}
	}
}

// wait waits until every record handed to record is written or given up.
func (h *history) wait() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for h.writing {
		h.idle.Wait()
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
		{redmap.ErrLost, codec.KindLost.String()},
		{redmap.ErrTimeout, codec.KindTimeout.String()},
		{redmap.ErrReduce, codec.KindReduce.String()},
		{redmap.ErrNoWorker, "no worker"},
		{redmap.ErrUnavailable, "redis unavailable"},
		{redmap.ErrRedisFull, "redis full"},
		{redmap.ErrClosed, wire.OutcomeClosed},
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
	return "other"
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
