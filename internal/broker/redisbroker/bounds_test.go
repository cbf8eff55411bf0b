package redisbroker

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/redistest"
)

// StagedSizes gives each entry the bytes it stands for, and Within packs
// them into calls of at most a budget, one item at least.
func TestStagedSizesAndWithin(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	staged := keys.Staged("rm", f.queue, f.mid)
	big := strings.Repeat("x", 3<<20)
	f.c.HSet(ctx, staged, "a", big, "b", "yy")
	entries := []string{"inline", wire.StagedPrefix + "a", wire.StagedPrefix + "b", wire.StagedPrefix + "gone"}
	sizes, err := f.r.StagedSizes(ctx, &broker.EntriesParams{Manager: f.mid, Entries: entries})
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{6, 3 << 20, 2, 0}; !equalInts(sizes, want) {
		t.Fatalf("sizes %v, want %v", sizes, want)
	}
	for _, c := range []struct {
		sizes  []int
		budget int
		want   int
	}{
		{[]int{3 * broker.CallBytes / 4, 3 * broker.CallBytes / 4}, broker.CallBytes, 1},
		{[]int{broker.CallBytes / 4, broker.CallBytes / 4, broker.CallBytes / 4, broker.CallBytes / 4, 1}, broker.CallBytes, 4},
		{[]int{9 * broker.CallBytes / 4, 1}, broker.CallBytes, 1}, // a larger item goes alone
		{[]int{10, 10, 10}, 1 << 30, 3}, // the budget is capped at CallBytes
		{[]int{broker.CallBytes / 4, broker.CallBytes / 4}, broker.CallBytes / 8 * 3, 1}, // a reduced budget
		{[]int{broker.CallBytes, 1}, 2 * broker.CallBytes, 1},                            // never past CallBytes
		{nil, broker.CallBytes, 0},
	} {
		if got := broker.Within(c.sizes, c.budget); got != c.want {
			t.Errorf("broker.Within(%v, %d) = %d, want %d", c.sizes, c.budget, got, c.want)
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The waits for results of one client take at most a quarter of its pool:
// with a pool of 4 connections, 12 managers' collectors waiting at once
// leave the pool to other calls (a PING answers), and each wait still
// brings its first entry without removing it.
func TestWaitsLeaveThePool(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 4, PoolTimeout: 500 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	q := redistest.Queue(t)
	ctx := context.Background()

	const waits = 12
	rs := make([]*Broker, waits)
	mids := make([]string, waits)
	got := make([]string, waits)
	errs := make([]error, waits)
	var wg sync.WaitGroup
	for i := range rs {
		rs[i], mids[i] = New(c, "rm", q), id.New()
		wg.Go(func() {
			got[i], errs[i] = rs[i].WaitResults(ctx, &broker.WaitResultsParams{Manager: mids[i], Timeout: 5 * time.Second})
		})
	}
	redistest.Eventually(t, "a blocking read per slot of the share, the rest waiting on the waiter", func() bool {
		w := rs[0].wait
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.nodes[""]) == 1 && len(w.waits) == waits-1
	})
	for range 3 {
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatalf("a PING while %d waits are in flight: %v", waits, err)
		}
	}
	for _, mid := range mids {
		c.RPush(ctx, keys.Results("rm", q, mid), "entry "+mid)
	}
	wg.Wait()
	for i, mid := range mids {
		if errs[i] != nil || got[i] != "entry "+mid {
			t.Errorf("wait %d: %q, %v; want %q", i, got[i], errs[i], "entry "+mid)
		}
		if n := c.LLen(ctx, keys.Results("rm", q, mid)).Val(); n != 1 {
			t.Errorf("wait %d removed its entry: %d left, want 1", i, n)
		}
	}
	// A wait beyond the share ends at its timeout with nothing.
	release, _ := rs[0].wait.block(ctx, "") // the share's one slot
	defer release()
	e, err := New(c, "rm", q).WaitResults(ctx, &broker.WaitResultsParams{Manager: id.New(), Timeout: time.Second})
	if err != nil || e != "" {
		t.Fatalf("a wait on an empty list: %q, %v; want nothing at its timeout", e, err)
	}
}

// A submit whose later group Redis refuses (at maxmemory) says how many of
// its tasks the groups before it queued, and Redis holds exactly those: the
// caller sends only the rest again.
func TestSubmitSaysWhatItQueued(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, "--maxmemory", "32mb", "--maxmemory-policy", "noeviction")
	c := srv.Client(t)
	q, mid := redistest.Queue(t), id.New()
	r := New(c, "rm", q)
	ctx := context.Background()
	lane := wire.Lane{Name: mid + ".1", Calls: "f\tsig"}
	tasks := make([]wire.Task, 4*48) // 48 groups of 4, 48 MiB at a CallBytes of 1 MiB
	for i := range tasks {
		tasks[i] = wire.Task{ID: id.TaskIn(mid, uint64(i+1), 1, 1, keys.DefaultPriority, keys.DefaultPriority), Payload: []byte(strings.Repeat("p", broker.CallBytes/4))}
	}
	_, _, err := submitOf(r.Submit(ctx, &broker.SubmitParams{Manager: mid, Lane: lane, Tasks: tasks, TTL: time.Minute, Expect: wire.Expect{}}))
	var part *broker.PartlySubmitted
	if !errors.As(err, &part) || !broker.OutOfMemory(err) {
		t.Fatalf("err = %v; want a refusal at maxmemory after some groups", err)
	}
	if part.Queued == 0 || part.Queued%4 != 0 || part.Queued >= len(tasks) {
		t.Fatalf("queued %d of %d; want whole groups of 4, some but not all", part.Queued, len(tasks))
	}
	if n := c.LLen(ctx, keys.Lane("rm", q, lane.Name)).Val(); n != int64(part.Queued) || part.Count != int64(part.Queued) || !part.Intact {
		t.Fatalf("the lane holds %d, the count says %d (intact %v); want both %d", n, part.Count, part.Intact, part.Queued)
	}
	t.Logf("at maxmemory: %d of %d tasks queued, then %v", part.Queued, len(tasks), part.Err)
}

