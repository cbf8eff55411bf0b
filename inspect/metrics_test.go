package inspect_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/inspect"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

var odd = redmap.Func("odd", func(_ context.Context, x int) (int, error) {
	if x%2 == 1 {
		return 0, errors.New("odd")
	}
	return x, nil
})

// counters scrapes reg and returns the value of each series of the
// exporter's counters, by "<metric>{<label>}".
func counters(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if m.GetCounter() == nil {
				continue
			}
			for _, l := range m.GetLabel() {
				if l.GetName() != "queue" {
					out[fmt.Sprintf("%s{%s}", mf.GetName(), l.GetValue())] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// The exporter's counters never go down when their record in Redis does
// (trimmed, expired, reset, lost): a scrape after the record is deleted
// exports what the one before did, and what the record counts afresh is
// added to it.
func TestCountersNeverGoDown(t *testing.T) {
	e := harness.On(t, redistest.Start(t))
	e.Worker(t, worker.Options{}, odd)
	m := e.Manager(t, manager.Options{Logger: slog.New(slog.DiscardHandler)})
	ctx := context.Background()
	run := func() {
		t.Helper()
		if _, err := manager.Map(ctx, m, odd, []int{1, 2, 3, 4}); err == nil {
			t.Fatal("want 2 elements failed")
		}
	}
	run()
	in, err := inspect.New(e.Client, "")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(in.Collector(in.Queues))
	const ended, failed = "redmap_batches_ended_total{failed}", "redmap_elements_failed_total{error}"
	before := counters(t, reg)
	if before[ended] != 1 || before[failed] != 2 {
		t.Fatalf("first scrape: %s %v, %s %v; want 1 and 2", ended, before[ended], failed, before[failed])
	}
	if err := e.Client.Del(ctx, keys.Ended("redmap", e.Queue)).Err(); err != nil { // as an expiry, a reset or a lost Redis would
		t.Fatal(err)
	}
	if after := counters(t, reg); after[ended] != 1 || after[failed] != 2 {
		t.Fatalf("after the record went: %s %v, %s %v; want 1 and 2 still", ended, after[ended], failed, after[failed])
	}
	run() // the record counts 1 and 2 afresh
	if after := counters(t, reg); after[ended] != 2 || after[failed] != 4 {
		t.Fatalf("after a batch more: %s %v, %s %v; want 2 and 4", ended, after[ended], failed, after[failed])
	}
}
