package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/manager"
)

// nap is the scale scenario's function: it returns x after x microseconds,
// a task whose length is a timer, not CPU, so that a 2-core machine can
// hold 64 workers' worth of slots and the ceiling found is Redis's.
var nap = redmap.Func("nap", func(ctx context.Context, x int) (int, error) {
	t := time.NewTimer(time.Duration(x) * time.Microsecond)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return x, nil
})

// scaleWorkers and scaleLengths, if set (-scale-workers, -scale-tasks),
// are the fleets and task lengths the scale scenario measures.
var (
	scaleWorkers []int
	scaleLengths []time.Duration
)

// scaleSlots is the concurrency of each of the scale scenario's workers.
const scaleSlots = 8

// scalePoint names one point of the scale model in its row's contender.
func scalePoint(length time.Duration, workers, shards int) string {
	s := fmt.Sprintf("%v tasks, %d workers x %d slots", length, workers, scaleSlots)
	if shards > 1 {
		s += fmt.Sprintf(", %d shards", shards)
	}
	return s
}

// scale: the scale model of issue 42. One task per element (ChunkSize(1)),
// each a timer of 1 ms (and 10 ms in a full run), run by 1, 2, 4, ... 64
// worker processes of 8 slots on one Redis (or a queue of -shards shards
// on a -cluster); one manager submits them all. Each point reports
// tasks/s and the Redis CPU per task; printScale finds where Redis
// saturates and how many workers one Redis core serves at each task
// length, and -plot draws the curve.
func scale(e *env) ([]row, error) {
	lengths := []time.Duration{time.Millisecond, 10 * time.Millisecond}
	counts := []int{1, 2, 4, 8, 16, 32, 64}
	if e.quick {
		lengths = lengths[:1]
		counts = []int{1, 4, 16}
	}
	if len(scaleWorkers) > 0 {
		counts = scaleWorkers
	}
	if len(scaleLengths) > 0 {
		lengths = scaleLengths
	}
	shardCounts := e.shards
	if len(shardCounts) == 0 {
		shardCounts = []int{1}
	}
	var rows []row
	ctx := context.Background()
	for _, shards := range shardCounts {
		for _, k := range counts {
			m, _, stop, err := e.fleet(k, shards, scaleSlots)
			if err != nil {
				return nil, err
			}
			if _, err := manager.Map(ctx, m, nap, slices.Repeat([]int{100}, 4*k*scaleSlots), manager.ChunkSize(1)); err != nil { // warm up
				stop()
				return nil, err
			}
			for _, length := range lengths {
				n := scaleTasks(e, k, length)
				xs := slices.Repeat([]int{int(length.Microseconds())}, n)
				calls := e.commandCalls()
				r, err := e.measure("scale", scalePoint(length, k, shards), n, func() error {
					ys, err := manager.Map(ctx, m, nap, xs, manager.ChunkSize(1))
					if err == nil && (len(ys) != n || ys[n-1] != xs[0]) {
						err = fmt.Errorf("nap: %d results, the last %d", len(ys), ys[n-1])
					}
					return err
				})
				if err != nil {
					stop()
					return nil, err
				}
				fmt.Printf("scale, %s: a task: %s\n", scalePoint(length, k, shards), calls.perTask(e.commandCalls(), n))
				rows = append(rows, r)
			}
			stop()
			if shards > 1 {
				continue // the list queue is one list: one shard
			}
			list, err := scaleList(e, k, lengths)
			if err != nil {
				return nil, err
			}
			rows = append(rows, list...)
		}
	}
	return rows, nil
}

// listQueue names the scale scenario's reference in its rows' contenders.
const listQueue = "list queue, "

// scaleList measures the per-task list queue (one LPUSH a task, a BRPOP by
// each of its slots, one LPUSH a result; no fencing, leases or recovery) on
// the same fleet as scale's: k worker processes of scaleSlots slots, for
// each task length.
func scaleList(e *env, k int, lengths []time.Duration) ([]row, error) {
	f, err := e.startBaselines(perTask, "nap", "", k, scaleSlots)
	if err != nil {
		return nil, err
	}
	defer f.stop()
	var rows []row
	for _, length := range lengths {
		n := scaleTasks(e, k, length)
		in := binary.LittleEndian.AppendUint64(nil, uint64(length.Microseconds()))
		inputs := slices.Repeat([][]byte{in}, n)
		calls := e.commandCalls()
		r, err := e.measure("scale", listQueue+scalePoint(length, k, 1), n, func() error {
			out, err := f.run(inputs)
			if err == nil && (len(out) != n || !bytes.Equal(out[n-1], in)) {
				err = fmt.Errorf("list queue nap: %d results", len(out))
			}
			return err
		})
		if err != nil {
			return nil, err
		}
		fmt.Printf("scale, %s%s: a task: %s\n", listQueue, scalePoint(length, k, 1), calls.perTask(e.commandCalls(), n))
		rows = append(rows, r)
	}
	return rows, nil
}

