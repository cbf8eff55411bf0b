package redisbroker

import (
	"context"
	"fmt"
	"time"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/keys"
)

// Heartbeat registers worker wid, or renews its lease, for lease from now by
// the Redis clock, and publishes info for operators (nil: none). One script
// call; on shard 0, at the first call and then every keys.QueueIndexEvery,
// one more to name the queue in the index of queues.
func (r *Broker) Heartbeat(ctx context.Context, p *broker.HeartbeatParams) (*wire.Beat, error) {
	wid, lease, info := p.Worker, p.Lease, p.Info
	ks := []string{keys.Workers(r.prefix, r.queue), keys.WorkerInfo(r.prefix, r.queue, wid), keys.Drain(r.prefix, r.queue, wid),
		keys.ShardNames(r.prefix, r.queue)}
	args := []any{wid, lease.Milliseconds(), keys.GoneFor.Milliseconds()}
	if info != nil {
		args = append(args, wire.EncodeWorkerInfo(*info)...)
	}
	n, err := heartbeatScript.run(ctx, r.c, ks, args...).Int64Slice()
	if err != nil {
		return nil, wrap("heartbeat", heartbeatScript, "", err)
	}
	r.nameQueue(ctx)
	if len(n) != 3 {
		return nil, fmt.Errorf("heartbeat: script returned %v, not 3 integers", n)
	}
	return &wire.Beat{Drain: n[1] == 1, Shards: int(n[2]) + 1}, nil
}

// Retire ends worker wid's lease now and reaps it, as if it had died: what
// it still holds goes back to the queue, and tasks left in its private list
// are reported lost to their managers, who would otherwise wait for them for
// ever. With info (shard 0), the worker is listed "stopped" for operators
// with that last info, for keys.GoneFor. A heartbeat's script call, then
// Reap's calls (one per ScriptBudget tasks left).
func (r *Broker) Retire(ctx context.Context, p *broker.RetireParams) (*wire.Reaped, error) {
	wid, info := p.Worker, p.Info
	if info != nil {
		stopped := *info
		stopped.State = "stopped"
		info = &stopped
	}
	if _, err := r.Heartbeat(ctx, &broker.HeartbeatParams{Worker: wid, Lease: -time.Millisecond, Info: info}); err != nil {
		return nil, fmt.Errorf("retire: %w", err)
	}
	if err := r.c.Del(ctx, keys.Drain(r.prefix, r.queue, wid)).Err(); err != nil {
		return nil, wrap("retire", nil, "DEL", err)
	}
	return r.Reap(ctx)
}

// LiveWorkers returns the ids of the queue's workers whose lease has not
// expired by the Redis clock.
func (r *Broker) LiveWorkers(ctx context.Context) ([]string, error) {
	ids, err := liveScript.run(ctx, r.c, []string{keys.Workers(r.prefix, r.queue)}).StringSlice()
	if err != nil {
		return nil, wrap("live workers", liveScript, "", err)
	}
	return ids, nil
}
