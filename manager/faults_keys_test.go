package manager_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// Faults of Redis's keys one at a time: a key lost (what an evicting
// maxmemory-policy does, or an operator's DEL), or foreign data written over
// one. The task set is the truth: whatever else goes, every element ends.

// keyBound is how long a test waits for every element of a batch to end
// after a key was lost or spoiled: the audit's bound (a few Polls) with room
// for a loaded machine.
const keyBound = 90 * time.Second

// longCtx returns a context that ends with the test, or after 5 minutes:
// longer than keyBound, so that a batch stalled by a fault is seen stalled,
// not cancelled.
func longCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// endsExact reads every result of batch, each of which must be want(i), and
// fails the test if the batch goes keyBound without a result while elements
// wait. during(seen) runs after each result.
func endsExact(t *testing.T, batch *manager.Batch[int], want func(i int) int, during func(seen int)) {
	t.Helper()
	seen := make([]int, batch.Len())
	n := 0
	results := make(chan manager.Result[int])
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		defer close(results)
		for r := range batch.Results() {
			select {
			case results <- r:
			case <-stop:
				return
			}
		}
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case r, ok := <-results:
			if !ok {
				for i, k := range seen {
					if k != 1 {
						t.Fatalf("element %d delivered %d times, want exactly once", i, k)
					}
				}
				if _, err := batch.Wait(longCtx(t)); err != nil {
					t.Fatalf("Wait: %v", err)
				}
				return
			}
			seen[r.Index]++
			if r.Err != nil || r.Value != want(r.Index) {
				t.Fatalf("element %d: %d, %v; want %d", r.Index, r.Value, r.Err, want(r.Index))
			}
			n++
			if during != nil {
				during(n)
			}
			// The bound runs from the last result: no element may wait
			// longer than that for the next one to end.
			timer.Reset(keyBound)
		case <-timer.C:
			t.Fatalf("%d of %d elements still waiting, none ended in %v", batch.Len()-n, batch.Len(), keyBound)
		}
	}
}

// laneOf returns the key of the lane of manager mid's batch on b's queue.
func laneOf(t *testing.T, b *harness.Env, mid string) string {
	t.Helper()
	for _, k := range b.Keys(t, keys.Base("redmap", b.Queue)+"l:"+mid+".*") {
		if !strings.HasSuffix(k, ":e") && !strings.HasSuffix(k, ":t") {
			return k
		}
	}
	t.Fatal("no lane found")
	return ""
}

// Each key a running batch needs for its liveness, deleted while worker
// processes run it (a held set with its worker SIGKILLed: a live worker
// reports what it holds whatever its set says; results lost with the result
// list): every element still ends, exactly once.
func TestFaultKeyLost(t *testing.T) {
	for _, kind := range []string{"lane", "ring", "lanes", "held", "private", "results"} {
		t.Run(kind, func(t *testing.T) {
			b := setup(t)
			logs := &logRecorder{}
			a, _, m := twoWorkersFor(t, b, manager.Options{Shards: 1, Logger: slog.New(logs)})
			ctx := context.Background()
			var opts []manager.CallOption
			if kind == "private" {
				opts = append(opts, manager.OnWorker(a.ID))
			}
			batch, err := manager.Submit(longCtx(t), m, calmSquare, ints(2000), append(opts, manager.ChunkSize(10))...)
			if err != nil {
				t.Fatal(err)
			}
			endsExact(t, batch, sq, func(seen int) {
				if seen != 200 {
					return
				}
				var key string
				switch kind {
				case "lane":
					key = laneOf(t, b, m.ID())
				case "ring":
					key = keys.Ring("redmap", b.Queue, keys.DefaultPriority)
				case "lanes":
					key = keys.Lanes("redmap", b.Queue, m.ID())
				case "held":
					a.Cmd.Process.Signal(syscall.SIGSTOP)
					key = keys.Held("redmap", b.Queue, a.ID)
					defer a.Cmd.Process.Signal(syscall.SIGKILL)
				case "private":
					key = keys.Private("redmap", b.Queue, a.ID)
				case "results":
					// What an evicted result list leaves: tasks answered
					// (gone from the lane and the task set), no result.
					// The collector reads a result as it comes, so the
					// list is made to lose them here, in one step.
					key = keys.Results("redmap", b.Queue, m.ID())
					gone, err := b.Client.Eval(ctx, `local ids = redis.call('LPOP', KEYS[1], 5)
for _, id in ipairs(ids) do redis.call('HDEL', KEYS[2], id) end
return #ids`, []string{laneOf(t, b, m.ID()), keys.Tasks("redmap", b.Queue, m.ID())}).Int()
					if err != nil || gone != 5 {
						t.Fatalf("answering 5 tasks with their results lost: %d, %v", gone, err)
					}
				}
				if kind != "results" {
					n, err := b.Client.Del(ctx, key).Result()
					if err != nil || n != 1 {
						t.Fatalf("DEL %s: %d, %v", key, n, err)
					}
				}
				t.Logf("lost %s after %d results", key, seen)
			})
			if !logs.logged("were queued again") && !logs.logged("submitting their tasks again") {
				t.Errorf("the manager did not say it queued tasks again: %q", logs.above(slog.LevelInfo))
			}
		})
	}
}

