package memory_test

import (
	"testing"

	"github.com/redmap/redmap/internal/await"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/brokertest"
	"github.com/redmap/redmap/internal/broker/memory"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/id"
)

// The memory broker keeps the contract's rules, as the scripts do
// (internal/broker/redisbroker runs the same suite on a real Redis).
func TestConformance(t *testing.T) {
	brokertest.Run(t, func(t *testing.T) brokertest.Harness {
		return &harness{q: memory.NewQueue(&await.Broadcast{})}
	})
}

type harness struct {
	q   *memory.Queue
	seq uint64
}

func (h *harness) Queue() broker.Queue { return h.q.First() }
func (h *harness) Manager() string     { return "m1" }
func (h *harness) Lane() wire.Lane     { return wire.Lane{Name: "m1.1", Calls: "f\tsig"} }
func (h *harness) Lose(*testing.T)     { h.q.First().Lose() }
func (h *harness) Serves() []string    { return nil }

func (h *harness) Add(_ *testing.T, attempts ...int) []string {
	var ids []string
	for _, a := range attempts {
		h.seq++
		tid := id.TaskIn("m1", h.seq, 1, 1, 3, 3)
		ids = append(ids, tid)
		h.q.First().Add(wire.Taken{ID: tid, Attempt: a, Payload: []byte("payload")})
	}
	return ids
}

func (h *harness) Cancel(_ *testing.T, tids ...string) { h.q.First().Withdraw(tids...) }

func (h *harness) Delivered(*testing.T) []string {
	var out []string
	for _, d := range h.q.First().Results() {
		out = append(out, d.ID)
	}
	return out
}
