package redisbroker

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/keys"
)

// Submitted returns how many tasks were ever submitted to manager mid's task
// set, as Redis has it now, and the set's epoch: 0 and "" if the set is
// gone. One HMGET.
func (r *Broker) Submitted(ctx context.Context, p *broker.ManagerParams) (*broker.SubmittedResult, error) {
	mid := p.Manager
	v, err := r.c.HMGet(ctx, keys.Tasks(r.prefix, r.queue, mid), "_", "_e").Result()
	if err != nil {
		return nil, onKey(wrap("check data", nil, "HMGET", err), keys.Tasks(r.prefix, r.queue, mid))
	}
	cs, _ := v[0].(string)
	epoch, _ := v[1].(string)
	if cs == "" {
		return &broker.SubmittedResult{Count: 0, Epoch: epoch}, nil
	}
	n, err := strconv.ParseInt(cs, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("check data: the task set's count is %q", cs)
	}
	return &broker.SubmittedResult{Count: n, Epoch: epoch}, nil
}

// Missing returns those of manager mid's tasks tids that its task set does not
// hold (delivered, their result waiting in the result list; withdrawn; or
// lost with Redis's data), and the set's count of submitted tasks and epoch
// (see Submitted), read in the same script call as the check, one call per
// 1,000 tasks. If they differ between calls (Redis lost data meanwhile, or
// clients moved to another server), it returns ErrChanged.
func (r *Broker) Missing(ctx context.Context, p *broker.MissingParams) (_ *broker.MissingResult, err error) {
	mid, tids := p.Manager, p.Tasks
	var missing []string
	var count int64
	var epoch string
	count = -1
	ks := []string{keys.Tasks(r.prefix, r.queue, mid)}
	for first := true; first || len(tids) > 0; first = false {
		n := min(len(tids), maxGroup)
		args := make([]any, n)
		for i, t := range tids[:n] {
			args[i] = t
		}
		got, err := missingScript.run(ctx, r.c, ks, args...).Slice()
		if err != nil {
			return nil, onKey(wrap("check data", missingScript, "", err), ks[0])
		}
		c, ok1 := got[0].(int64)
		e, ok2 := got[1].(string)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("check data: script returned %v, not a count and an epoch", got[:2])
		}
		if count >= 0 && (c != count || e != epoch) {
			return nil, ErrChanged
		}
		count, epoch = c, e
		for _, v := range got[2:] {
			tid, ok := v.(string)
			if !ok {
				return nil, fmt.Errorf("check data: script returned %T, not a task id", v)
			}
			missing = append(missing, tid)
		}
		tids = tids[n:]
	}
	return &broker.MissingResult{Missing: missing, Count: count, Epoch: epoch}, nil
}

// ErrChanged says that Redis's data changed under a check that needs it still.
var ErrChanged = errors.New("redis data changed during the check")