// Foreign data over a key of the queue (a string SET by another program):
// the queue keeps serving, the batch running on it ends exact, and another
// manager's Map on the same queue completes.
func TestFaultForeignData(t *testing.T) {
	for _, kind := range []string{"elements", "ring", "idle", "lane", "results", "staged"} {
		t.Run(kind, func(t *testing.T) {
			b := setup(t)
			_, _, m := twoWorkersFor(t, b, manager.Options{Shards: 1})
			other := b.Manager(t, manager.Options{Shards: 1})
			ctx := context.Background()
			batch, err := manager.Submit(longCtx(t), m, calmSquare, ints(2000), manager.ChunkSize(10))
			if err != nil {
				t.Fatal(err)
			}
			endsExact(t, batch, sq, func(seen int) {
				if seen != 200 {
					return
				}
				var key string
				switch kind {
				case "elements":
					key = laneOf(t, b, m.ID()) + ":e"
				case "ring":
					key = keys.Ring("redmap", b.Queue, keys.DefaultPriority)
				case "idle":
					key = keys.Idle("redmap", b.Queue)
				case "lane":
					key = laneOf(t, b, m.ID())
				case "results": // the manager's own: set aside, its results submitted again
					key = keys.Results("redmap", b.Queue, m.ID())
				case "staged":
					key = keys.Staged("redmap", b.Queue, m.ID())
				}
				if err := b.Client.Set(ctx, key, "not redmap's", 0).Err(); err != nil {
					t.Fatal(err)
				}
				t.Logf("foreign string over %s after %d results", key, seen)
				mctx, cancel := context.WithTimeout(ctx, keyBound)
				defer cancel()
				ys, err := manager.Map(mctx, other, slowSquare, ints(100), manager.ChunkSize(1))
				if err != nil {
					t.Fatalf("another manager's Map on the queue: %v", err)
				}
				for i, y := range ys {
					if y != i*i {
						t.Fatalf("another manager's element %d: %d", i, y)
					}
				}
			})
		})
	}
}

