package manager_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/inspect"
	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// Fleet-wide limits, tested the way users meet them: worker processes
// (the test binary as a child, see child_test.go) and the function keeping
// its own record of when it ran.

// rated is limited to 100 elements a second with bursts of 10; each run
// appends its start, Unix ns, to a file of its process's in
// REDMAP_STARTS_DIR.
var rated = redmap.Func("rated", func(_ context.Context, x int) (int, error) {
	if err := startLog.write(time.Now().UnixNano()); err != nil {
		return 0, err
	}
	return x, nil
}, redmap.Limit{Rate: 100, Per: time.Second, Burst: 10})

// capped may run 3 at once across the fleet; each run keeps the count of
// those running in the test's Redis (a sorted set of "<pid>:<x>" in
// REDMAP_URL's server), and the highest it saw, then takes 30 ms.
var capped = redmap.Func("capped", func(ctx context.Context, x int) (int, error) {
	c, key := runCounter()
	member := fmt.Sprintf("%d:%d", os.Getpid(), x)
	if err := enter.Run(ctx, c, []string{key, key + ":hwm"}, member).Err(); err != nil {
		return 0, err
	}
	defer c.ZRem(context.WithoutCancel(ctx), key, member)
	return x, pause(ctx, 30*time.Millisecond)
}, redmap.Limit{Concurrency: 3})

// freeSquare has no limit: it runs beside the limited ones at full speed.
var freeSquare = redmap.Func("freesq", func(_ context.Context, x int) (int, error) { return x * x, nil })

// enter adds a run to the running set and raises the high-water mark.
var enter = redis.NewScript(`
redis.call('ZADD', KEYS[1], 0, ARGV[1])
local n = redis.call('ZCARD', KEYS[1])
if n > tonumber(redis.call('GET', KEYS[2]) or '0') then
  redis.call('SET', KEYS[2], n)
end
return n`)

var (
	counterOnce sync.Once
	counter     redis.UniversalClient
)

// runCounter returns the child's client of the test's Redis and the key of
// its queue's running set.
func runCounter() (redis.UniversalClient, string) {
	counterOnce.Do(func() { counter, _ = childClient() })
	return counter, "running:{" + os.Getenv("REDMAP_QUEUE") + "}"
}

// startLog is the file a child's rated runs write their starts to.
var startLog = &lineFile{}

type lineFile struct {
	mu sync.Mutex
	f  *os.File
}

func (l *lineFile) write(ns int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		f, err := os.OpenFile(filepath.Join(os.Getenv("REDMAP_STARTS_DIR"), strconv.Itoa(os.Getpid())), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		l.f = f
	}
	// One write a line, straight to the kernel: a process SIGKILLed later
	// loses none.
	_, err := l.f.WriteString(strconv.FormatInt(ns, 10) + "\n")
	return err
}

// starts reads every start the children wrote in dir, sorted.
func starts(t *testing.T, dir string) []int64 {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	var out []int64
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			n, err := strconv.ParseInt(sc.Text(), 10, 64)
			if err != nil {
				t.Fatalf("%s: %q", name, sc.Text())
			}
			out = append(out, n)
		}
		f.Close()
	}
	slices.Sort(out)
	return out
}

