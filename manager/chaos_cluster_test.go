package manager_test

import (
	"context"
	"math/rand/v2"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redmap/redmap/connect"

	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
)

// TestChaosCluster is TestChaos on a Redis Cluster of 3 masters with a
// replica each, for REDMAP_CHAOS_CLUSTER (a duration; skipped when unset;
// `make chaos-cluster`): three managers — one spreading its tasks over 3
// shards (one per master), one with a constant (MapWith), one plain — submit
// batch after batch, and a fourth runs pipeline after pipeline
// (chaosPipelines), on four worker processes while a driver draws a fault
// every 0.5-2 s among: kill -9 of a master (its replica is promoted; the
// killed node restarts 1-3 s after the promotion and rejoins as a replica),
// a planned CLUSTER FAILOVER, a replica killed and restarted, the slot of
// one of the queue's shards migrated to another master, a worker SIGKILLed
// (and restarted) or SIGSTOPped for 0.2-3 s, and every client connection
// dropped. The faults that need a whole Cluster (a master's death, a
// failover, a migration, a replica's death) are drawn only while it is
// whole: every master with a synced replica. It reports as TestChaos does;
// lost, duplicated, wrong, silently zero and failed must all be 0.
func TestChaosCluster(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("REDMAP_CHAOS_CLUSTER"))
	if err != nil {
		t.Skip("set REDMAP_CHAOS_CLUSTER to a duration (make chaos-cluster) to run")
	}
	cl := redistest.StartClusterReplicas(t, 3)
	url := cl.URLReplicas()
	queue := "chaos"
	env := append([]string{"REDMAP_URL=" + url, "REDMAP_QUEUE=" + queue, "REDMAP_CONCURRENCY=4"}, fastLease...)
	pick, started, stopFleet := chaosFleet(t, 4, env)
	defer stopFleet()

	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var tally chaosTally
	var managers sync.WaitGroup
	tab := table(1 << 16)
	for i := range 4 {
		managers.Add(1)
		go func() {
			defer managers.Done()
			c, err := connect.URL(url)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			opts := manager.Options{Queue: queue, Poll: 200 * time.Millisecond}
			if i == 0 {
				opts.Shards = 3
			}
			m, err := manager.New(c, opts)
			if err != nil {
				t.Error(err)
				return
			}
			defer m.Close()
			if i == 0 {
				defer func() {
					st := m.Stats()
					t.Logf("manager 0's backup tasks: %d started, %d won, %d wasted", st.BackupsStarted, st.BackupsWon, st.BackupsWasted)
				}()
			}
			if i == 3 {
				chaosPipelines(ctx, t, &tally, m)
				return
			}
			stuck := func() { t.Logf("stuck manager %s", m.ID()) }
			probe := stallProbe(c, queue, m.ID)
			if i == 1 {
				chaosBatches(ctx, t, &tally, func(ctx context.Context, n int) (*manager.Batch[byte], error) {
					return manager.SubmitWith(ctx, m, lookup, tab, ints(n), manager.ChunkSize(1+rand.IntN(20)), manager.Attempts(20))
				}, func(i int) byte { return tab[i] }, stuck, probe)
				return
			}
			if i == 2 {
				// Payloads and results over broker.Inline: beside the scripts.
				chaosBatches(ctx, t, &tally, func(ctx context.Context, n int) (*manager.Batch[string], error) {
					return manager.Submit(ctx, m, bigEcho, bigInput(n), manager.ChunkSize(1+rand.IntN(3)), manager.Attempts(20))
				}, bigWant, stuck, probe)
				return
			}
			chaosBatches(ctx, t, &tally, func(ctx context.Context, n int) (*manager.Batch[int], error) {
				// Over 3 shards, with backup tasks: copies must never count twice.
				return manager.Submit(ctx, m, slowSquare, ints(n), manager.ChunkSize(1+rand.IntN(20)), manager.Attempts(20), manager.Backups(true))
			}, sq, stuck, probe)
		}()
	}

	// Killed nodes restart when due, from this goroutine: tests may fail
	// only from it.
	type restart struct {
		s  *redistest.Server
		at time.Time
	}
	var restarts []restart
	restartDue := func() {
		kept := restarts[:0]
		for _, r := range restarts {
			if time.Now().Before(r.at) {
				kept = append(kept, r)
				continue
			}
			r.s.Restart(t)
		}
		restarts = kept
	}
	later := func(s *redistest.Server, lo, hi int) {
		restarts = append(restarts, restart{s, time.Now().Add(time.Duration(lo+rand.IntN(hi-lo)) * time.Millisecond)})
	}
	faults := map[string]int{}
	var promotions []time.Duration
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(500+rand.IntN(1500)) * time.Millisecond):
		}
		restartDue()
		if ctx.Err() != nil {
			break
		}
		whole := len(restarts) == 0 && cl.Healthy()
		var name string
		switch k := rand.IntN(7); {
		case k == 0 && whole:
			ms := cl.Masters(t)
			m := ms[rand.IntN(len(ms))]
			_, took := cl.KillMasterNode(t, m)
			promotions = append(promotions, took)
			name = "master kill -9"
			later(m, 1000, 3000)
		case k == 1 && whole:
			ms := cl.Masters(t)
			_, took := cl.FailoverNode(t, ms[rand.IntN(len(ms))])
			promotions = append(promotions, took)
			name = "CLUSTER FAILOVER"
		case k == 2 && whole:
			rs := cl.ReplicasNow(t)
			r := rs[rand.IntN(len(rs))]
			r.Kill(t)
			name = "replica kill -9"
			later(r, 500, 2000)
		case k == 3 && whole:
			names := clusterShardNames(t, url, queue)
			key := keys.Workers("redmap", names[rand.IntN(len(names))])
			from := cl.MasterOf(t, key)
			var to *redistest.Server
			for _, m := range cl.Masters(t) {
				if m != from {
					to = m
				}
			}
			cl.MigrateSlot(t, key, to, 100, nil)
			name = "slot migrated"
		case k == 4:
			name = "worker SIGKILL"
			if c := pick(true); c != nil {
				c.Cmd.Process.Signal(syscall.SIGKILL)
			}
		case k == 5:
			name = "worker SIGSTOP"
			if c := pick(false); c != nil {
				c.Cmd.Process.Signal(syscall.SIGSTOP)
				time.AfterFunc(time.Duration(200+rand.IntN(2800))*time.Millisecond, func() { c.Cmd.Process.Signal(syscall.SIGCONT) })
			}
		default:
			name = "connections dropped"
			cl.DropClients()
		}
		faults[name]++
		tally.fault(name)
	}
	managers.Wait()
	var longest time.Duration
	for _, p := range promotions {
		longest = max(longest, p)
	}
	t.Logf("%d promotions, the longest seen on every node %v after its fault", len(promotions), longest.Round(time.Millisecond))
	tally.report(t, d, faults, started())
	if tally.failed.Load() != 0 {
		t.Fatal("elements failed: on a Cluster that fails over, none may")
	}
}

// clusterShardNames is shardNames with a client of its own (a fresh map of
// the Cluster's slots).
func clusterShardNames(t *testing.T, url, queue string) []string {
	c, err := connect.URL(url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return shardNames(t, c, queue)
}