// A key a batch cannot do without (its manager's task set, which holds the
// payloads) holding foreign data: the batch fails with a *redmap.CommandError
// naming the key, within a Poll or so; another manager's Map on the same
// queue completes, and so do the manager's own next batches.
func TestFaultTaskSetForeign(t *testing.T) {
	b := setup(t)
	_, _, m := twoWorkersFor(t, b, manager.Options{Shards: 1})
	other := b.Manager(t, manager.Options{Shards: 1})
	ctx := context.Background()
	batch, err := manager.Submit(longCtx(t), m, calmSquare, ints(2000), manager.ChunkSize(10))
	if err != nil {
		t.Fatal(err)
	}
	key := keys.Tasks("redmap", b.Queue, m.ID())
	eventually(t, "a first result", func() bool { return batch.Progress().Done > 0 })
	if err := b.Client.Set(ctx, key, "not redmap's", 0).Err(); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, keyBound)
	defer cancel()
	_, err = batch.Wait(wctx)
	var ce *redmap.CommandError
	if !errors.As(err, &ce) {
		t.Fatalf("the batch: %v, want a *redmap.CommandError", err)
	}
	if ce.Key != key {
		t.Fatalf("the error names key %q, want %q: %v", ce.Key, key, ce)
	}
	t.Logf("the batch: %v", ce)
	mctx, cancel2 := context.WithTimeout(ctx, keyBound)
	defer cancel2()
	ys, err := manager.Map(mctx, other, slowSquare, ints(100), manager.ChunkSize(1))
	if err != nil || ys[99] != 99*99 {
		t.Fatalf("another manager's Map on the queue: %v", err)
	}
	// The set was set aside: the same manager's next batches run, every
	// element exact.
	for round := range 2 {
		ys, err = manager.Map(mctx, m, calmSquare, ints(300), manager.ChunkSize(10))
		if err != nil {
			t.Fatalf("the manager's Map %d after its task set was spoiled: %v", round, err)
		}
		for i, y := range ys {
			if y != i*i {
				t.Fatalf("the manager's Map %d, element %d: %d", round, i, y)
			}
		}
	}
}

// inflate returns 64 KiB for each element: outputs that fill a small Redis.
var inflate = redmap.Func("inflate", func(_ context.Context, i int) (string, error) {
	return fmt.Sprintf("%08d", i) + strings.Repeat("x", 64<<10-8), nil
})

// A Redis that evicts (maxmemory 20mb, allkeys-lru) under a durable batch
// whose outputs are larger than it: any of its keys may go at any time.
// Every element ends, with its value or a typed error; none waits for ever.
func TestFaultEvictingRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("128 MB of outputs through an evicting Redis")
	}
	srv := redistest.Start(t, "--maxmemory", "20mb", "--maxmemory-policy", "allkeys-lru")
	b := faultBundle(t, srv, srv.Addr())
	b.Worker(t, worker.Options{Concurrency: 4, Lease: time.Second, Heartbeat: 200 * time.Millisecond}, inflate)
	logs := &logRecorder{}
	m := b.Manager(t, manager.Options{Shards: 1, Logger: slog.New(logs)})
	batch, err := manager.Submit(longCtx(t), m, inflate, ints(2000), manager.ChunkSize(4), manager.Durable("evicted"))
	if err != nil {
		t.Fatal(err)
	}
	timer := time.NewTimer(3 * keyBound)
	defer timer.Stop()
	select {
	case <-batch.Done():
	case <-timer.C:
		p := batch.Progress()
		t.Fatalf("%d of %d elements still waiting after %v under eviction", p.Total-p.Done, p.Total, 3*keyBound)
	}
	ok, failed := 0, 0
	for r := range batch.Results() {
		switch {
		case r.Err == nil:
			if r.Value[:8] != fmt.Sprintf("%08d", r.Index) || len(r.Value) != 64<<10 {
				t.Fatalf("element %d: a wrong value", r.Index)
			}
			ok++
		default:
			var te *redmap.TaskError
			if !errors.As(r.Err, &te) {
				t.Fatalf("element %d: an untyped error %v", r.Index, r.Err)
			}
			failed++
		}
	}
	if ok+failed != 2000 {
		t.Fatalf("%d elements ended, want 2000", ok+failed)
	}
	evicted, _ := b.Client.Info(context.Background(), "stats").Result()
	t.Logf("%d values, %d typed errors; %s", ok, failed, statLine(evicted, "evicted_keys"))
	// What the manager did about it, each kind of warning once, counted.
	said := map[string]int{}
	var order []string
	for _, l := range logs.above(slog.LevelInfo) {
		msg, _, _ := strings.Cut(l, " task=")
		if said[msg]++; said[msg] == 1 {
			order = append(order, msg)
		}
	}
	for _, msg := range order {
		t.Logf("%d× %s", said[msg], msg)
	}
}