// maxInWindow returns the most of sorted times ts within any window [t, t+w).
func maxInWindow(ts []int64, w time.Duration) int {
	best, j := 0, 0
	for i := range ts {
		for ts[i]-ts[j] >= int64(w) {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

// fleet starts n worker processes of concurrency 4 with env and waits until
// m sees them live.
func fleet(t *testing.T, b *harness.Env, m *manager.Manager, n int, env ...string) []*harness.Proc {
	t.Helper()
	ps := make([]*harness.Proc, n)
	ids := make([]string, n)
	for i := range ps {
		ps[i] = startChild(t, "worker", childEnv(b, append([]string{"REDMAP_CONCURRENCY=4"}, env...)...)...)
	}
	for i, p := range ps {
		ids[i] = p.Expect(t, "worker ")
		p.ID = ids[i]
	}
	harness.WaitLive(t, m, ids...)
	return ps
}

// A rate of 100 elements a second, bursts of 10, on 4 worker processes of
// concurrency 4: every second of the 1,000 elements' starts holds at most
// 110 of them (one burst more than the rate), and the whole takes at least
// the 9.9 s the limit allows. A function without a limit, submitted while
// the limited batch runs, is not held up behind it: it ends while most of
// the limited batch still waits.
func TestLimitRateHeldAcrossFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("10 s of a rate limit")
	}
	b := setup(t)
	dir := t.TempDir()
	m := b.Manager(t, manager.Options{})
	fleet(t, b, m, 4, "REDMAP_STARTS_DIR="+dir)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const n = 1000
	xs := make([]int, n)
	for i := range xs {
		xs[i] = i
	}
	// The unlimited function alone first, for comparison.
	alone := time.Now()
	if _, err := manager.Map(ctx, m, freeSquare, xs); err != nil {
		t.Fatal(err)
	}
	aloneTook := time.Since(alone)
	began := time.Now()
	limited, err := manager.Submit(ctx, m, rated, xs)
	if err != nil {
		t.Fatal(err)
	}
	free, err := manager.Submit(ctx, m, freeSquare, xs)
	if err != nil {
		t.Fatal(err)
	}
	ys, err := free.Wait(ctx)
	if err != nil || len(ys) != len(xs) || ys[n-1] != (n-1)*(n-1) {
		t.Fatalf("free batch: %d outputs, %v", len(ys), err)
	}
	freeTook := time.Since(began)
	lp := limited.Progress()
	if lp.Done > len(xs)/2 {
		t.Errorf("the unlimited batch ended only once %d of the limited batch's elements had: held up behind it", lp.Done)
	}
	out, err := limited.Wait(ctx)
	if err != nil || len(out) != len(xs) {
		t.Fatalf("limited batch: %d outputs, %v", len(out), err)
	}
	for i, y := range out {
		if y != i {
			t.Fatalf("element %d: %d", i, y)
		}
	}
	ts := starts(t, dir)
	if len(ts) != len(xs) {
		t.Fatalf("the function ran %d times, want %d (each element once)", len(ts), len(xs))
	}
	most := maxInWindow(ts, time.Second)
	span := time.Duration(ts[len(ts)-1] - ts[0])
	t.Logf("1,000 elements at 100/s burst 10 on 4 workers × 4: most starts in any 1 s window %d (bound 115); first to last start %v (the limit's 9.9 s); an unlimited batch of 1,000 took %v beside it (%d limited elements done by then), %v alone just before",
		most, span.Round(time.Millisecond), freeTook.Round(time.Millisecond), lp.Done, aloneTook.Round(time.Millisecond))
	// The limit admits at most 110 in any second (100 and a burst of 10),
	// by Redis's clock, in the take; the starts are the worker processes'
	// clocks when the function began, after the take's reply was decoded
	// and the task handed to a slot. A lag of up to 50 ms between the two,
	// which a loaded 2-core machine running other tests beside this one
	// shows, moves up to 5 more starts into a window than were admitted in
	// it. A limit not held across the fleet would let 4 workers start up to
	// 400 a second.
	if most > 115 {
		t.Errorf("%d elements started within one second; the limit allows 110, and 5 more for the lag between admission and start", most)
	}
	if span < 9500*time.Millisecond {
		t.Errorf("1,000 elements started within %v: faster than 100/s allows (9.9 s)", span)
	}
}

// A concurrency cap of 3 on 4 worker processes of concurrency 4: never
// more than 3 run at once, by the function's own count, though one worker
// is SIGKILLed mid-run (its slots come back once its lease lapses); every
// element has its result once, and the cap is used to the full.
func TestLimitConcurrencyHeldThroughKill(t *testing.T) {
	b := setup(t)
	m := b.Manager(t, manager.Options{})
	ps := fleet(t, b, m, 4)
	c, key := b.Client, "running:{"+b.Queue+"}"
	ctx := testCtx(t)
	xs := make([]int, 300)
	for i := range xs {
		xs[i] = i
	}
	batch, err := manager.Submit(ctx, m, capped, xs)
	if err != nil {
		t.Fatal(err)
	}
	killed := false
	n := 0
	seen := make([]int, len(xs))
	for r := range batch.Results() {
		if r.Err != nil || r.Value != r.Index {
			t.Fatalf("element %d: %d, %v", r.Index, r.Value, r.Err)
		}
		seen[r.Index]++
		if n++; n == 60 && !killed {
			// Kill a worker that runs one now, and forget its runs in the
			// function's count (a dead process's runs end with it).
			var victim *harness.Proc
			eventually(t, "a worker process running an element", func() bool {
				for _, mem := range c.ZRange(ctx, key, 0, -1).Val() {
					pid, _, _ := strings.Cut(mem, ":")
					for _, p := range ps {
						if strconv.Itoa(p.Cmd.Process.Pid) == pid {
							victim = p
							return true
						}
					}
				}
				return false
			})
			victim.Cmd.Process.Signal(syscall.SIGKILL)
			<-victim.Exited()
			for _, mem := range c.ZRange(ctx, key, 0, -1).Val() {
				if strings.HasPrefix(mem, strconv.Itoa(victim.Cmd.Process.Pid)+":") {
					c.ZRem(ctx, key, mem)
				}
			}
			killed = true
		}
	}
	if _, err := batch.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	for i, k := range seen {
		if k != 1 {
			t.Fatalf("element %d delivered %d times", i, k)
		}
	}
	hwm, _ := c.Get(ctx, key+":hwm").Int()
	t.Logf("concurrency cap 3, 4 workers × 4, one SIGKILLed mid-run: the function saw at most %d running at once", hwm)
	if hwm > 3 {
		t.Errorf("the function saw %d running at once; the cap is 3", hwm)
	}
	if hwm < 3 {
		t.Errorf("the function never saw 3 running at once: the cap of 3 was not used (high-water mark %d)", hwm)
	}
	if !killed {
		t.Error("no worker was killed")
	}
}

// While a limited function's tasks wait on their limit (its rate's next
// token an hour away), its workers sleep: they do not poll Redis in a
// loop. The test counts the takes the limit refuses over two seconds (a
// worker retakes once its bell wait, IdleWait, ends), and the commands
// Redis processes (those scripts run included) over two seconds with the
// fleet idle after a first batch (the manager's shards open), then over
// two seconds with 39 tasks waiting on the limit: the manager's upkeep of
// a running batch adds some, a take loop would add thousands.
func TestLimitWaitingWorkersSleep(t *testing.T) {
	redistest.Slow(t) // before its server starts: it starts worker processes
	t.Parallel()
	b := harness.On(t, redistest.Start(t)) // its own server: INFO counts every client's commands
	m := b.Manager(t, manager.Options{})
	// The default lease and heartbeat, as users run workers.
	fleet(t, b, m, 4, "REDMAP_LEASE_MS=10000", "REDMAP_HEARTBEAT_MS=1000")
	ctx := testCtx(t)
	in := newInspector(t, b)
	if _, err := manager.Map(ctx, m, square, make([]int, 100)); err != nil {
		t.Fatal(err)
	}
	if _, err := in.SetLimit(ctx, b.Queue, "freesq", redmap.Limit{Rate: 1, Per: time.Hour, Burst: 1}); err != nil {
		t.Fatal(err)
	}
	idle := commandsPerSecond(t, b.Client, 2*time.Second)
	batch, err := manager.Submit(ctx, m, freeSquare, make([]int, 40), manager.ChunkSize(1))
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for range batch.Results() {
		if got++; got == 1 {
			break // the one element the burst allows
		}
	}
	var refused int64
	eventually(t, "the limit refusing takes", func() bool {
		ls, err := in.Limits(ctx, b.Queue)
		i := slices.IndexFunc(ls, func(l inspect.Limit) bool { return l.Func == "freesq" })
		if err != nil || i < 0 {
			return false
		}
		refused = ls[i].Refused
		return refused > 0 && ls[i].Waiting == 39
	})
	waiting := commandsPerSecond(t, b.Client, 2*time.Second)
	ls, err := in.Limits(ctx, b.Queue)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(ls, func(l inspect.Limit) bool { return l.Func == "freesq" })
	t.Logf("4 workers (heartbeat 1 s, idle wait 1 s) and a manager (%d shards): %.1f Redis commands/s with no task anywhere; %.1f/s with 39 tasks waiting on a rate's next token (takes refused: %d before, %d after 2 s)",
		max(1, redistest.Shards()), idle, waiting, refused, ls[i].Refused)
	// Workers in a take loop would make thousands a second.
	if waiting > 2*idle+100 {
		t.Errorf("Redis processed %.0f commands/s while the fleet waited on a limit, %.0f/s idle: someone polls", waiting, idle)
	}
	if ls[i].Refused-refused > 4*3 {
		t.Errorf("the limit refused %d takes in 2 s of waiting: the workers retry it in a loop", ls[i].Refused-refused)
	}
	batch.Cancel()
}

// commandsPerSecond returns the commands the server of c processed a
// second over d (INFO stats), less the two INFOs.
func commandsPerSecond(t *testing.T, c redis.UniversalClient, d time.Duration) float64 {
	t.Helper()
	read := func() int64 {
		info, err := c.Info(context.Background(), "stats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "total_commands_processed:"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		t.Fatal("INFO stats has no total_commands_processed")
		return 0
	}
	before, at := read(), time.Now()
	time.Sleep(d) // a measurement over an interval, not a synchronisation
	after := read()
	return float64(after-before-1) / time.Since(at).Seconds()
}

// redmap.RetryAfter: the element waits and runs again without spending an
// attempt (the batch allows one), and past MaxRetryAfter it fails with
// ErrThrottled, the other elements completing; the worker and the
// function's limit count the waits.
func TestRetryAfterSpendsNoAttempt(t *testing.T) {
	b := setup(t)
	var mu sync.Mutex
	refusals := map[int]int{}
	fn := redmap.Func("busy-api", func(_ context.Context, x int) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		// Element 7 is refused for ever; the others twice each.
		if x == 7 || refusals[x] < 2 {
			refusals[x]++
			return 0, redmap.RetryAfter(5*time.Millisecond, errors.New("429 Too Many Requests"))
		}
		return x + 1, nil
	}, redmap.Limit{Rate: 10000, Burst: 100})
	w := b.Worker(t, worker.Options{Concurrency: 4}, fn)
	m := b.Manager(t, manager.Options{})
	ys, err := manager.Map(testCtx(t), m, fn, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, manager.Attempts(1), manager.MaxRetryAfter(4))
	var be *redmap.BatchError
	if !errors.As(err, &be) || len(be.Failed) != 1 || be.Failed[0].Index != 7 || !errors.Is(be.Failed[0], redmap.ErrThrottled) {
		t.Fatalf("Map: %v; want element 7 alone failed with ErrThrottled", err)
	}
	for i, y := range ys {
		if i != 7 && y != i+1 {
			t.Errorf("element %d: %d, want %d", i, y, i+1)
		}
	}
	if refusals[7] != 5 {
		t.Errorf("element 7 was refused %d times, want 5 (the first run and 4 waits)", refusals[7])
	}
	if st := w.Stats(); st.Throttled != 9*2+4 {
		t.Errorf("worker counted %d waits, want %d", st.Throttled, 9*2+4)
	}
	// The fleet's count, in the limits view (and its metric).
	ls, err := newInspector(t, b).Limits(context.Background(), b.Queue)
	if err != nil || len(ls) != 1 || ls[0].RetryAfter != 9*2+4 {
		t.Errorf("limits %+v (%v): want busy-api's %d RetryAfter waits counted", ls, err, 9*2+4)
	}
}

// newInspector returns an operator's view of b's Redis.
func newInspector(t *testing.T, b *harness.Env) *inspect.Inspector {
	t.Helper()
	in, err := inspect.New(b.Client, "")
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// A traced task held back by its function's limit has a "limit wait" event
// saying how long; an element answered RetryAfter has a "retry after" one.
func TestLimitWaitTraced(t *testing.T) {
	b := setup(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	var once sync.Once
	fn := redmap.Func("paced-traced", func(_ context.Context, x int) (int, error) {
		var err error
		if x == 2 {
			once.Do(func() { err = redmap.RetryAfter(time.Millisecond, errors.New("429")) })
		}
		return x, err
	}, redmap.Limit{Rate: 20, Per: time.Second, Burst: 1})
	b.Worker(t, worker.Options{Concurrency: 2, TracerProvider: tp}, fn)
	m := b.Manager(t, manager.Options{TracerProvider: tp})
	if _, err := manager.Map(testCtx(t), m, fn, []int{0, 1, 2, 3}, manager.ChunkSize(1)); err != nil {
		t.Fatal(err)
	}
	var held, after int
	for _, s := range exp.GetSpans() {
		for _, e := range s.Events {
			switch e.Name {
			case "limit wait":
				held++
				for _, a := range e.Attributes {
					if a.Key == "redmap.limit_wait_ms" && a.Value.AsFloat64() <= 0 {
						t.Errorf("a limit wait of %v ms", a.Value.AsFloat64())
					}
				}
			case "retry after":
				after++
			}
		}
	}
	// A burst of 1 at 20/s: the first task goes at once, the others wait
	// for their tokens at the head of the lane.
	if held == 0 || after != 1 {
		t.Errorf("%d limit wait events (want some), %d retry after events (want 1)", held, after)
	}
}
