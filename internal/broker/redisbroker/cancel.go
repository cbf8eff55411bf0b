package redisbroker

import (
	"context"

	"github.com/redis/go-redis/v9"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/keys"
)

// Cancel withdraws tasks of manager mid: removes them and their payloads from
// its task set. Their ids may stay queued; a worker that pops one drops it (see
// Take), and a result of one already running is discarded (see Finish). A
// durable batch's owner that holds its claim withdraws with retract.lua,
// refused with a *FencedError once another claim was taken.
func (r *Broker) Cancel(ctx context.Context, p *broker.CancelParams) error {
	mid, tids := p.Manager, p.Tasks
	tasks, attempts := keys.Tasks(r.prefix, r.queue, mid), keys.Attempts(r.prefix, r.queue, mid)
	fence, held := r.fenceOf(mid)
	for len(tids) > 0 {
		n := min(len(tids), maxGroup)
		if fence != "" {
			args := make([]any, 0, 1+n)
			args = append(args, held)
			for _, tid := range tids[:n] {
				args = append(args, tid)
			}
			if err := retractScript.run(ctx, r.c, []string{tasks, attempts, fence}, args...).Err(); err != nil {
				return wrap("cancel", retractScript, "", err)
			}
			tids = tids[n:]
			continue
		}
		// A task's mark of its copy goes with it (prelude.lua's COPIED):
		// a call of a cancelled task did not lose a race.
		fields := make([]string, 0, 2*n)
		for _, tid := range tids[:n] {
			fields = append(fields, tid, copied+tid)
		}
		_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.HDel(ctx, tasks, tids[:n]...)
			p.HDel(ctx, attempts, fields...)
			return nil
		})
		if err != nil {
			return wrap("cancel", nil, "HDEL, MULTI or EXEC", err)
		}
		tids = tids[n:]
	}
	return nil
}
