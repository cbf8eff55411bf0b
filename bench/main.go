// Command bench measures redmap against hand-written Redis list queues on the
// same server in the same run, and prints a markdown table and one summary
// line per scenario.
//
//	go run ./bench          # full sizes (a few minutes)
//	go run ./bench -quick   # small sizes (under a minute)
//	go run ./bench -cluster 3 -shards 1,2,3 -scenario tiny,unchunked
//	                        # a sharded queue on a local 3-master Cluster
//
// It starts its own redis-server on a free port, or uses REDIS_URL. Workers
// run as processes of their own, as users run them: redmap's worker, or a
// baseline's GOMAXPROCS worker goroutines, in this binary started again as a
// worker (-inprocess runs both in this process instead; the managers and
// compute scenario's local pool always do). The table gives, per contender, the CPU time
// Redis, this process (the manager) and the worker processes spent.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redmap/redmap/connect"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/manager"
)

func main() {
	// go-redis logs its dial retries on stderr by itself; through slog at
	// debug level they stay out of the figures.
	connect.RouteLogs(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if runWorkerProcess() || runBaselineProcess() || runPoolProcess() {
		return
	}
	quick := flag.Bool("quick", false, "small sizes: the whole run in a few minutes")
	runs := flag.Int("runs", 3, "runs of each scenario, its contenders interleaved; medians and spread are reported")
	inproc := flag.Bool("inprocess", false, "run redmap's workers in this process instead of as worker processes")
	workerProfile := flag.String("workerprofile", "", "each worker process writes a CPU profile to this path.<pid>")
	only := flag.String("scenario", "", "run only these scenarios (comma-separated)")
	commands := flag.Bool("commands", false, "print the Redis commands and scripts each redmap run calls, with their Redis time per element (SLOWLOG; slows Redis a little)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the run (manager and workers) to this file")
	cluster := flag.Int("cluster", 0, "start a local Redis Cluster of this many masters and run on it (instead of one server; REDIS_URL wins)")
	flag.IntVar(&fixedChunk, "fixed-chunk", fixedChunk, "values per chunk of the (fixed-width) chunked baseline, to try its variants")
	flag.IntVar(&fixedPipeline, "fixed-pipeline", fixedPipeline, "chunks per pipelined push of the chunked baseline, to try its variants")
	traced := flag.Bool("traced", false, "trace every redmap batch and task (an OpenTelemetry SDK provider whose exporter drops the spans): the cost of tracing on")
	scrape := flag.Bool("scrape", false, "instead of the scenarios, measure what one scrape of redmap metrics costs (time, Redis CPU, round trips) on a queue of 1,000 running batches and 100,000 waiting tasks, beside the leanest scraper of waiting tasks")
	plot = flag.String("plot", "", "with the scale scenario: draw its curve (tasks/s and Redis CPU per task against workers) into this SVG file")
	shardList := flag.String("shards", "", "in the tiny and unchunked scenarios, one redmap contender per shard count in this comma-separated list (manager.Options.Shards), e.g. 1,2,3")
	workerList := flag.String("scale-workers", "", "with the scale scenario: the worker processes of each fleet it measures, comma-separated (default 1,2,4,...,64)")
	taskList := flag.String("scale-tasks", "", "with the scale scenario: the task lengths it measures, comma-separated (default 1ms,10ms)")
	flag.Parse()
	traceEverything(*traced)
	if err := parseScale(*workerList, *taskList); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	shards, err := parseShards(*shardList)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: -shards:", err)
		os.Exit(2)
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	if *workerProfile != "" {
		os.Setenv(workerProfileEnv, *workerProfile)
	}
	if *scrape {
		*only = "-" // no scenario: run measures the scrape alone
	}
	scrapeOnly = *scrape
	if err := run(*quick, *only, *runs, *inproc, *commands, *cluster, shards); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// plot is -plot: where the scale scenario's curve is drawn, if anywhere.
var plot *string

// env is what every scenario works with.
type env struct {
	rdb      redis.UniversalClient
	url      string // the Redis URL, for the worker processes too
	port     int
	quick    bool
	slots    int       // worker slots: GOMAXPROCS
	inproc   bool      // redmap workers in this process (-inprocess)
	commands bool      // -commands: log the redmap contenders' commands
	shards   []int     // -shards: a redmap contender per shard count
	children *children // worker processes alive
}

// parseShards reads -shards: positive counts, comma-separated.
func parseShards(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > manager.MaxShards {
			return nil, fmt.Errorf("%q is not a shard count (1 to %d)", f, manager.MaxShards)
		}
		out = append(out, n)
	}
	return out, nil
}

// connect makes e.rdb a client of e.url, with a pool large enough for the
// blocking pops of many baseline workers at once.
func (e *env) connect() error {
	u := e.url
	if !strings.Contains(u, "pool_size=") && !strings.HasPrefix(u, "redis-sentinel:") {
		sep := "?"
		if strings.Contains(u, "?") {
			sep = "&"
		}
		u += sep + "pool_size=100"
	}
	c, err := connect.URL(u)
	if err != nil {
		return fmt.Errorf("REDIS_URL: %w", err)
	}
	e.rdb = c
	return nil
}

// row is one measured contender in one scenario.
type row struct {
	scenario, contender string
	elements            int
	elapsed             time.Duration
	p50, p99            time.Duration   // latency scenarios only
	allocs              float64         // heap allocations per element, manager and workers together
	redisCPU            time.Duration   // CPU Redis spent (its process's, INFO cpu: commands, networking, its event loop)
	redisCmd            time.Duration   // of which running commands (INFO commandstats' usec, scripts' inner commands within their script's)
	redisCPUs           []time.Duration // on a Cluster, each master's share of it
	managerCPU          time.Duration   // CPU this process spent (with -inprocess, the workers' too)
	workerCPU           time.Duration   // CPU the worker processes spent
	bytes               int64           // bytes that crossed Redis (in and out), where measured
	note                string
	rates               []float64 // with several runs: each run's elements/s
	redisPeak, heapPeak int64     // where measured: Redis's used_memory and the manager's heap (HeapAlloc) at their peak, above their start (medians of the runs)
	livePeak            int64     // where measured: the manager's live heap (as of its GCs) at its peak, above its start (median)
	workerRSS           int64     // where measured: the worker processes' peak RSS, summed (median)
}

func (r row) rate() float64 {
	if len(r.rates) > 0 {
		return median(r.rates)
	}
	return float64(r.elements) / r.elapsed.Seconds()
}

// spread says how the runs' rates spread: "min–max", or "-" for one run.
func (r row) spread() string {
	if len(r.rates) < 2 {
		return "-"
	}
	return fmt.Sprintf("%.0f–%.0f", slices.Min(r.rates), slices.Max(r.rates))
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// merge folds the rows of several runs of one scenario into one row per
// contender: median elements/s with the spread, median latencies and CPU
// times, the last run's note and per-master CPU.
func merge(runs [][]row) []row {
	var out []row
	index := map[string]int{}
	var p50s, p99s = map[string][]time.Duration{}, map[string][]time.Duration{}
	mcpu, wcpu := map[string][]time.Duration{}, map[string][]time.Duration{}
	rcpu, rcmd := map[string][]time.Duration{}, map[string][]time.Duration{}
	rpeak, hpeak, lpeak, wrss := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
	for _, rows := range runs {
		for _, r := range rows {
			k := r.scenario + "\x00" + r.contender
			i, ok := index[k]
			if !ok {
				i = len(out)
				index[k] = i
				out = append(out, r)
			}
			out[i].rates = append(out[i].rates, float64(r.elements)/r.elapsed.Seconds())
			out[i].note, out[i].redisCPU, out[i].redisCPUs, out[i].allocs = r.note, r.redisCPU, r.redisCPUs, r.allocs
			mcpu[k], wcpu[k] = append(mcpu[k], r.managerCPU), append(wcpu[k], r.workerCPU)
			rcpu[k], rcmd[k] = append(rcpu[k], r.redisCPU), append(rcmd[k], r.redisCmd)
			rpeak[k], hpeak[k] = append(rpeak[k], float64(r.redisPeak)), append(hpeak[k], float64(r.heapPeak))
			lpeak[k], wrss[k] = append(lpeak[k], float64(r.livePeak)), append(wrss[k], float64(r.workerRSS))
			if r.p50 > 0 {
				p50s[k], p99s[k] = append(p50s[k], r.p50), append(p99s[k], r.p99)
			}
		}
	}
	for k, i := range index {
		out[i].managerCPU, out[i].workerCPU = medianDur(mcpu[k]), medianDur(wcpu[k])
		out[i].redisCPU, out[i].redisCmd = medianDur(rcpu[k]), medianDur(rcmd[k])
		out[i].redisPeak, out[i].heapPeak, out[i].livePeak = int64(median(rpeak[k])), int64(median(hpeak[k])), int64(median(lpeak[k]))
		out[i].workerRSS = int64(median(wrss[k]))
		if len(p50s[k]) > 0 {
			out[i].p50, out[i].p99 = medianDur(p50s[k]), medianDur(p99s[k])
		}
	}
	return out
}

func medianDur(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func run(quick bool, only string, runs int, inproc, commands bool, cluster int, shards []int) error {
	e := &env{quick: quick, slots: runtime.GOMAXPROCS(0), inproc: inproc, commands: commands, shards: shards, children: &children{}}
	e.url = os.Getenv("REDIS_URL")
	if e.url == "" && cluster > 0 {
		cl, err := redistest.StartClusterServers(cluster)
		if err != nil {
			return err
		}
		defer cl.Stop()
		e.url = cl.URL()
	}
	if e.url == "" {
		srv, err := redistest.StartServer()
		if err != nil {
			return err
		}
		defer srv.Stop()
		e.url, e.port = srv.URL(), srv.Port
	}
	if err := e.connect(); err != nil {
		return err
	}
	defer e.rdb.Close()
	if err := e.rdb.Ping(context.Background()).Err(); err != nil {
		return err
	}
	where := "one worker process with GOMAXPROCS slots"
	if inproc {
		where = "one in-process worker with GOMAXPROCS slots"
	}
	fmt.Printf("machine: %d CPUs (GOMAXPROCS %d), %s, %s; redis-server %s; redmap workers: %s (unless a scenario says); %d runs per scenario, contenders interleaved\n\n",
		runtime.NumCPU(), e.slots, runtime.GOOS+"/"+runtime.GOARCH, runtime.Version(), e.redisVersion(), where, runs)

	if scrapeOnly {
		return runScrape(e)
	}
	var rows []row
	for _, sc := range scenarios {
		if only != "" && !slices.Contains(strings.Split(only, ","), sc.name) {
			continue
		}
		var all [][]row
		for i := range max(runs, 1) {
			fmt.Fprintf(os.Stderr, "scenario %s, run %d...\n", sc.name, i+1)
			got, err := sc.run(e)
			if err != nil {
				return fmt.Errorf("%s: %w", sc.name, err)
			}
			all = append(all, got)
		}
		rows = append(rows, merge(all)...)
	}
	if only == "" || strings.Contains(only, "ceiling") {
		if r, ok := e.redisBenchmark(); ok {
			rows = append(rows, r)
		}
	}
	printTable(rows)
	for _, r := range rows {
		if r.note != "" {
			fmt.Printf("%s, %s: %s\n", r.scenario, r.contender, r.note)
		}
	}
	fmt.Println()
	printSummary(rows)
	printPipeline(rows)
	printScale(rows)
	if *plot != "" {
		if err := writeScalePlot(*plot, rows); err != nil {
			return fmt.Errorf("-plot: %w", err)
		}
		fmt.Println("scale plot written to", *plot)
	}
	return nil
}

// measure runs f, which handles n elements, and records its time, its heap
// allocations per element and the CPU Redis spent meanwhile.
func (e *env) measure(scenario, contender string, n int, f func() error) (row, error) {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	logged := e.commands && (strings.HasPrefix(contender, "redmap") || scenario == "scale")
	if logged {
		commandLog{e}.start(n)
	}
	cpu0, cmd0, self0, kids0 := e.redisCPUTimes(), e.redisCommandTime(), selfCPU(), e.children.cpu()
	start := time.Now()
	err := f()
	elapsed := time.Since(start)
	self, kids, cpu1, cmd1 := selfCPU()-self0, workerCPU(kids0, e.children.cpu()), e.redisCPUTimes(), e.redisCommandTime()
	if logged && err == nil {
		err = commandLog{e}.report(scenario+", "+contender, n)
	}
	runtime.ReadMemStats(&after)
	return row{
		scenario: scenario, contender: contender, elements: n, elapsed: elapsed,
		allocs:     float64(after.Mallocs-before.Mallocs) / float64(n),
		managerCPU: self, workerCPU: kids, redisCPUs: cpuSince(cpu0, cpu1),
		redisCPU: sum(cpu1) - sum(cpu0), redisCmd: cmd1 - cmd0,
	}, err
}

// cpuSince returns each server's CPU between two readings, or nil for one
// server (or if the set of masters changed).
func cpuSince(before, after []time.Duration) []time.Duration {
	if len(before) < 2 || len(before) != len(after) {
		return nil
	}
	out := make([]time.Duration, len(after))
	for i := range after {
		out[i] = after[i] - before[i]
	}
	return out
}

func sum(ds []time.Duration) time.Duration {
	var t time.Duration
	for _, d := range ds {
		t += d
	}
	return t
}

var (
	cpuLine     = regexp.MustCompile(`used_cpu_(sys|user):([0-9.]+)`)
	commandLine = regexp.MustCompile(`(?m)^cmdstat_[^:]+:calls=\d+,usec=(\d+),`)
)

// redisCPUTimes returns the CPU each Redis server has used: the one server,
// or a Cluster's masters in address order.
func (e *env) redisCPUTimes() []time.Duration {
	return e.eachServer(func(c redis.Cmdable) time.Duration {
		info, err := c.Info(context.Background(), "cpu").Result()
		if err != nil {
			return 0
		}
		var total float64
		for _, m := range cpuLine.FindAllStringSubmatch(info, -1) {
			v, _ := strconv.ParseFloat(m[2], 64)
			total += v
		}
		return time.Duration(total * float64(time.Second))
	})
}

// redisCommandTime returns the time the Redis servers spent running
// commands, all of them together (INFO commandstats): the part of their
// CPU that is not networking or the event loop. A script's inner commands
// are counted in their own lines and in the script's, so only EVAL and
// EVALSHA lines would double them: they are left out, the inner
// commands standing for them (the script's own Lua time is lost).
func (e *env) redisCommandTime() time.Duration {
	return sum(e.eachServer(func(c redis.Cmdable) time.Duration {
		info, err := c.Info(context.Background(), "commandstats").Result()
		if err != nil {
			return 0
		}
		var total int64
		for _, line := range strings.Split(info, "\n") {
			if strings.HasPrefix(line, "cmdstat_eval") {
				continue
			}
			if m := commandLine.FindStringSubmatch(line); m != nil {
				v, _ := strconv.ParseInt(m[1], 10, 64)
				total += v
			}
		}
		return time.Duration(total) * time.Microsecond
	}))
}

// eachServer returns of of each Redis server: the one server, or a
// Cluster's masters in address order.
func (e *env) eachServer(of func(c redis.Cmdable) time.Duration) []time.Duration {
	cc, ok := e.rdb.(*redis.ClusterClient)
	if !ok {
		return []time.Duration{of(e.rdb)}
	}
	addrs := e.masters(cc)
	slices.Sort(addrs)
	out := make([]time.Duration, len(addrs))
	for i, addr := range addrs {
		c := redis.NewClient(&redis.Options{Addr: addr})
		out[i] = of(c)
		c.Close()
	}
	return out
}

// masters returns the addresses of a Cluster's masters.
func (e *env) masters(cc *redis.ClusterClient) []string {
	var mu sync.Mutex
	var addrs []string
	cc.ForEachMaster(context.Background(), func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		addrs = append(addrs, c.Options().Addr)
		mu.Unlock()
		return nil
	})
	return addrs
}

func (e *env) redisVersion() string {
	info, _ := e.rdb.Info(context.Background(), "server").Result()
	if m := regexp.MustCompile(`redis_version:(\S+)`).FindStringSubmatch(info); m != nil {
		return m[1]
	}
	return "?"
}

// redisBenchmark runs redis-benchmark -P 100 LPUSH, the raw ceiling of list
// pushes on this server, when the binary exists and the server is ours.
func (e *env) redisBenchmark() (row, bool) {
	bin, err := exec.LookPath("redis-benchmark")
	if err != nil || e.port == 0 {
		return row{}, false
	}
	n := 2_000_000
	if e.quick {
		n = 300_000
	}
	out, err := exec.Command(bin, "-p", strconv.Itoa(e.port), "-P", "100", "-n", strconv.Itoa(n), "-t", "lpush", "-q").Output()
	if err != nil {
		return row{}, false
	}
	m := regexp.MustCompile(`LPUSH: ([0-9.]+) requests per second`).FindSubmatch(out)
	if m == nil {
		return row{}, false
	}
	rps, _ := strconv.ParseFloat(string(m[1]), 64)
	e.rdb.FlushAll(context.Background())
	return row{scenario: "ceiling", contender: "redis-benchmark -P 100 LPUSH", elements: n,
		elapsed: time.Duration(float64(n) / rps * float64(time.Second)), note: "raw pushes, no work, no results"}, true
}

func printTable(rows []row) {
	fmt.Println("| scenario | contender | elements | elements/s (median) | spread | p50 | p99 | allocs/element | Redis CPU | manager CPU | worker CPU |")
	fmt.Println("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, r := range rows {
		p50, p99 := "-", "-"
		if r.p50 > 0 {
			p50, p99 = fmtDur(r.p50), fmtDur(r.p99)
		}
		allocs := fmt.Sprintf("%.1f", r.allocs)
		if r.scenario == "ceiling" {
			allocs = "-"
		}
		fmt.Printf("| %s | %s | %d | %.0f | %s | %s | %s | %s | %s | %s | %s |\n",
			r.scenario, r.contender, r.elements, r.rate(), r.spread(), p50, p99, allocs, redisCPU(r),
			r.managerCPU.Round(time.Millisecond), r.workerCPU.Round(10*time.Millisecond))
	}
	fmt.Println()
}

// redisCPU says what CPU Redis spent for r: on a Cluster, the sum and each
// master's share (the last run's).
func redisCPU(r row) string {
	s := r.redisCPU.Round(time.Millisecond).String()
	if r.redisCmd > 0 {
		s += " (commands " + r.redisCmd.Round(time.Millisecond).String() + ")"
	}
	if len(r.redisCPUs) > 1 {
		parts := make([]string, len(r.redisCPUs))
		for i, d := range r.redisCPUs {
			parts[i] = d.Round(time.Millisecond).String()
		}
		s += " (" + strings.Join(parts, " / ") + ")"
	}
	return s
}

func fmtDur(d time.Duration) string {
	return fmt.Sprintf("%.3f ms", float64(d)/float64(time.Millisecond))
}

// printSummary prints, per scenario, redmap's rate against the best of the
// baselines that return results ("chunked" where it ran).
func printSummary(rows []row) {
	by := map[string][]row{}
	var order []string
	for _, r := range rows {
		if _, ok := by[r.scenario]; !ok {
			order = append(order, r.scenario)
		}
		by[r.scenario] = append(by[r.scenario], r)
	}
	for _, sc := range order {
		var rm, base *row
		for i := range by[sc] {
			r := &by[sc][i]
			switch {
			case r.contender == "redmap", sc == "compute" && r.contender == "redmap MapReduce":
				rm = r
			case r.contender == "chunked baseline" && sc != "unchunked" && sc != "latency",
				r.contender == "batched baseline" && sc == "unchunked",
				r.contender == "per-task baseline" && (sc == "latency" || sc == "fanout"),
				r.contender == "local goroutine pool, own process":
				base = r
			}
		}
		if rm == nil {
			continue
		}
		if sc == "latency" {
			fmt.Printf("%s: redmap p50 %s, p99 %s", sc, fmtDur(rm.p50), fmtDur(rm.p99))
			if base != nil {
				fmt.Printf(" (%s p50 %s, p99 %s)", base.contender, fmtDur(base.p50), fmtDur(base.p99))
			}
			fmt.Println()
			continue
		}
		if base == nil {
			fmt.Printf("%s: redmap %.0f elements/s\n", sc, rm.rate())
			continue
		}
		if sc == "fanout" {
			fmt.Printf("%s: redmap %.0f elements/s = %.2fx %s; a call's p50 %s, p99 %s (%s)\n", sc, rm.rate(), rm.rate()/base.rate(),
				base.contender, fmtDur(rm.p50), fmtDur(rm.p99), fmtDur(base.p99))
			continue
		}
		fmt.Printf("%s: redmap %.0f elements/s = %.2fx %s", sc, rm.rate(), rm.rate()/base.rate(), base.contender)
		if rm.managerCPU > 0 && base.managerCPU > 0 && base.workerCPU > 0 && sc != "compute" { // both with worker processes
			per := func(r *row) float64 { return float64(r.elements) / r.managerCPU.Seconds() }
			fmt.Printf("; per second of manager CPU %.0f = %.2fx", per(rm), per(rm)/per(base))
		}
		for _, r := range by[sc] {
			if sc == "compute" && r.contender == "local goroutine pool" {
				fmt.Printf("; %.2fx the pool in the bench process", rm.rate()/r.rate())
			}
		}
		fmt.Println()
	}
}