// scaleTasks is how many tasks a point of the scale model runs: about 2 s
// of work at the fleet's capacity (0.5 s quick).
func scaleTasks(e *env, k int, length time.Duration) int {
	capacity := float64(k*scaleSlots) / length.Seconds()
	if e.quick {
		return int(min(max(capacity/2, 500), 10_000))
	}
	return int(min(max(capacity*2, 2000), 60_000))
}

// scaleRow is one point of the scale model, read back from its row.
type scaleRow struct {
	length          time.Duration
	workers, shards int
	rate            float64       // tasks/s, median of the runs
	spread          string        // slowest–fastest run
	cpuPerTask      time.Duration // Redis CPU per task (all masters)
	busy            float64       // Redis CPU per second of the run: cores busy
	machine         float64       // Redis's, the manager's and the workers' CPU per second: cores busy
}

// scaleRows returns the scale scenario's points, by shards, task length
// and workers: redmap's, or with list the list queue's.
func scaleRows(rows []row, list bool) []scaleRow {
	var out []scaleRow
	for _, r := range rows {
		contender, isList := strings.CutPrefix(r.contender, listQueue)
		if r.scenario != "scale" || isList != list {
			continue
		}
		var s scaleRow
		var ms int
		if _, err := fmt.Sscanf(contender, "%dms tasks, %d workers", &ms, &s.workers); err != nil {
			continue
		}
		s.length = time.Duration(ms) * time.Millisecond
		s.shards = 1
		if i := strings.Index(contender, "slots, "); i >= 0 {
			fmt.Sscanf(contender[i+len("slots, "):], "%d shards", &s.shards)
		}
		s.rate, s.spread = r.rate(), r.spread()
		s.cpuPerTask = r.redisCPU / time.Duration(r.elements)
		s.busy = s.cpuPerTask.Seconds() * s.rate
		s.machine = (r.redisCPU + r.managerCPU + r.workerCPU).Seconds() / float64(r.elements) * s.rate
		out = append(out, s)
	}
	slices.SortStableFunc(out, func(a, b scaleRow) int {
		if a.shards != b.shards {
			return a.shards - b.shards
		}
		if a.length != b.length {
			return int(a.length - b.length)
		}
		return a.workers - b.workers
	})
	return out
}

// printScale prints the scale model: each point with the gain of its
// doubling, where Redis saturated, and how many workers of 8 slots one
// Redis core serves at each task length, from the Redis CPU per task
// measured at the largest fleet.
func printScale(rows []row) {
	pts := scaleRows(rows, false)
	lists := map[[2]int]scaleRow{}
	for _, l := range scaleRows(rows, true) {
		lists[[2]int{int(l.length), l.workers}] = l
	}
	if len(pts) == 0 {
		return
	}
	fmt.Println("scale model (one task per element; workers of 8 slots; a task is a timer):")
	fmt.Println()
	fmt.Printf("| shards | task | workers | tasks/s (median) | spread | ideal tasks/s | Redis CPU / task | Redis cores busy | all processes' cores busy (of %d) | gain on doubling | list queue: tasks/s | its Redis CPU / task | redmap's ÷ its |\n", runtime.NumCPU())
	fmt.Println("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for i, p := range pts {
		gain := "-"
		if i > 0 && pts[i-1].length == p.length && pts[i-1].shards == p.shards {
			gain = fmt.Sprintf("%.2fx", p.rate/pts[i-1].rate)
		}
		list := "- | - | -"
		if l, ok := lists[[2]int{int(p.length), p.workers}]; ok && p.shards == 1 {
			list = fmt.Sprintf("%.0f | %.1f µs | %.1fx", l.rate, float64(l.cpuPerTask.Nanoseconds())/1000, p.cpuPerTask.Seconds()/l.cpuPerTask.Seconds())
		}
		ideal := float64(p.workers*scaleSlots) / p.length.Seconds()
		fmt.Printf("| %d | %v | %d | %.0f | %s | %.0f | %.1f µs | %.2f | %.2f | %s | %s |\n", p.shards, p.length, p.workers, p.rate, p.spread,
			ideal, float64(p.cpuPerTask.Nanoseconds())/1000, p.busy, p.machine, gain, list)
	}
	fmt.Println()
	for i, p := range pts {
		last := i == len(pts)-1 || pts[i+1].length != p.length || pts[i+1].shards != p.shards
		if !last {
			continue
		}
		// The first point whose doubling gained under 10%, or whose Redis
		// was busy for 80% of a core per shard; and which ceiling it met:
		// Redis's, or the machine's (every core busy with workers, manager
		// and Redis, Redis itself below 80% of a core a shard).
		sat := "tasks/s grew with every doubling"
		for j := i; j >= 0 && pts[j].length == p.length && pts[j].shards == p.shards; j-- {
			q := pts[j]
			prev := j > 0 && pts[j-1].length == q.length && pts[j-1].shards == q.shards
			if (prev && q.rate < 1.1*pts[j-1].rate) || q.busy >= 0.8*float64(q.shards) {
				what := "Redis saturates"
				if q.busy < 0.8*float64(q.shards) {
					what = fmt.Sprintf("the machine saturates first (its %d cores %.2f busy)", runtime.NumCPU(), q.machine)
				}
				sat = fmt.Sprintf("%s at %d workers (%.0f tasks/s, Redis %.2f cores busy)", what, q.workers, q.rate, q.busy)
			}
		}
		perCore := 1 / p.cpuPerTask.Seconds() // tasks/s one core serves
		var serves []string
		for _, l := range []time.Duration{time.Millisecond, 10 * time.Millisecond, 100 * time.Millisecond, time.Second} {
			serves = append(serves, fmt.Sprintf("%v tasks: %.0f workers", l, perCore*l.Seconds()/scaleSlots))
		}
		fmt.Printf("scale, %v tasks, %d shard(s): %s; at %.1f µs of Redis CPU a task one Redis core serves %.0f tasks/s: %s (of 8 slots)\n",
			p.length, p.shards, sat, float64(p.cpuPerTask.Nanoseconds())/1000, perCore, strings.Join(serves, ", "))
	}
	fmt.Println()
}

