package redisbroker_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/brokertest"
	"github.com/redmap/redmap/internal/broker/redisbroker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
)

// The scripts keep the contract's rules.
func TestConformance(t *testing.T) {
	brokertest.Run(t, func(t *testing.T) brokertest.Harness {
		c := redistest.Shared(t).Client(t)
		queue := redistest.Queue(t)
		return &harness{c: c, queue: queue, r: redisbroker.New(c, "redmap", queue)}
	})
}

// harness submits and cancels as a manager does, with rdb's own calls.
type harness struct {
	c     *redis.Client
	queue string
	r     *redisbroker.Broker
	seq   uint64
	count int64 // tasks submitted: what the next submit expects of the task set
}

const mid = "m1"

var lane = wire.Lane{Name: mid + ".1", Calls: "f\tsig"}

func (h *harness) Queue() broker.Queue { return h.r }
func (h *harness) Manager() string     { return mid }
func (h *harness) Lane() wire.Lane     { return lane }
func (h *harness) Name() string        { return h.queue }

func (h *harness) Operator() broker.Operator { return redisbroker.NewAdmin(h.c, "redmap") }

func (h *harness) Lose(t *testing.T) {
	t.Helper()
	if err := h.c.Del(context.Background(), keys.Tasks("redmap", h.queue, mid)).Err(); err != nil {
		t.Fatal(err)
	}
}
func (h *harness) Serves() []string { return []string{lane.Calls} }

func (h *harness) Add(t *testing.T, attempts ...int) []string {
	t.Helper()
	ctx := context.Background()
	var ids []string
	var tasks []wire.Task
	for _, a := range attempts {
		h.seq++
		tid := id.TaskIn(mid, h.seq, 1, 1, 3, 3)
		ids = append(ids, tid)
		tasks = append(tasks, wire.Task{ID: tid, Payload: []byte("payload")})
		if a > 0 {
			h.c.HSet(ctx, keys.Attempts("redmap", h.queue, mid), tid, a)
		}
	}
	got, err := h.r.Submit(ctx, &broker.SubmitParams{Manager: mid, Lane: lane, Tasks: tasks, TTL: time.Minute, Expect: wire.Expect{Count: h.count, Epoch: "e1"}})
	if err != nil || !got.Intact {
		t.Fatalf("submit: %+v, %v", got, err)
	}
	h.count = got.Count
	return ids
}

func (h *harness) Cancel(t *testing.T, tids ...string) {
	t.Helper()
	if err := h.r.Cancel(context.Background(), &broker.CancelParams{Manager: mid, Tasks: tids}); err != nil {
		t.Fatal(err)
	}
}

func (h *harness) Delivered(t *testing.T) []string {
	t.Helper()
	entries, err := h.r.ReadResults(context.Background(), &broker.ReadResultsParams{Manager: mid, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range entries {
		e, err := wire.DecodeEntry(s, 1<<20)
		if err != nil || e.Result == nil {
			t.Fatalf("entry %q: %v", s, err)
		}
		out = append(out, e.Result.Task)
	}
	return out
}
