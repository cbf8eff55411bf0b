package manager_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
)

// Behind Sentinel, a failover may drop the old primary's last writes: a
// planned one (SENTINEL FAILOVER: the old primary takes writes for a moment
// after the promotion, then resyncs from the new one and loses them) and a
// primary killed before its last writes reached the replica. Every result
// must still be exact: the manager finds what it lost and submits it again.
func TestFaultSentinel(t *testing.T) {
	redistest.OwnTopology(t)
	for _, c := range []struct {
		name  string
		fault func(*redistest.Sentinel, testing.TB)
		loses bool // the fault drops acknowledged writes (set by the fault when it knows)
	}{
		{"planned failover", (*redistest.Sentinel).Failover, false},
		{"primary killed", (*redistest.Sentinel).KillPrimary, false},
		{"primary killed ahead of its replica", nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var m *manager.Manager
			if c.fault == nil {
				// The primary dies once it has two submits its replica
				// lacks: the feeder submits one window at a time, so the
				// first was acknowledged to the manager, which must find
				// it lost.
				c.fault = func(st *redistest.Sentinel, tb testing.TB) {
					tasks := keys.Tasks("redmap", "sentinel", m.ID())
					var counts []int64
					c.loses = st.KillPrimaryLosingWrites(tb, func(p *redis.Client) bool {
						n, _ := p.HGet(context.Background(), tasks, "_").Int64()
						if len(counts) == 0 || n > counts[len(counts)-1] {
							counts = append(counts, n)
						}
						return len(counts) >= 3
					})
				}
			}
			t.Parallel()
			st := redistest.StartSentinel(t)
			b := &harness.Env{Client: st.Client(t), Queue: "sentinel"}
			env := append([]string{"REDMAP_URL=redis-sentinel://" + strings.Join(st.Addrs(), ",") + "/0?master=" + redistest.MasterName, "REDMAP_QUEUE=" + b.Queue}, fastLease...)
			startChild(t, "worker", env...).Expect(t, "worker ")
			startChild(t, "worker", env...).Expect(t, "worker ")
			logs := &logRecorder{}
			m = b.Manager(t, manager.Options{Poll: 100 * time.Millisecond, Logger: slog.New(logs)})

			const n = 20_000
			batch, err := manager.Submit(testCtx(t), m, slowSquare, ints(n), manager.ChunkSize(2))
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			exactlyOnce(t, batch, sq, func(seen int) {
				if seen == n/5 {
					c.fault(st, t)
					t.Logf("%s after %v; new primary :%d", c.name, time.Since(start).Round(time.Millisecond), st.Primary(t).Port)
				}
			})
			found := logs.logged("Redis lost writes")
			t.Logf("%d elements exact in %v; the manager found lost writes: %v", n, time.Since(start).Round(time.Millisecond), found)
			if c.name == "primary killed ahead of its replica" {
				t.Logf("the promoted replica lacked writes of the old primary: %v", c.loses)
			}
			if c.loses && !found {
				t.Fatal("the primary died with writes its replica lacked, yet the manager found none lost")
			}
		})
	}
}
