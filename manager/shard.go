package manager

import (
	"sync"
	"sync/atomic"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/id"
)

// shard is the manager's side of one shard of its queue (Options.Shards):
// in Redis, a task set and a result list of its own, on the shard's slot;
// here, what checks that Redis kept what the manager submitted there.
// Every guarantee (fencing, leases, recovery after a data loss) holds per
// shard, as for a queue of one.
type shard struct {
	i   int
	rdb broker.Shard

	// sendMu orders submits against recovery: each submit holds it for
	// reading while its script runs, recovery for writing, so recovery sees
	// no submit half done.
	sendMu sync.RWMutex
	// acked is the highest count of tasks submitted to the shard's task
	// set that a submit script has returned (see redisbroker.Submit). Redis's count
	// only grows while it keeps its data, so it is at least acked; below it,
	// Redis lost writes.
	acked atomic.Int64
	// lossSeen is set when a submit found Redis's count below acked, and
	// cleared when recovery has put back what was lost.
	lossSeen atomic.Bool
	// epoch names the history of the task set the manager knows (see
	// submit.lua): set by its first submit, replaced by each recovery.
	epoch atomic.Pointer[string]
	// outage is how long the shard's Redis has been unreachable: on a
	// Cluster one master may be down while the others answer.
	outage outage
	// absent counts, for each outstanding task the last audit found
	// missing from the task set, the audits in a row that did (see
	// recoverer.audit); only the recoverer's goroutine reads and writes it.
	absent map[string]int
}

func newShard(r broker.Shard) *shard {
	s := &shard{i: r.Shard(), rdb: r}
	epoch := id.New()[:16]
	s.epoch.Store(&epoch)
	return s
}

// submitted records the count a submit script on the shard returned (see
// redisbroker.Submit), and whether Redis's count was as high as expected before it.
func (s *shard) submitted(count int64, intact bool) {
	for {
		a := s.acked.Load()
		if count <= a || s.acked.CompareAndSwap(a, count) {
			break
		}
	}
	if !intact {
		s.lossSeen.Store(true)
	}
}
