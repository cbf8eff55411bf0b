package manager_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
)

// TestChaos runs for REDMAP_CHAOS (a duration, for example 10m; skipped when
// unset; `make chaos`): three managers submit batch after batch, and a
// fourth runs pipeline after pipeline (chaosPipelines), through Sentinel,
// to four worker processes, while a driver draws a fault every
// 0.5-2 s: a worker SIGKILLed (and restarted), a worker SIGSTOPped for 0.2-3 s
// (past its 1 s lease or not), the primary restarted empty, FLUSHALL, every
// client connection dropped, a planned Sentinel failover, a durable batch's
// manager SIGKILLed, eviction (the primary's maxmemory set below what it
// holds, allkeys-lru, for 1-3 s), a foreign write (a string SET over one of
// the queue's keys, drawn at random), and the link of a fifth worker
// (through a proxy) throttled to 256 KiB/s or held for 1-3 s. It reports batches,
// elements, elements failed with an error (allowed: each says why), lost
// (never ended), duplicated, wrong and silently zero (a zero value with no
// error), and the longest stall between two results of a batch; lost,
// duplicated, wrong and silently zero must be 0.
func TestChaos(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("REDMAP_CHAOS"))
	if err != nil {
		t.Skip("set REDMAP_CHAOS to a duration (make chaos) to run")
	}
	st := redistest.StartSentinel(t)
	queue := "chaos"
	env := append([]string{"REDMAP_URL=redis-sentinel://" + strings.Join(st.Addrs(), ",") + "/0?master=" + redistest.MasterName, "REDMAP_QUEUE=" + queue, "REDMAP_CONCURRENCY=4"}, fastLease...)
	pick, started, stopFleet := chaosFleet(t, 4, env)
	defer stopFleet()
	link := chaosLink(t, st, queue)
	_, _, stopSlow := chaosFleet(t, 1, append([]string{"REDMAP_URL=redis://" + link.Addr() + "/0", "REDMAP_QUEUE=" + queue, "REDMAP_CONCURRENCY=4"}, fastLease...))
	defer stopSlow()

	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var tally chaosTally
	var managers sync.WaitGroup
	for i := range 4 {
		managers.Add(1)
		go func() {
			defer managers.Done()
			m, err := manager.New(st.Client(t), manager.Options{Queue: queue, Poll: 200 * time.Millisecond})
			if err != nil {
				t.Error(err)
				return
			}
			defer m.Close()
			if i == 3 {
				chaosPipelines(ctx, t, &tally, m)
				return
			}
			if i == 1 {
				defer func() {
					st := m.Stats()
					t.Logf("manager 1's backup tasks: %d started, %d won, %d wasted", st.BackupsStarted, st.BackupsWon, st.BackupsWasted)
				}()
			}
			if i == 2 {
				// Payloads and results over broker.Inline: beside the scripts.
				chaosBatches(ctx, t, &tally, func(ctx context.Context, n int) (*manager.Batch[string], error) {
					return manager.Submit(ctx, m, bigEcho, bigInput(n), manager.ChunkSize(1+rand.IntN(3)), manager.Attempts(20))
				}, bigWant, func() { dumpChaos(t, st, queue, m.ID()) }, stallProbe(st.Client(t), queue, m.ID))
				return
			}
			chaosBatches(ctx, t, &tally, func(ctx context.Context, n int) (*manager.Batch[int], error) {
				// Manager 1's batches run backup tasks (a SIGSTOPped worker is
				// a straggler): copies must never count twice.
				return manager.Submit(ctx, m, slowSquare, ints(n), manager.ChunkSize(1+rand.IntN(20)), manager.Attempts(20), manager.Backups(i == 1))
			}, sq, func() { dumpChaos(t, st, queue, m.ID()) }, stallProbe(st.Client(t), queue, m.ID))
		}()
	}

	durable := chaosDurable(ctx, t, env)

	faults := map[string]int{}
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(500+rand.IntN(1500)) * time.Millisecond):
		}
		if ctx.Err() != nil {
			break
		}
		var name string
		switch rand.IntN(10) {
		case 0:
			name = "worker SIGKILL"
			if c := pick(true); c != nil {
				c.Cmd.Process.Signal(syscall.SIGKILL)
			}
		case 1:
			name = "worker SIGSTOP"
			if c := pick(false); c != nil {
				c.Cmd.Process.Signal(syscall.SIGSTOP)
				time.AfterFunc(time.Duration(200+rand.IntN(2800))*time.Millisecond, func() { c.Cmd.Process.Signal(syscall.SIGCONT) })
			}
		case 2:
			name = "primary restarted empty"
			st.RestartPrimaryEmpty(t)
		case 3:
			name = "FLUSHALL"
			st.Primary(t).Client(t).FlushAll(context.Background())
		case 4:
			name = "connections dropped"
			st.DropClients(t)
		case 5:
			name = "Sentinel failover"
			if !st.StartFailover() {
				name += " (refused: one in progress)"
			}
		case 6:
			name = "manager SIGKILLed and restarted"
			if !durable.kill() {
				name += " (none running)"
			}
		case 7:
			name = "eviction"
			if err := evictFor(st.Primary(t), time.Duration(1000+rand.IntN(2000))*time.Millisecond); err != nil {
				name += fmt.Sprintf(" (%v)", err)
			}
		case 8:
			name = "foreign write"
			if k := foreignWrite(st.Primary(t), queue); k != "" {
				name += " over " + k
			}
		case 9:
			d := time.Duration(1000+rand.IntN(2000)) * time.Millisecond
			if rand.IntN(2) == 0 {
				name = "link throttled"
				link.Throttle(256 << 10)
				time.AfterFunc(d, func() { link.Throttle(0) })
			} else {
				name = "link held"
				link.Hold()
				time.AfterFunc(d, link.Release)
			}
		}
		faults[name]++
		tally.fault(name)
	}
	managers.Wait()
	durable.wait(t)
	tally.report(t, d, faults, started())
}

