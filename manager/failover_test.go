package manager_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redmap/redmap/connect"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/cache"
	"github.com/redmap/redmap/codec"
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
			failoverTest(t)
			b, cl := clusterEnv(t, "failover")
			client := b.Client
			key := keys.Workers("redmap", b.Queue)
			if c.shards > 1 {
				// Shard 1 of the queue, on a master of its own: its
				// name is the queue's list of shard names' first.
				c.fault = func(t *testing.T, cl *redistest.Cluster, _ string) (string, time.Duration) {
					names, err := client.LRange(context.Background(), keys.ShardNames("redmap", b.Queue), 0, -1).Result()
					if err != nil || len(names) != 2 {
						t.Fatalf("the queue's shard names: %v, %v; want 2", names, err)
					}
					shard := keys.Workers("redmap", names[0])
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

// failoverTest skips t but in make test-cluster's first pass: each test of
// a Cluster failing over starts 6 nodes and runs worker processes, and runs
// once, not again in the pass of every queue over 3 shards (the tests that
// need shards ask for them).
func failoverTest(t *testing.T) {
	t.Helper()
	if os.Getenv(redistest.ClusterEnv) != "cluster" || redistest.Shards() > 0 {
		t.Skip("a Cluster failover test: make test-cluster runs it")
	}
	t.Parallel()
}

// clusterEnv is an Env on a Cluster with a replica per master, reached
// through connect.URL of its URL as users' programs reach it.
func clusterEnv(t *testing.T, queue string) (*harness.Env, *redistest.Cluster) {
	t.Helper()
	cl := redistest.StartClusterReplicas(t, 3)
	client, err := connect.URL(cl.URLReplicas())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return &harness.Env{Client: client, URL: cl.URLReplicas(), Queue: queue}, cl
}

// On a Cluster as behind Sentinel, replication is asynchronous: a master
// killed ahead of its replica takes its last writes with it. The manager
// must find what it lost and submit it again, for a queue and for one shard
// of a sharded queue (the other shards' masters keep theirs).
func TestFaultClusterLostWrites(t *testing.T) {
	for _, c := range []struct {
		name   string
		shards int
	}{{"queue", 1}, {"one shard of three", 3}} {
		t.Run(c.name, func(t *testing.T) {
			failoverTest(t)
			b, cl := clusterEnv(t, "lost")
			logs := &logRecorder{}
			_, _, m := twoWorkersFor(t, b, manager.Options{Poll: 100 * time.Millisecond, Shards: c.shards, Logger: slog.New(logs)})
			const n = 20_000
			batch, err := manager.Submit(testCtx(t), m, slowSquare, ints(n), manager.ChunkSize(2))
			if err != nil {
				t.Fatal(err)
			}
			var lost bool
			exactlyOnce(t, batch, sq, func(seen int) {
				if seen != n/5 {
					return
				}
				shard := b.Queue
				if c.shards > 1 {
					names, err := b.Client.LRange(context.Background(), keys.ShardNames("redmap", b.Queue), 0, -1).Result()
					if err != nil || len(names) != 2 {
						t.Fatalf("the queue's shard names: %v, %v; want 2", names, err)
					}
					shard = names[0]
				}
				// The master dies once it has two submits its replica
				// lacks: the first was acknowledged to the manager,
				// which must find it lost.
				tasks := keys.Tasks("redmap", shard, m.ID())
				var counts []int64
				var killed *redistest.Server
				killed, lost = cl.KillMasterLosingWrites(t, tasks, func(p *redis.Client) bool {
					k, _ := p.HGet(context.Background(), tasks, "_").Int64()
					if len(counts) == 0 || k > counts[len(counts)-1] {
						counts = append(counts, k)
					}
					return len(counts) >= 3
				})
				t.Logf("killed %s's master %s with submits %v since its replica's last sync; the promoted replica lacked them: %v",
					shard, killed.Addr(), counts, lost)
			})
			t.Logf("%d elements exact; the manager found lost writes: %v", n, logs.logged("Redis lost writes"))
			if lost {
				// The recoverer logs once its resubmit is in, and the
				// tasks it put back may all be done before that line
				// runs (a CI run, under load, checked in between): the
				// log is awaited, not read once.
				eventuallyWithin(t, 30*time.Second, "the manager's log that Redis lost writes (the master died with writes its replica lacked)", func() bool {
					return logs.logged("Redis lost writes")
				})
				if t.Failed() {
					t.Logf("the manager's warnings: %q", logs.above(slog.LevelInfo))
				}
			}
		})
	}
}

// A batch's constant lives in a slot of its own (by its hash), most often
// on another master than the queue's. Its master is killed after the upload
// and before its replica has it: the promoted replica lacks the object while
// the queue's master has every task. Workers started then find the constant
// missing; they wait for it, the manager stores it again (its hold renewal
// finds it gone), and every element is exact.
func TestFaultClusterConstantLost(t *testing.T) {
	failoverTest(t)
	tab := table(1 << 20)
	enc, err := codec.EncodeValue(&tab)
	if err != nil {
		t.Fatal(err)
	}
	obj := keys.Object("redmap", cache.Sum(enc))
	b, cl := clusterEnv(t, "")
	for i := 0; b.Queue == ""; i++ {
		if q := fmt.Sprintf("constant.%d", i); cl.MasterOf(t, keys.Workers("redmap", q)) != cl.MasterOf(t, obj) {
			b.Queue = q
		}
	}
	logs := &logRecorder{}
	m := b.Manager(t, manager.Options{Poll: 100 * time.Millisecond, Logger: slog.New(logs)})
	ctx := testCtx(t)

	cut := make(chan struct{})
	uploaded := make(chan struct{})
	var once sync.Once
	var batch *manager.Batch[byte]
	go func() {
		<-cut
		var err error
		batch, err = manager.SubmitWith(ctx, m, lookup, tab, ints(2000), manager.ChunkSize(5))
		if err != nil {
			t.Error(err)
		}
		close(uploaded)
	}()
	killed, lost := cl.KillMasterLosingWrites(t, obj, func(p *redis.Client) bool {
		once.Do(func() { close(cut) })
		select {
		case <-uploaded:
			return true
		default:
			return false
		}
	})
	if batch == nil {
		t.Fatal("no batch")
	}
	t.Logf("killed the constant's master %s after its upload; the promoted replica lacked it: %v", killed.Addr(), lost)
	if !lost {
		t.Fatal("the promoted replica had the constant: the test did not test")
	}
	startChild(t, "worker", childEnv(b)...).Expect(t, "worker ")
	startChild(t, "worker", childEnv(b)...).Expect(t, "worker ")
	ys, err := batch.Wait(ctx)
	if err != nil {
		n := m.Stats().ConstantUploads
		t.Logf("uploads %d; %q", n, logs.above(slog.LevelDebug))
		t.Fatal(err)
	}
	for i, y := range ys {
		if y != tab[i] {
			t.Fatalf("ys[%d] = %d, want %d", i, y, tab[i])
		}
	}
	if n := m.Stats().ConstantUploads; n != 2 {
		t.Fatalf("the constant was uploaded %d times, want 2 (once more after it was lost)", n)
	}
	t.Logf("2,000 lookups exact; the manager uploaded the constant again")
}
