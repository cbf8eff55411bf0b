package manager

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
)

// blockingStore is a history store whose first write waits for release.
type blockingStore struct {
	mu      sync.Mutex
	calls   [][]string // the batch ids of each write
	started chan struct{}
	release chan struct{}
}

func (s *blockingStore) CountFailures(context.Context, *broker.CountFailuresParams) (*broker.CountFailuresResult, error) {
	return &broker.CountFailuresResult{}, nil
}

func (s *blockingStore) RecordBatches(_ context.Context, p *broker.RecordBatchesParams) error {
	s.mu.Lock()
	first := len(s.calls) == 0
	var ids []string
	for _, r := range p.Records {
		ids = append(ids, r.ID)
	}
	s.calls = append(s.calls, ids)
	s.mu.Unlock()
	if first {
		close(s.started)
		<-s.release
	}
	return nil
}

// Records that wait while a write is under way go in the next write,
// together; each record's channel closes once it is written; stopped, the
// writer returns, and a record after that is written at once.
func TestHistoryWritesWaitingRecordsTogether(t *testing.T) {
	s := &blockingStore{started: make(chan struct{}), release: make(chan struct{})}
	h := newHistory(historyParams{mid: "m", store: s, limit: 10, age: time.Hour, budget: time.Second, unsaid: &unsaid{ended: new(atomic.Int64)}, log: slog.New(slog.DiscardHandler)})
	h.Start(context.Background())
	written := make([]chan struct{}, 4)
	for i := range written {
		written[i] = make(chan struct{})
	}
	h.record(wire.BatchRecord{ID: "a"}, wire.FailedElements{}, written[0])
	<-s.started // the first write is under way, and held
	for i, id := range []string{"b", "c", "d"} {
		h.record(wire.BatchRecord{ID: id}, wire.FailedElements{}, written[i+1])
	}
	select {
	case <-written[1]:
		t.Fatal("a record waiting behind a write under way was said written")
	default:
	}
	close(s.release)
	for _, w := range written {
		<-w
	}
	h.Stop()
	h.Wait()
	if len(s.calls) != 2 || len(s.calls[1]) != 3 {
		t.Fatalf("writes %v; want [a] then [b c d] together", s.calls)
	}
	late := make(chan struct{})
	h.record(wire.BatchRecord{ID: "late"}, wire.FailedElements{}, late)
	<-late
	if len(s.calls) != 3 || s.calls[2][0] != "late" {
		t.Fatalf("writes %v; want the record after Stop written at once", s.calls)
	}
	// A manager with History -1 writes nothing, and says so at once.
	off := newHistory(historyParams{mid: "m", store: s, limit: -1, age: time.Hour, budget: time.Second, unsaid: &unsaid{ended: new(atomic.Int64)}, log: slog.New(slog.DiscardHandler)})
	done := make(chan struct{})
	off.record(wire.BatchRecord{ID: "e"}, wire.FailedElements{}, done)
	<-done
	if len(s.calls) != 3 {
		t.Fatalf("History -1 wrote %v", s.calls[3:])
	}
}

// Every cause a record counts failed elements by is one the metrics export
// from the start (wire.FailureCauses).
func TestCausesAreExported(t *testing.T) {
	causes := wire.FailureCauses()
	for _, err := range []error{
		redmap.ErrPanic, redmap.ErrUnknownFunc, redmap.ErrTypeMismatch, redmap.ErrDecode, redmap.ErrEncode,
		redmap.ErrTooLarge, redmap.ErrConstantMissing, redmap.ErrConstantCorrupt, redmap.ErrPurged, redmap.ErrLost, redmap.ErrTimeout,
		redmap.ErrReduce, redmap.ErrThrottled, redmap.ErrNoWorker, redmap.ErrUnavailable, redmap.ErrRedisFull,
		redmap.ErrClosed, context.Canceled, context.DeadlineExceeded, &redmap.RemoteError{Msg: "429"}, errors.New("odd"),
	} {
		if c := causeOf(err); !slices.Contains(causes, c) {
			t.Errorf("causeOf(%v) = %q, not among the causes exported: %q", err, c, causes)
		}
	}
}