// chaosLink is a proxy to the primary of st, which follows the primary the
// sentinels name (checked every 200 ms): a fifth worker's link, which chaos
// throttles and holds.
func chaosLink(t *testing.T, st *redistest.Sentinel, queue string) *redistest.Proxy {
	first := st.Primary(t).Addr()
	link := redistest.StartProxy(t, first)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		cur := first
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if addr := primaryAddr(st); addr != "" && addr != cur {
				cur = addr
				link.Retarget(addr)
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return link
}

// primaryAddr is the address the first sentinel that answers names as the
// primary, or "".
func primaryAddr(st *redistest.Sentinel) string {
	for _, a := range st.Addrs() {
		c := redis.NewSentinelClient(&redis.Options{Addr: a})
		addr, err := c.GetMasterAddrByName(context.Background(), redistest.MasterName).Result()
		c.Close()
		if err == nil && len(addr) == 2 {
			return net.JoinHostPort(addr[0], addr[1])
		}
	}
	return ""
}

// evictFor sets s's maxmemory a quarter of its keys' bytes below what it
// holds, with the allkeys-lru policy, for d, then lifts it: Redis evicts
// keys the least recently used first, redmap's among them.
func evictFor(s *redistest.Server, d time.Duration) error {
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer c.Close()
	info, err := c.InfoMap(ctx, "memory").Result()
	if err != nil {
		return err
	}
	used, err := strconv.ParseInt(info["Memory"]["used_memory"], 10, 64)
	if err != nil {
		return err
	}
	dataset, err := strconv.ParseInt(info["Memory"]["used_memory_dataset"], 10, 64)
	if err != nil {
		return err
	}
	if err := c.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		return err
	}
	if err := c.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used-dataset/4, 10)).Err(); err != nil {
		return err
	}
	time.AfterFunc(d, func() {
		c := redis.NewClient(&redis.Options{Addr: s.Addr()})
		defer c.Close()
		c.ConfigSet(context.Background(), "maxmemory", "0") // the server may have restarted since: then it has none
	})
	return nil
}