// writeScalePlot draws the scale model into an SVG file: tasks/s against
// workers (log scale), a line per task length and shard count, with the
// ideal (every slot busy) dashed, and the Redis CPU per task beside it.
func writeScalePlot(path string, rows []row) error {
	pts := scaleRows(rows, false)
	if len(pts) == 0 {
		return fmt.Errorf("no scale points to plot (run the scale scenario)")
	}
	const w, h, left, top, pw, ph = 960, 420, 70, 40, 360, 300
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	maxWorkers, maxRate, maxCPU := 1, 1.0, 1.0
	for _, p := range pts {
		maxWorkers = max(maxWorkers, p.workers)
		maxRate = max(maxRate, p.rate, math.Min(float64(p.workers*scaleSlots)/p.length.Seconds(), 2*p.rate))
		maxCPU = max(maxCPU, float64(p.cpuPerTask.Nanoseconds())/1000)
	}
	maxRate, maxCPU = niceCeil(maxRate), niceCeil(maxCPU)
	x := func(ox, workers int) float64 {
		return float64(ox) + pw*math.Log2(float64(workers))/math.Log2(float64(max(maxWorkers, 2)))
	}
	colors := []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"}
	panels := []struct {
		title string
		ox    int
		top   float64
		y     func(scaleRow) float64
		ideal bool
	}{
		{"tasks/s", left, maxRate, func(p scaleRow) float64 { return p.rate }, true},
		{"Redis CPU per task, µs", left + pw + 120, maxCPU, func(p scaleRow) float64 { return float64(p.cpuPerTask.Nanoseconds()) / 1000 }, false},
	}
	for _, pn := range panels {
		y := func(v float64) float64 { return top + ph - ph*math.Min(v, pn.top)/pn.top }
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="14">%s</text>`+"\n", pn.ox, top-15, pn.title)
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">worker processes, 8 slots each</text>`+"\n", pn.ox+pw/2, top+ph+34)
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333"/>`+"\n", pn.ox, top, pw, ph)
		for i := 0; i <= 4; i++ {
			v := pn.top * float64(i) / 4
			fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n",
				pn.ox, pn.ox+pw, y(v), y(v), pn.ox-5, y(v)+4, shortNum(v))
		}
		for k := 1; k <= maxWorkers; k *= 2 {
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%d</text>`+"\n", x(pn.ox, k), top+ph+16, k)
		}
		series := 0
		for i := 0; i < len(pts); {
			j := i
			for j < len(pts) && pts[j].length == pts[i].length && pts[j].shards == pts[i].shards {
				j++
			}
			c := colors[series%len(colors)]
			var line, ideal []string
			for _, p := range pts[i:j] {
				line = append(line, fmt.Sprintf("%.1f,%.1f", x(pn.ox, p.workers), y(pn.y(p))))
				ideal = append(ideal, fmt.Sprintf("%.1f,%.1f", x(pn.ox, p.workers), y(float64(p.workers*scaleSlots)/p.length.Seconds())))
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", x(pn.ox, p.workers), y(pn.y(p)), c)
			}
			fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(line, " "), c)
			if pn.ideal {
				fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-dasharray="4 4"/>`+"\n", strings.Join(ideal, " "), c)
			}
			label := fmt.Sprintf("%v tasks", pts[i].length)
			if pts[i].shards > 1 {
				label += fmt.Sprintf(", %d shards", pts[i].shards)
			}
			fmt.Fprintf(&b, `<text x="%d" y="%d" fill="%s">%s</text>`+"\n", pn.ox+10, int(top)+18+16*series, c, label)
			series++
			i = j
		}
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#555">dashed: every slot busy (workers × 8 / task length). Drawn by go run ./bench -scenario scale -plot.</text>`+"\n", left, h-8)
	b.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// shortNum writes v briefly: 12k, 1.5k, 40.
