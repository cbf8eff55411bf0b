package redisbroker

import (
	"context"
	"fmt"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/keys"
)

// maxAudit is the most tasks one audit call looks for: more than a batch's
// window (4,096 tasks), so that a lane is read once an audit, as each call
// reads the whole of every list its tasks name.
const maxAudit = 5000

// Audit queues again those of manager mid's outstanding tasks (groups, by
// where each waits) that are in its task set but in no list and no live
// worker's held set: a key Redis lost (evicted, deleted, set aside for
// foreign data) took them along. It puts lanes with tasks back in their ring
// and their entries in the manager's lanes hash if those went; see
// audit.lua. It returns the tasks not in the task set, and the length
// of the result list. One script call per 5,000 tasks (maxAudit); a task set holding foreign
// data is a *redmap.CommandError naming it.
func (r *Broker) Audit(ctx context.Context, p *broker.AuditParams) (*wire.Audited, error) {
	mid, groups, ttl := p.Manager, p.Groups, p.TTL
	tasks := keys.Tasks(r.prefix, r.queue, mid)
	ks := []string{tasks, keys.Workers(r.prefix, r.queue), keys.Idle(r.prefix, r.queue), keys.Lanes(r.prefix, r.queue, mid),
		keys.Results(r.prefix, r.queue, mid)}
	var out wire.Audited
	for len(groups) > 0 {
		args := []any{r.base, ttl.Milliseconds()}
		n := 0
		for len(groups) > 0 && n < maxAudit {
			g := &groups[0]
			k := min(len(g.Tasks), maxAudit-n)
			args = append(args, g.Worker, g.Lane.Name, g.Lane.Calls, k)
			for _, tid := range g.Tasks[:k] {
				args = append(args, tid)
			}
			n += k
			if g.Tasks = g.Tasks[k:]; len(g.Tasks) == 0 {
				groups = groups[1:]
			}
		}
		got, err := auditScript.run(ctx, r.c, ks, args...).Slice()
		if err != nil {
			return &out, onKey(wrap("audit", auditScript, "", err), tasks)
		}
		var counts [4]int64
		for i := range counts {
			if i >= len(got) {
				return &out, fmt.Errorf("audit: script returned %v, not 4 integers first", got)
			}
			c, ok := got[i].(int64)
			if !ok {
				return &out, fmt.Errorf("audit: script returned %T, not an integer", got[i])
			}
			counts[i] = c
		}
		out.Requeued += int(counts[0])
		out.Lost += int(counts[1])
		out.Healed += int(counts[2])
		out.Unread = max(out.Unread, counts[3])
		for _, v := range got[4:] {
			tid, ok := v.(string)
			if !ok {
				return &out, fmt.Errorf("audit: script returned %T, not a task id", v)
			}
			out.Absent = append(out.Absent, tid)
		}
	}
	return &out, nil
}