// foreignWrite SETs a string over one of queue's keys on s, drawn at
// random, as an application sharing the database might, and returns the
// key's name after the queue's hash tag, or "" if it found none.
func foreignWrite(s *redistest.Server, queue string) string {
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer c.Close()
	keys, _, err := c.Scan(ctx, 0, "redmap:{"+queue+"}:*", 1000).Result()
	if err != nil || len(keys) == 0 {
		return ""
	}
	k := keys[rand.IntN(len(keys))]
	if c.Set(ctx, k, "foreign", 0).Err() != nil {
		return ""
	}
	_, name, _ := strings.Cut(k, "}:")
	return name
}

// durableChaos runs durable batches in manager processes, one after
// another, through a chaos run: kill SIGKILLs the one running, which is
// started again with the same name until it ends exact (its own check:
// each index read once, each value right or a typed error).
type durableChaos struct {
	mu       sync.Mutex
	cur      *harness.Proc
	killed   bool
	batches  int // ended exact
	restarts int
	failed   int // elements failed with a typed error
	done     chan struct{}
}

// chaosDurable starts the durable manager processes of a chaos run, each a
// batch of 3,000 elements of 1 ms named "chaos-<n>", until ctx ends.
func chaosDurable(ctx context.Context, t *testing.T, env []string) *durableChaos {
	d := &durableChaos{done: make(chan struct{})}
	go func() {
		defer close(d.done)
		for k := 0; ctx.Err() == nil; k++ {
			env := append(slices.Clone(env), "REDMAP_N=3000", "REDMAP_ATTEMPTS=20", fmt.Sprintf("REDMAP_DURABLE=chaos-%d", k))
			for {
				p := startChild(t, "manager-durable", env...)
				d.mu.Lock()
				d.cur, d.killed = p, false
				d.mu.Unlock()
				exact := ""
				for line := range p.Out() {
					if rest, ok := strings.CutPrefix(line, "exact "); ok {
						exact = rest
					}
				}
				<-p.Exited()
				d.mu.Lock()
				killed := d.killed
				d.cur = nil
				d.mu.Unlock()
				if killed {
					d.mu.Lock()
					d.restarts++
					d.mu.Unlock()
					continue
				}
				var failed int
				if _, err := fmt.Sscan(exact, &failed); p.Err() != nil || err != nil {
					t.Errorf("durable batch chaos-%d: its manager exited with %v (printed exact %q): %s", k, p.Err(), exact, p.Tail())
					return
				}
				d.mu.Lock()
				d.batches++
				d.failed += failed
				d.mu.Unlock()
				break
			}
		}
	}()
	return d
}

// kill SIGKILLs the durable batch's manager running, if one is; its
// program is started again.
func (d *durableChaos) kill() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cur == nil {
		return false
	}
	d.killed = true
	d.cur.Cmd.Process.Signal(syscall.SIGKILL)
	return true
}