func shortNum(v float64) string {
	switch {
	case v >= 10_000:
		return fmt.Sprintf("%.0fk", v/1000)
	case v >= 1000:
		return fmt.Sprintf("%.1fk", v/1000)
	}
	return fmt.Sprintf("%.0f", v)
}

// commandCalls is what Redis has run so far, summed over its servers: the
// calls of each command (INFO commandstats; a script's inner commands in
// their own lines as well as its EVALSHA's) and the client reads it
// processed (INFO stats' total_reads_processed: a read is a request, or a
// pipeline of them, from one connection — the round trips).
type commandCalls struct {
	calls, usec map[string]int64
	reads       int64
}

var (
	callsLine = regexp.MustCompile(`(?m)^cmdstat_([^:]+):calls=(\d+),usec=(\d+),`)
	readsLine = regexp.MustCompile(`(?m)^total_reads_processed:(\d+)`)
)

// commandCalls reads what Redis has run so far (see commandCalls).
func (e *env) commandCalls() commandCalls {
	out := commandCalls{calls: map[string]int64{}, usec: map[string]int64{}}
	e.eachServer(func(c redis.Cmdable) time.Duration {
		ctx := context.Background()
		if info, err := c.Info(ctx, "commandstats").Result(); err == nil {
			for _, m := range callsLine.FindAllStringSubmatch(info, -1) {
				v, _ := strconv.ParseInt(m[2], 10, 64)
				out.calls[m[1]] += v
				u, _ := strconv.ParseInt(m[3], 10, 64)
				out.usec[m[1]] += u
			}
		}
		if info, err := c.Info(ctx, "stats").Result(); err == nil {
			if m := readsLine.FindStringSubmatch(info); m != nil {
				v, _ := strconv.ParseInt(m[1], 10, 64)
				out.reads += v
			}
		}
		return 0
	})
	return out
}

// perTask says, of what Redis ran between c and later for n tasks, the
// round trips a task and the commands that took Redis longest, a task
// each: their calls and µs (INFO commandstats' usec: the wall time of the
// call, so on a loaded machine more than its CPU).
func (c commandCalls) perTask(later commandCalls, n int) string {
	type call struct {
		name      string
		per, usec float64
	}
	var calls []call
	for name, v := range later.calls {
		if d := v - c.calls[name]; d > 0 && name != "info" && name != "evalsha" && name != "eval" {
			calls = append(calls, call{name, float64(d) / float64(n), float64(later.usec[name]-c.usec[name]) / float64(n)})
		}
	}
	slices.SortFunc(calls, func(a, b call) int { return cmp.Compare(b.usec, a.usec) })
	scripts := float64(later.usec["evalsha"]+later.usec["eval"]-c.usec["evalsha"]-c.usec["eval"]) / float64(n)
	parts := []string{fmt.Sprintf("%.2f round trips, %.2f scripts (%.1f µs)", float64(later.reads-c.reads)/float64(n),
		float64(later.calls["evalsha"]+later.calls["eval"]-c.calls["evalsha"]-c.calls["eval"])/float64(n), scripts)}
	for _, k := range calls[:min(len(calls), 12)] {
		parts = append(parts, fmt.Sprintf("%s %.2f (%.1f µs)", k.name, k.per, k.usec))
	}
	return strings.Join(parts, ", ")
}

// parseScale reads -scale-workers and -scale-tasks.
func parseScale(workers, tasks string) error {
	for w := range strings.SplitSeq(workers, ",") {
		if w == "" {
			continue
		}
		k, err := strconv.Atoi(w)
		if err != nil || k < 1 {
			return fmt.Errorf("-scale-workers: %q is not a count of workers", w)
		}
		scaleWorkers = append(scaleWorkers, k)
	}
	for t := range strings.SplitSeq(tasks, ",") {
		if t == "" {
			continue
		}
		d, err := time.ParseDuration(t)
		if err != nil || d <= 0 || d%time.Millisecond != 0 {
			// The scale model reads its points back by whole ms (scaleRows).
			return fmt.Errorf("-scale-tasks: %q is not a task length of whole milliseconds", t)
		}
		scaleLengths = append(scaleLengths, d)
	}
	return nil
}
