package manager_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
)

// A Cluster with a replica per master fails over in the middle of a batch:
// the master serving the queue's slot is killed (kill -9; the Cluster
// promotes its replica after the node timeout, 2 s here) or hands over to
// its replica (CLUSTER FAILOVER). Two worker processes and the manager
// connect through the Cluster's URL, as users' programs do; every element
// must end exact. The longest gap between two results (the stall) is
// logged with the promotion's own time: the stall is bounded by the node
// timeout plus a few seconds, which the log shows, not asserted on the
// clock.
func TestFaultClusterFailover(t *testing.T) {
	for _, c := range []struct {
		name   string
		shards int
		fault  func(t *testing.T, cl *redistest.Cluster, key string) (string, time.Duration)
	}{
		{"master killed", 1, func(t *testing.T, cl *redistest.Cluster, key string) (string, time.Duration) {
			killed, promoted, took := cl.KillMaster(t, key)
			return "kill -9 of master " + killed.Addr() + ", replica " + promoted.Addr() + " promoted", took
		}},
		{"planned failover", 1, func(t *testing.T, cl *redistest.Cluster, key string) (string, time.Duration) {
			old, promoted, took := cl.Failover(t, key)
			return "CLUSTER FAILOVER: " + promoted.Addr() + " took over from " + old.Addr(), took
		}},
		{"shard's master killed", 3, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cl := redistest.StartClusterReplicas(t, 3)
			client, err := redmap.Connect(cl.URLReplicas())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { client.Close() })
			b := &harness.Env{Client: client, URL: cl.URLReplicas(), Queue: "failover"}
			key := keys.Public("redmap", b.Queue)
			if c.shards > 1 {
				// Shard 1 of the queue, on a master of its own: its
				// name is the queue's list of shard names' first.
				c.fault = func(t *testing.T, cl *redistest.Cluster, _ string) (string, time.Duration) {
					names, err := client.LRange(context.Background(), keys.ShardNames("redmap", b.Queue), 0, -1).Result()
					if err != nil || len(names) != 2 {
						t.Fatalf("the queue's shard names: %v, %v; want 2", names, err)
					}
					shard := keys.Public("redmap", names[0])
					if cl.MasterOf(t, shard) == cl.MasterOf(t, key) {
						t.Fatalf("shard %s shares a master with shard 0", names[0])
					}
					killed, promoted, took := cl.KillMaster(t, shard)
					return "kill -9 of " + names[0] + "'s master " + killed.Addr() + ", replica " + promoted.Addr() + " promoted", took
				}
			}
			_, _, m := twoWorkersFor(t, b, manager.Options{Poll: 100 * time.Millisecond, Shards: c.shards,
				Logger: slog.New(&logRecorder{})})

			const n = 20_000
			batch, err := manager.Submit(testCtx(t), m, slowSquare, ints(n), manager.ChunkSize(2))
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			last, stall := start, time.Duration(0)
			done := make(chan string, 1)
			exactlyOnce(t, batch, sq, func(seen int) {
				now := time.Now()
				stall = max(stall, now.Sub(last))
				last = now
				if seen == n/5 {
					// The fault awaits the promotion; results go on
					// being read meanwhile, so the stall is the batch's.
					go func() {
						msg := "the fault failed" // t.Fatal ends this goroutine
						defer func() { done <- msg }()
						what, promotion := c.fault(t, cl, key)
						msg = fmt.Sprintf("%s after %v; every node says so %v after the fault", what,
							now.Sub(start).Round(time.Millisecond), promotion.Round(time.Millisecond))
					}()
				}
			})
			t.Log(<-done)
			t.Logf("%d elements exact in %v; longest stall between two results %v (node timeout 2s)",
				n, time.Since(start).Round(time.Millisecond), stall.Round(time.Millisecond))
		})
	}
}
