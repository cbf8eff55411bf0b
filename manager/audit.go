package manager

import (
	"context"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
)

// auditEvery is how many Polls apart the recoverer audits where Redis keeps
// the manager's outstanding tasks (audit): a task a lost key took along is
// queued again within that many Polls.
const auditEvery = 3

// goneAudits is how many audits in a row must find an outstanding task gone
// from the task set, while results wait unread, before the manager takes
// its result for lost: 9 Polls after the first, by default, for a result
// that is only slow to be read.
const goneAudits = 4

// audit asks shard s where each of the manager's outstanding tasks there
// waits, and has Redis queue again every one in its task set that is in no
// list and no live worker's held set (a lane, a private list, a held set, a
// ring or the lanes hash lost: evicted, deleted, or set aside for foreign
// data; see redisbroker.Audit). A task still outstanding but absent from the set
// at two audits in a row while the result list was empty, or at
// goneAudits in a row, had its result lost with the list: the shard is
// marked for recovery, which submits it again (recover). A result that was
// only slow to be read runs again, and its first result counts.
func (r *recoverer) audit(ctx context.Context, s *shard) {
	groups := map[place][]string{}
	for _, tid := range r.pending.ids(func(tid string) bool { return r.router.of(tid) == s }) {
		p, ok := r.pending.get(tid)
		if !ok {
			continue
		}
		wid, lane := p.batch.place()
		at := place{wid: wid, lane: lane}
		groups[at] = append(groups[at], tid)
	}
	if len(groups) == 0 {
		s.absent = nil
		return
	}
	placed := make([]wire.Placed, 0, len(groups))
	for at, tids := range groups {
		placed = append(placed, wire.Placed{Worker: at.wid, Lane: at.lane, Tasks: tids})
	}
	var got *wire.Audited
	if !r.faults.keep(ctx, s, "auditing outstanding tasks", quietOutage, func() (err error) {
		got, err = s.rdb.Audit(ctx, &broker.AuditParams{Manager: r.mid, Groups: placed, TTL: r.ttl})
		return err
	}) {
		return
	}
	if got.Requeued > 0 || got.Lost > 0 || got.Healed > 0 {
		r.log.Warn("Redis had lost keys holding outstanding tasks of this manager; they were queued again",
			"requeued", got.Requeued, "lost", got.Lost, "lanes_healed", got.Healed, "shard", s.i)
	}
	absent := make(map[string]int, len(got.Absent))
	lost := 0
	for _, tid := range got.Absent {
		n := s.absent[tid] + 1
		absent[tid] = n
		if n >= goneAudits || n >= 2 && got.Unread == 0 {
			if _, ok := r.pending.get(tid); ok {
				lost++
			}
		}
	}
	s.absent = absent
	if lost > 0 {
		r.log.Warn("results of this manager were lost from Redis before it read them; submitting their tasks again",
			"tasks", lost, "shard", s.i)
		s.lossSeen.Store(true)
	}
}

// place is where a batch's tasks wait: a worker's private list, or its lane.
type place struct {
	wid  string
	lane wire.Lane
}