// wait waits for the last durable batch to end exact, and reports.
func (d *durableChaos) wait(t *testing.T) {
	select {
	case <-d.done:
	case <-time.After(3 * time.Minute):
		t.Error("the last durable batch did not end within 3 minutes of the chaos")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	t.Logf("durable batches: %d ended exact across %d manager kills (restarted with the same name), %d elements failed with an error; 0 lost, duplicated, wrong or silently zero (each checked by its manager)",
		d.batches, d.restarts, d.failed)
	if d.batches == 0 {
		t.Error("no durable batch ended during the chaos run")
	}
}

// chaosFleet keeps n worker processes of env running (a new one replaces
// each that exits) until stop; pick returns one of them at random, or nil,
// and forgets it if remove (it is about to be killed).
func chaosFleet(t *testing.T, n int, env []string) (pick func(remove bool) *harness.Proc, started func() int, stop func()) {
	var mu sync.Mutex
	var children []*harness.Proc
	started, stop = superviseWith(t, n, env, func(c *harness.Proc) {
		mu.Lock()
		children = append(children, c)
		mu.Unlock()
	})
	pick = func(remove bool) *harness.Proc {
		mu.Lock()
		defer mu.Unlock()
		if len(children) == 0 {
			return nil
		}
		i := rand.IntN(len(children))
		c := children[i]
		if remove {
			children = append(children[:i], children[i+1:]...)
		}
		return c
	}
	return pick, started, stop
}

// chaosTally counts what the batches of a chaos run saw.
type chaosTally struct {
	batches, elements, failed, lost, duplicated, wrong, zero atomic.Int64
	// pipelines run, those whose outputs equal the sequential program's,
	// and those that ended with an error (which says why)
	pipelines, pipelinesExact, pipelinesFailed atomic.Int64
	mu                                         sync.Mutex
	stall                                      time.Duration
	stallEnd                                   time.Time    // when the longest stall ended
	stallProbes                                []string     // what the longest stall's batch waited on, each second
	faults                                     []chaosFault // every fault drawn, in order
	causes                                     map[string]int
}

// digits are what cause blanks out of an error's message, so that the
// same cause of many elements (tasks, ids, counts) is counted once.
var digits = regexp.MustCompile(`[0-9a-f]{6,}|[0-9]+`)

// cause counts an element's error by its message, numbers and ids blanked.
func (c *chaosTally) cause(err error) { c.causeN(err, 1) }

// causeN counts n elements' error, as cause does.
func (c *chaosTally) causeN(err error, n int) {
	msg := digits.ReplaceAllString(err.Error(), "#")
	c.mu.Lock()
	if c.causes == nil {
		c.causes = map[string]int{}
	}
	c.causes[msg] += n
	c.mu.Unlock()
}

// chaosFault is a fault a chaos run drew, and when.
type chaosFault struct {
	at   time.Time
	name string
}

// noteStall records a gap between a batch's results, with what its probe
// said during it.
func (c *chaosTally) noteStall(gap time.Duration, probes []string) {
	c.mu.Lock()
	if gap > c.stall {
		c.stall, c.stallEnd, c.stallProbes = gap, time.Now(), probes
	}
	c.mu.Unlock()
}

// fault records a fault drawn now, so that the report can say which came
// before the longest stall.
func (c *chaosTally) fault(name string) {
	c.mu.Lock()
	c.faults = append(c.faults, chaosFault{time.Now(), name})
	c.mu.Unlock()
}

// aroundStall says which faults were drawn from 5 s before the longest
// stall began to its end, each with its time from the stall's start.
func (c *chaosTally) aroundStall() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	start := c.stallEnd.Add(-c.stall)
	var out []string
	for _, f := range c.faults {
		if f.at.After(start.Add(-5*time.Second)) && f.at.Before(c.stallEnd) {
			out = append(out, fmt.Sprintf("%+.1fs %s", f.at.Sub(start).Seconds(), f.name))
		}
	}
	return strings.Join(out, ", ")
}

// report logs the run's figures and fails t if an element was lost,
// duplicated, wrong or silently zero.
func (c *chaosTally) report(t *testing.T, d time.Duration, faults map[string]int, workers int) {
	t.Logf("chaos for %v: faults %v; %d workers started", d, faults, workers)
	t.Logf("%d batches, %d elements: %d failed with an error, %d lost, %d duplicated, %d wrong, %d silently zero; longest stall %v",
		c.batches.Load(), c.elements.Load(), c.failed.Load(), c.lost.Load(), c.duplicated.Load(), c.wrong.Load(), c.zero.Load(), c.stall.Round(time.Millisecond))
	t.Logf("%d pipelines (FlatThen, Then, ByKey, ByKey, Then): %d exact, %d ended with an error",
		c.pipelines.Load(), c.pipelinesExact.Load(), c.pipelinesFailed.Load())
	c.mu.Lock()
	causes := slices.Collect(maps.Keys(c.causes))
	slices.SortFunc(causes, func(a, b string) int { return c.causes[b] - c.causes[a] })
	for _, k := range causes {
		t.Logf("%d elements failed with: %s", c.causes[k], k)
	}
	c.mu.Unlock()
	t.Logf("faults from 5 s before the longest stall (from %s) to its end (time from its start): %s",
		c.stallEnd.Add(-c.stall).Format("15:04:05.000"), c.aroundStall())
	if len(c.stallProbes) > 0 {
		t.Logf("where the stalled batch's tasks were, each second from its third (time from its start):\n  %s", strings.Join(c.stallProbes, "\n  "))
	}
	if c.lost.Load()+c.duplicated.Load()+c.wrong.Load()+c.zero.Load() != 0 {
		t.Fatal("elements lost, duplicated, wrong or silently zero")
	}
	if c.pipelines.Load() > 0 && c.pipelinesExact.Load() == 0 {
		t.Fatal("no pipeline gave its exact outputs")
	}
	if c.stall > maxStall {
		t.Fatalf("a batch stalled %v, over the bound of %v (docs/guarantees.md): see the faults and probes above", c.stall.Round(time.Millisecond), maxStall)
	}
}

