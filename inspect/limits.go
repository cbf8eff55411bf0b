package inspect

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/keys"
)

// Limit is one function's fleet-wide limit on a queue (redmap.Limit): the
// one in force and where it comes from, as the queue's limits record in
// Redis says, with what its enforcement counts there.
type Limit struct {
	Queue string `json:"queue"`
	Func  string `json:"func"`
	// InForce is the limit takes enforce now; the zero Limit if none (an
	// operator set "no limit", or a record could not be read).
	InForce redmap.Limit `json:"-"`
	// Text is InForce as operators read it ("50/1s burst 10, 8 at
	// once"); Rate, Per (seconds), Burst and Concurrency spell it out.
	Text        string  `json:"limit"`
	Rate        float64 `json:"rate"`
	Per         float64 `json:"per_seconds"`
	Burst       int     `json:"burst"`
	Concurrency int     `json:"concurrency"`
	// Source is "operator" (redmap limit, which wins), "code" (declared
	// with the function's handle), or "" if neither is recorded.
	Source string `json:"source"`
	// By and Set say who wrote the record in force, and when (their clock).
	By  string    `json:"by,omitempty"`
	Set time.Time `json:"set,omitzero"`
	// Code is the limit declared with the handle when an operator's
	// overrides it ("" if none).
	Code string `json:"code,omitempty"`
	// Running counts the tasks holding a slot of its concurrency cap;
	// Waiting the tasks of the function queued in the public lanes;
	// Refused how many takes its limit refused one of its tasks (a
	// throttled wait, counted once a take).
	Running int64 `json:"running"`
	Waiting int64 `json:"waiting"`
	Refused int64 `json:"refused"`
	// RetryAfter counts the waits its elements made because the function
	// answered redmap.RetryAfter (its service refused and said when to
	// come back), across the fleet.
	RetryAfter int64 `json:"retry_after"`
	// Problem says why a record could not be read, if one could not.
	Problem string `json:"problem,omitempty"`
}

// Limits returns queue's functions' limits, sorted by function: every
// function with a record (declared by its code or set by an operator).
// Five round trips.
func (i *Inspector) Limits(ctx context.Context, queue string) ([]Limit, error) {
	if err := keys.CheckQueue(queue); err != nil {
		return nil, fmt.Errorf("inspect: %w", err)
	}
	ls, err := i.admin.Limits(ctx, &broker.QueueParams{Queue: queue})
	if err != nil {
		return nil, err
	}
	out := make([]Limit, 0, len(ls))
	for _, f := range ls {
		l := Limit{Queue: queue, Func: f.Func, Running: f.Running, Waiting: f.Waiting, Refused: f.Refused, RetryAfter: f.RetryAfter, Problem: f.Bad,
			InForce: redmap.Limit{Rate: f.InForce.Rate, Per: f.InForce.Per, Burst: f.InForce.Burst, Concurrency: f.InForce.Concurrency}}
		l.Rate, l.Per, l.Burst, l.Concurrency = l.InForce.Rate, l.InForce.Per.Seconds(), l.InForce.Burst, l.InForce.Concurrency
		l.Text = l.InForce.String()
		rec := f.Code
		switch f.Source {
		case wire.LimitFromOperator:
			l.Source, rec = "operator", f.Operator
			if f.Code != nil {
				l.Code = limitOf(*f.Code).String()
			}
		case wire.LimitFromCode:
			l.Source = "code"
		}
		if rec != nil {
			l.By, l.Set = rec.By, time.UnixMilli(rec.AtMS)
		}
		out = append(out, l)
	}
	return out, nil
}

// limitOf returns the limit a record says.
func limitOf(r wire.LimitRecord) redmap.Limit {
	return redmap.Limit{Rate: r.Rate, Per: time.Duration(r.PerMS) * time.Millisecond, Burst: r.Burst, Concurrency: r.Concurrency}
}

// SetLimit sets function fn's limit on queue as an operator: it wins over
// the one declared with the function's handle until ClearLimit, and takes
// enforce it from the next take on. The zero Limit means no limit. It
// returns the limit now in force. One script call.
func (i *Inspector) SetLimit(ctx context.Context, queue, fn string, l redmap.Limit) (Limit, error) {
	if err := keys.CheckQueue(queue); err != nil {
		return Limit{}, fmt.Errorf("inspect: %w", err)
	}
	if err := keys.CheckFunc(fn); err != nil {
		return Limit{}, fmt.Errorf("inspect: %w", err)
	}
	if err := l.Validate(); err != nil {
		return Limit{}, fmt.Errorf("inspect: %w", err)
	}
	l = l.Normal()
	host, _ := os.Hostname()
	rec := wire.NewLimitRecord(l.Rate, l.Per, l.Burst, l.Concurrency, "operator on "+host, time.Now())
	got, err := i.admin.SetLimit(ctx, &broker.SetLimitParams{Queue: queue, Func: fn, Record: rec})
	var w wire.Limit
	var src string
	if got != nil {
		w, src = got.Limit, got.From
	}
	return inForce(queue, fn, w, src), err
}

// ClearLimit drops the operator's limit of function fn on queue: the one
// declared with its handle, if any, is in force again. It returns the
// limit now in force. One script call.
func (i *Inspector) ClearLimit(ctx context.Context, queue, fn string) (Limit, error) {
	if err := keys.CheckQueue(queue); err != nil {
		return Limit{}, fmt.Errorf("inspect: %w", err)
	}
	got, err := i.admin.ClearLimit(ctx, &broker.ClearLimitParams{Queue: queue, Func: fn})
	var w wire.Limit
	var src string
	if got != nil {
		w, src = got.Limit, got.From
	}
	return inForce(queue, fn, w, src), err
}

func inForce(queue, fn string, w wire.Limit, src string) Limit {
	l := Limit{Queue: queue, Func: fn, InForce: redmap.Limit{Rate: w.Rate, Per: w.Per, Burst: w.Burst, Concurrency: w.Concurrency}}
	l.Rate, l.Per, l.Burst, l.Concurrency = w.Rate, w.Per.Seconds(), w.Burst, w.Concurrency
	l.Text = l.InForce.String()
	switch src {
	case wire.LimitFromOperator:
		l.Source = "operator"
	case wire.LimitFromCode:
		l.Source = "code"
	}
	return l
}
