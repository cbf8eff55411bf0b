package redisbroker

import (
	"context"
	"fmt"
	"time"

	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/keys"
)

// tally is what ran of a durable batch, as the results in Redis say: the
// elements that ended (Done: with a value or failed, as a record counts
// them), those that failed, by kind.
type tally struct {
	done, failed int
	failedBy     map[string]int
}

// add counts entry e, of task e.Task, once: a task has one result (the
// task set is the truth: finish.lua delivers its first).
func (t *tally) add(e wire.Entry, seen map[string]bool) {
	if e.Task == "" || seen[e.Task] {
		return
	}
	n := id.Size(e.Task)
	fail := func(kind string, k int) {
		t.failed += k
		t.failedBy[kind] += k
	}
	switch e.Kind {
	case wire.EntryResult:
		for _, f := range e.Result.Fails {
			switch {
			case f.Index < 0:
				fail(f.Kind.String(), n)
			default:
				fail(f.Kind.String(), f.Last()-f.Index+1)
			}
		}
	case wire.EntryLost:
		fail(codec.KindLost.String(), n)
	case wire.EntryPurged:
		fail(wire.CausePurged, n)
	default: // a wake, or a staged result Redis lost: no element ended
		return
	}
	seen[e.Task] = true
	t.done += n
}

// tallyOwner counts what ran of durable batch owner o of queue: every
// result its workers delivered, on every shard, read (o's collector
// moved them to its kept list) or not (its result list). Run once its
// tasks are withdrawn, it is final: no result of it is accepted after.
// Pages of 500 entries, each an LRANGE and the reads of the staged
// results among them (Kept).
func (a *Admin) tallyOwner(ctx context.Context, shards []string, o string) (tally, error) {
	t := tally{failedBy: make(map[string]int)}
	seen := make(map[string]bool)
	const page = 500
	for _, sh := range shards {
		b := a.Queue(sh)
		for _, list := range []string{keys.Kept(a.prefix, sh, o), keys.Results(a.prefix, sh, o)} {
			for from := int64(0); ; from += page {
				es, err := b.entries(ctx, list, o, from, page)
				if err != nil {
					return t, err
				}
				for _, s := range es {
					if e, err := wire.DecodeEntry(s, 0); err == nil {
						t.add(e, seen)
					}
				}
				if len(es) < page {
					break
				}
			}
		}
	}
	return t, nil
}

// recordCancelled writes the history record of durable batch owner o of
// queue, cancelled by an operator for reason: its last published progress
// (its function, call, total, start) with what ran, tallied from its
// results (tallyOwner), as its manager's own end writes it (record.lua:
// the history, its bounds and the ended totals; its published progress
// forgotten). A record in the history already is left alone if keep (a
// manager holding the batch wrote its own). p is its progress, read
// before the cancel: a holder that reads the cancel deletes it. A few
// round trips.
func (a *Admin) recordCancelled(ctx context.Context, shards []string, queue, o, reason string, keep bool, p wire.BatchProgress) error {
	bid := o + ":1"
	t, err := a.tallyOwner(ctx, shards, o)
	if err != nil {
		return err
	}
	if keep {
		in, err := a.InHistory(ctx, &broker.InHistoryParams{Queue: queue, IDs: []string{bid}})
		if err != nil || in[bid] {
			return err
		}
	}
	rec := p.Record(bid, o)
	rec.Outcome, rec.Ended = wire.OutcomeCancelled, time.Now().UnixMilli()
	rec.Done, rec.Failed = t.done, t.failed // Total stays the published one: 0, unknown, if none was
	if t.failed > 0 {
		rec.FailedBy = t.failedBy
	}
	rec.Reason = reason
	if p.Durable != "" {
		rec.Reason = fmt.Sprintf("durable batch %s: %s", p.Durable, reason)
	}
	return a.Queue(queue).RecordBatches(ctx, &broker.RecordBatchesParams{Manager: o, Records: []wire.BatchRecord{rec},
		Limit: keys.DefaultHistory, Age: keys.DefaultHistoryAge})
}

// progressOf returns the progress durable batch owner o of queue last
// published, or none if it published none or it cannot be read (a cancel
// then records the tally alone). One HGET.
func (a *Admin) progressOf(ctx context.Context, queue, o string) wire.BatchProgress {
	var p wire.BatchProgress
	if s, err := a.c.HGet(ctx, keys.Batches(a.prefix, queue, o), o+":1").Result(); err == nil {
		p, _ = wire.DecodeProgress(s)
	}
	return p
}