// statLine returns the line of INFO text info that names stat.
func statLine(info, stat string) string {
	for _, l := range strings.Split(info, "\n") {
		if strings.HasPrefix(l, stat+":") {
			return strings.TrimSpace(l)
		}
	}
	return stat + " unknown"
}

// The same losses on the other topologies: every key a batch needs for its
// liveness deleted on every shard of a manager spread over the three masters
// of a Cluster, and on a primary behind Sentinel. The audit runs per shard,
// so each shard heals its own.

// TestFaultKeyLostOnCluster runs a batch of a manager with 3 shards (one per
// master: its lanes, ring and lanes hash on each) on two worker processes,
// and once a tenth of it has ended loses, on every shard: "liveness" its
// lane(s), its ring and the manager's lanes hash, all at once; "held" the
// held set of a worker SIGSTOPped, then SIGKILLed; "evicted" what an
// evicting maxmemory-policy could take of those keys, a worker's private
// list and the manager's result list: one of them at random on each master,
// four times. Every element ends exactly once with its value. (The task set
// is not among them: an evicted task set fails its tasks with a typed error,
// TestFaultEvictingRedis.)
func TestFaultKeyLostOnCluster(t *testing.T) {
	redistest.OwnTopology(t)
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	for _, kind := range []string{"liveness", "held", "evicted"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel() // a queue of its own on the test's Cluster
			b := &harness.Env{Client: cl.Client(t), URL: cl.URL(), Queue: redistest.Queue(t)}
			names := loseKeys(t, b, 3, kind)
			masters := map[int]bool{}
			for _, name := range names {
				masters[cl.NodeOf(t, keys.Tasks("redmap", name, "x")).Port] = true
			}
			if len(masters) != 3 {
				t.Fatalf("shards %v are on %d masters, want 3", names, len(masters))
			}
		})
	}
}

// TestFaultKeyLostBehindSentinel is TestFaultKeyLost on a primary behind
// Sentinel, the workers and the manager connected through the sentinels.
func TestFaultKeyLostBehindSentinel(t *testing.T) {
	redistest.OwnTopology(t)
	t.Parallel()
	st := redistest.StartSentinel(t)
	url := "redis-sentinel://" + strings.Join(st.Addrs(), ",") + "/0?master=" + redistest.MasterName
	for _, kind := range []string{"lane", "ring", "lanes", "held"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel() // a queue of its own behind the test's Sentinel
			b := &harness.Env{Client: st.Client(t), URL: url, Queue: redistest.Queue(t)}
			loseKeys(t, b, 1, kind)
		})
	}
}

