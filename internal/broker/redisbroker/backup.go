package redisbroker

import (
	"context"
	"fmt"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/keys"
)

// copied prefixes a task's mark of its copy in its manager's attempt
// counts (prelude.lua's COPIED).
const copied = "+"

// Backup queues backup tasks of manager p.Manager's tasks p.Tasks (at most
// MaxBackups) on this shard, and records the races p.Races that ended
// (shard 0 only: the races are the queue's). One script call.
func (r *Broker) Backup(ctx context.Context, p *broker.BackupParams) ([]broker.Backup, error) {
	if len(p.Tasks) > broker.MaxBackups {
		return nil, fmt.Errorf("redisbroker: %d backup tasks in one call, at most %d", len(p.Tasks), broker.MaxBackups)
	}
	args := make([]any, 0, 2+len(p.Tasks)+2*len(p.Races))
	args = append(args, r.base, len(p.Tasks))
	for _, t := range p.Tasks {
		args = append(args, t)
	}
	for _, race := range p.Races {
		lost := "0"
		if race.Lost {
			lost = "1"
		}
		args = append(args, race.Worker, lost)
	}
	races := keys.Races(r.prefix, r.queue)
	ks := []string{keys.Backups(r.prefix, r.queue), keys.Idle(r.prefix, r.queue), keys.Workers(r.prefix, r.queue),
		keys.Tasks(r.prefix, r.queue, p.Manager), keys.Attempts(r.prefix, r.queue, p.Manager), races}
	v, err := backupScript.run(ctx, r.c, ks, args...).Slice()
	if err != nil {
		return nil, wrap("backup", backupScript, "", err)
	}
	if len(v) != len(p.Tasks) {
		return nil, fmt.Errorf("redisbroker: backup.lua answered %d states for %d tasks", len(v), len(p.Tasks))
	}
	out := make([]broker.Backup, len(v))
	for i, e := range v {
		pair, ok := e.([]any)
		if !ok || len(pair) != 2 {
			return nil, fmt.Errorf("redisbroker: backup.lua answered %v for task %s", e, p.Tasks[i])
		}
		state, _ := pair[0].(string)
		holder, _ := pair[1].(string)
		out[i] = broker.Backup{Task: p.Tasks[i], State: state, Holder: holder}
	}
	return out, nil
}