// A Cluster's pools are its nodes': the share of blocking reads is each
// node's. With a pool of 4 connections a node (a share of one), waits for
// lists on two masters both block (BLMOVE), none on the waiter's polling,
// and each brings its entry.
func TestWaitsShareEachNode(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), PoolSize: 4})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	// Two queues whose results lists lie on two different masters.
	var rs []*Broker
	var mids []string
	seen := map[string]bool{}
	for len(rs) < 2 {
		q, mid := redistest.Queue(t), id.New()
		m := cl.MasterOf(t, keys.Results("rm", q, mid)).Addr()
		if seen[m] {
			continue
		}
		seen[m] = true
		rs, mids = append(rs, New(c, "rm", q)), append(mids, mid)
	}
	got := make([]string, len(rs))
	errs := make([]error, len(rs))
	var wg sync.WaitGroup
	for i := range rs {
		wg.Go(func() {
			got[i], errs[i] = rs[i].WaitResults(ctx, &broker.WaitResultsParams{Manager: mids[i], Timeout: 10 * time.Second})
		})
	}
	w := rs[0].wait
	redistest.Eventually(t, "a blocking read on each master", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		held := 0
		for _, s := range w.nodes {
			held += len(s)
		}
		return held == 2
	})
	w.mu.Lock()
	polled := len(w.waits)
	w.mu.Unlock()
	if polled != 0 {
		t.Fatalf("%d waits on the waiter's polling; want each node's share to hold its own", polled)
	}
	for i, r := range rs {
		c.RPush(ctx, keys.Results("rm", r.queue, mids[i]), "entry "+mids[i])
	}
	wg.Wait()
	for i, mid := range mids {
		if errs[i] != nil || got[i] != "entry "+mid {
			t.Errorf("wait %d: %q, %v; want %q", i, got[i], errs[i], "entry "+mid)
		}
	}
}
