package manager

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
)

// limits is what the manager knows of its functions' fleet-wide limits
// (redmap.Limit): per function, the limit in force as Redis said it when
// the manager last declared its handle's (or read, for a handle without
// one: an operator may limit any function), and when. A batch reads it
// before each window: a limited function's tasks go to shard 0, where its
// limit is enforced, in chunks of at most its burst.
type limits struct {
	mu   sync.Mutex
	read map[string]limitRead
}

type limitRead struct {
	lim wire.Limit
	at  time.Time
}

// limitOf returns the limit in force of sp's function: the one the manager
// read within the last Poll, else what Redis says now, declaring the
// handle's limit if it has one. One script call a Poll per function.
func (m *Manager) limitOf(ctx context.Context, sp spec) (wire.Limit, error) {
	m.limits.mu.Lock()
	r, ok := m.limits.read[sp.name]
	m.limits.mu.Unlock()
	if ok && time.Since(r.at) < m.opts.Poll {
		return r.lim, nil
	}
	var lim wire.Limit
	err := m.faults.callQueue(fmt.Sprintf("reading the limit of %q", sp.name), func() (err error) {
		if sp.limit.IsZero() {
			var got *broker.LimitResult
			if got, err = m.router.queue().ReadLimit(ctx, &broker.ReadLimitParams{Func: sp.name}); err == nil {
				lim = got.Limit
			}
			return err
		}
		var got *broker.LimitResult
		if got, err = m.router.queue().DeclareLimit(ctx, &broker.DeclareLimitParams{Func: sp.name, Record: limitRecord(sp.limit, "manager "+m.id)}); err == nil {
			lim = got.Limit
		}
		return err
	})
	if err != nil {
		return wire.Limit{}, err
	}
	m.limits.mu.Lock()
	if m.limits.read == nil {
		m.limits.read = make(map[string]limitRead)
	}
	m.limits.read[sp.name] = limitRead{lim: lim, at: time.Now()}
	m.limits.mu.Unlock()
	return lim, nil
}

// limitRecord returns the record of limit l written by who ("manager
// <id>") on this host now.
func limitRecord(l redmap.Limit, who string) wire.LimitRecord {
	l = l.Normal()
	host, _ := os.Hostname()
	return wire.NewLimitRecord(l.Rate, l.Per, l.Burst, l.Concurrency, who+" on "+host, time.Now())
}