// maxStall is the longest a chaos run lets a batch go without a result
// (docs/guarantees.md): the slowest single fault's recovery (a Cluster
// master's kill -9: the node timeout plus the election, 3.5-4.7 s; a
// worker SIGSTOPped past its lease: the lease, then a reap) plus a margin
// for the next fault drawn during it.
const maxStall = 15 * time.Second

// chaosBatches submits batch after batch of 500-3,500 elements until ctx
// ends, reads every result as it comes and tallies it against want; stuck
// is called for a batch that ended with an error other than its elements'.
//
// While a batch gets no result for 3 s or more, probe (if not nil) is
// asked each second where its tasks are, and what it says is kept with the
// stall if it is the longest.
func chaosBatches[T comparable](ctx context.Context, t *testing.T, c *chaosTally,
	submit func(context.Context, int) (*manager.Batch[T], error), want func(int) T, stuck func(), probe func() string) {
	var zero T
	spoiled := false // the last submit was refused for a spoiled task set
	for ctx.Err() == nil {
		n := 500 + rand.IntN(3000)
		bctx, bcancel := context.WithTimeout(context.Background(), 3*time.Minute)
		batch, err := submit(bctx, n)
		if err != nil {
			bcancel()
			// Redis is restarting or failing over, or is at maxmemory (an
			// eviction drawn below what it can free): a typed error, counted.
			if errors.Is(err, redmap.ErrUnavailable) || errors.Is(err, redmap.ErrRedisFull) {
				c.failed.Add(int64(n))
				c.causeN(fmt.Errorf("submit: %w", err), n)
				time.Sleep(100 * time.Millisecond)
				continue
			}
			// A foreign write over the manager's task set refuses the
			// submit that meets it, naming the key; the set is set aside
			// then, so the next submit must not be refused so.
			var ce *redmap.CommandError
			if errors.As(err, &ce) && strings.HasSuffix(ce.Key, ":tasks") && !spoiled {
				c.failed.Add(int64(n))
				c.causeN(fmt.Errorf("submit: %w", err), n)
				spoiled = true
				continue
			}
			t.Errorf("submit: %v", err)
			return
		}
		spoiled = false
		seen := make([]int, n)
		w := watchStall(probe)
		for r := range batch.Results() {
			c.noteStall(w.progress())
			seen[r.Index]++
			switch w := want(r.Index); {
			case r.Err != nil:
				c.failed.Add(1)
				c.cause(r.Err)
			case r.Value == zero && w != zero:
				c.zero.Add(1)
				t.Errorf("element %d: zero with no error", r.Index)
			case r.Value != w:
				c.wrong.Add(1)
				t.Errorf("element %d: %v, want %v", r.Index, r.Value, w)
			}
		}
		c.noteStall(w.progress())
		w.stop()
		if _, err := batch.Wait(bctx); err != nil && !errors.As(err, new(*redmap.BatchError)) {
			t.Errorf("batch of %d ended with %v", n, err)
			stuck()
		}
		bcancel()
		for _, k := range seen {
			switch {
			case k == 0:
				c.lost.Add(1)
			case k > 1:
				c.duplicated.Add(int64(k - 1))
			}
		}
		c.elements.Add(int64(n))
		c.batches.Add(1)
	}
}