// loseKeys runs 3000 calm squares of a manager with shards shards on b's
// queue, on two worker processes, loses what kind names (see
// TestFaultKeyLost and TestFaultKeyLostOnCluster) on every shard once 300
// have ended, and checks that every element ends exactly once with its
// value, no result waiting more than keyBound after the one before. It
// returns the names of the queue's shards.
func loseKeys(t *testing.T, b *harness.Env, shards int, kind string) []string {
	t.Helper()
	logs := &logRecorder{}
	a, _, m := twoWorkersFor(t, b, manager.Options{Shards: shards, Logger: slog.New(logs)})
	ctx := context.Background()
	batch, err := manager.Submit(longCtx(t), m, calmSquare, ints(3000), manager.ChunkSize(10))
	if err != nil {
		t.Fatal(err)
	}
	names := shardNames(t, b.Client, b.Queue)
	if len(names) != shards {
		t.Fatalf("the queue has shards %v, want %d", names, shards)
	}
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 0))
	if kind == "evicted" {
		t.Logf("keys drawn with seed %d", seed)
	}
	lost := 0
	endsExact(t, batch, sq, func(seen int) {
		rounds := []int{300}
		if kind == "evicted" {
			rounds = []int{300, 600, 900, 1200}
		}
		if !slices.Contains(rounds, seen) {
			return
		}
		if kind == "held" {
			a.Cmd.Process.Signal(syscall.SIGSTOP)
			defer a.Cmd.Process.Signal(syscall.SIGKILL)
		}
		for _, name := range names {
			var gone []string
			switch kind {
			case "evicted":
				// Whatever is there now: a key may have emptied, and so
				// be gone, since it was listed.
				ks := evictable(t, b, name, m.ID())
				if len(ks) == 0 {
					continue
				}
				key := ks[rng.IntN(len(ks))]
				if n, err := b.Client.Del(ctx, key).Result(); err != nil {
					t.Fatalf("DEL %s: %v", key, err)
				} else if n == 1 {
					gone = append(gone, key)
				}
			default:
				for _, key := range livenessKeys(t, b, name, m.ID(), a.ID, kind) {
					n, err := b.Client.Del(ctx, key).Result()
					// A key listed may have emptied, and so be gone, since
					// (a loaded machine's workers took a shard's last
					// tasks); a stopped worker may hold nothing on a shard.
					// What was lost at all is checked below.
					if err != nil {
						t.Fatalf("DEL %s: %d, %v", key, n, err)
					}
					if n == 1 {
						gone = append(gone, key)
					}
				}
			}
			lost += len(gone)
			t.Logf("lost %v after %d results", gone, seen)
		}
	})
	if lost == 0 {
		t.Fatal("no key was lost")
	}
	if !logs.logged("were queued again") && !logs.logged("submitting their tasks again") {
		t.Errorf("the manager did not say it queued tasks again: %q", logs.above(slog.LevelInfo))
	}
	return names
}

// livenessKeys returns the keys of manager mid on shard (a shard's name)
// that kind names: "lane" its lanes, "ring" the shard's ring, "lanes" its
// lanes hash, "liveness" all three, "held" worker wid's held set.
func livenessKeys(t *testing.T, b *harness.Env, shard, mid, wid, kind string) []string {
	t.Helper()
	var out []string
	if kind == "lane" || kind == "liveness" {
		out = append(out, lanesOn(t, b, shard, mid)...)
		if len(out) == 0 {
			t.Fatalf("no lane of the manager on shard %s", shard)
		}
	}
	if kind == "ring" || kind == "liveness" {
		out = append(out, keys.Ring("redmap", shard, keys.DefaultPriority))
	}
	if kind == "lanes" || kind == "liveness" {
		out = append(out, keys.Lanes("redmap", shard, mid))
	}
	if kind == "held" {
		out = append(out, keys.Held("redmap", shard, wid))
	}
	return out
}

// lanesOn returns the keys of manager mid's lanes on shard.
func lanesOn(t *testing.T, b *harness.Env, shard, mid string) []string {
	t.Helper()
	var out []string
	for _, k := range b.Keys(t, keys.Glob(keys.Base("redmap", shard)+"l:"+mid+".")+"*") {
		if !strings.HasSuffix(k, ":e") && !strings.HasSuffix(k, ":t") {
			out = append(out, k)
		}
	}
	return out
}

// evictable returns the keys of shard that an evicting Redis may take from
// under manager mid's batch without its tasks being lost for good: its
// lanes, the shard's rings, its lanes hash, its result list, and every
// worker's held set and private list.
func evictable(t *testing.T, b *harness.Env, shard, mid string) []string {
	t.Helper()
	out := lanesOn(t, b, shard, mid)
	for _, k := range b.Keys(t, keys.Glob(keys.Base("redmap", shard))+"*") {
		switch {
		case slices.Contains(keys.Rings("redmap", shard), k),
			k == keys.Lanes("redmap", shard, mid),
			k == keys.Results("redmap", shard, mid),
			strings.HasSuffix(k, ":held"), strings.HasSuffix(k, ":private"):
			out = append(out, k)
		}
	}
	return out
}