// chaosPipelines runs pipeline after pipeline of 200-1,000 documents
// (tokens, upper, one, sum, byLetter, top3, line) on m until ctx ends: one
// that ends without an error must give the sequential program's outputs
// exactly; one that ends with an error must say why (a *redmap.BatchError
// naming its failed elements, or a typed error of the whole run), counted
// as the failure of its input elements.
func chaosPipelines(ctx context.Context, t *testing.T, c *chaosTally, m *manager.Manager) {
	for ctx.Err() == nil {
		docs := letterDocs(200+rand.IntN(800), 300)
		want := topLines(docs)
		pctx, pcancel := context.WithTimeout(context.Background(), 3*time.Minute)
		got, err := manager.Collect(pctx, m, topPipeline(docs, tokens), manager.ChunkSize(1+rand.IntN(20)), manager.Attempts(20))
		pcancel()
		c.pipelines.Add(1)
		c.elements.Add(int64(len(docs)))
		var be *redmap.BatchError
		switch {
		case err == nil:
			slices.Sort(got)
			if !slices.Equal(got, want) {
				c.wrong.Add(1)
				t.Errorf("a pipeline of %d documents gave\n%q\nwant\n%q", len(docs), got, want)
				continue
			}
			c.pipelinesExact.Add(1)
		case errors.As(err, &be), errors.Is(err, redmap.ErrUnavailable), errors.Is(err, redmap.ErrRedisFull), errors.Is(err, redmap.ErrLost):
			c.pipelinesFailed.Add(1)
			c.failed.Add(int64(len(docs)))
			c.causeN(fmt.Errorf("pipeline: %w", err), len(docs))
		default:
			c.pipelinesFailed.Add(1)
			t.Errorf("a pipeline of %d documents ended with an untyped error: %v", len(docs), err)
		}
	}
}

// stallWatch asks a probe each second of a stall where a batch's tasks
// are.
type stallWatch struct {
	mu     sync.Mutex
	last   time.Time
	probes []string
	done   chan struct{}
}

func watchStall(probe func() string) *stallWatch {
	w := &stallWatch{last: time.Now(), done: make(chan struct{})}
	if probe == nil {
		return w
	}
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-w.done:
				return
			case <-tick.C:
			}
			w.mu.Lock()
			gap := time.Since(w.last)
			w.mu.Unlock()
			if gap < 3*time.Second {
				continue
			}
			line := fmt.Sprintf("+%.0fs %s", gap.Seconds(), probe())
			w.mu.Lock()
			w.probes = append(w.probes, line)
			w.mu.Unlock()
		}
	}()
	return w
}

// progress marks a result now, and returns the gap since the last one and
// what the probe said during it.
func (w *stallWatch) progress() (time.Duration, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	gap, probes := now.Sub(w.last), w.probes
	w.last, w.probes = now, nil
	return gap, probes
}

func (w *stallWatch) stop() { close(w.done) }

// dumpChaos logs the queue's keys as the primary has them, for a batch that
// did not end.
func dumpChaos(t *testing.T, st *redistest.Sentinel, queue, mid string) {
	ctx := context.Background()
	c := st.Client(t)
	ks, _ := c.Keys(ctx, "redmap:{"+queue+"}:*").Result()
	for _, k := range ks {
		switch c.Type(ctx, k).Val() {
		case "list":
			t.Logf("%s list %d", k, c.LLen(ctx, k).Val())
		case "set":
			t.Logf("%s set %d", k, c.SCard(ctx, k).Val())
		case "hash":
			t.Logf("%s hash %d _=%s", k, c.HLen(ctx, k).Val(), c.HGet(ctx, k, "_").Val())
		case "zset":
			t.Logf("%s zset %v", k, c.ZRangeWithScores(ctx, k, 0, -1).Val())
		}
	}
	t.Logf("stuck manager %s", mid)
}
