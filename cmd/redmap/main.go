// Command redmap shows and steers redmap queues, workers and batches, from
// the records managers and workers keep in Redis:
//
//	redmap [flags] status|workers|batches|failures|backlog|metrics|dashboard
//	redmap [flags] drain <worker>
//	redmap [flags] purge <queue> -yes
//	redmap [flags] cancel <queue> <name> [-discard]
//	redmap [flags] pause|resume <queue>
//	redmap [flags] limit <queue> [<function>] [-rate N/s] [-burst B] [-concurrency C] [-clear]
//
// redmap help lists the commands and their flags (made from the command
// table in commands.go); redmap help <command> shows one. Errors are one
// line on stderr with exit status 1; bad usage exits 2.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/redmap/redmap/connect"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/inspect"
	"github.com/redmap/redmap/internal/keys"
)

// quiet drops go-redis's own log lines: the CLI reports errors itself, in
// one line.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func main() {
	redis.SetLogger(quiet{})
	code, err := run(os.Args[1:], os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "redmap:", err)
	}
	os.Exit(code)
}

// asked says which Redis (its URL without a password) and which key prefix
// a failed command asked, so that "no queue" on the wrong server says so.
func asked(err error, o *invocation) error {
	return fmt.Errorf("%w (asked %s, prefix %q)", err, o.url.String(), o.prefix)
}

// fallbackNote is the line that says, once, that the CLI asks the default
// Redis (url) because neither -redis nor $REDIS_URL named one; "" if one did.
func fallbackNote(flagGiven bool, env, url string) string {
	if flagGiven || env != "" {
		return ""
	}
	return "redmap: no -redis and no $REDIS_URL: asking " + url
}

// usageError is bad usage: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg + " (run redmap help)" }

type cli struct {
	in    *inspect.Inspector
	out   io.Writer
	json  bool
	queue string
	yes   bool
	// cancel: cancel an ended durable batch too, dropping its results
	discard bool
	by      string // pause: who pauses, for the record
	all     bool   // batches: the history too
	n       int    // how many rows of a history or of failure groups
	batch   string // failures: list this batch's failed elements
	// limit's flags
	rate               string
	burst, concurrency int
	clear              bool
	given              map[string]bool // the flags the command line set
}

func run(args []string, out io.Writer) (int, error) {
	c := &cli{out: out}
	o, err := parseArgs(args, c)
	if err != nil {
		return 2, err
	}
	if o.help {
		usage(out, o.cmd)
		return 0, nil
	}
	client, err := connect.URL(o.url.URL)
	if err != nil {
		return 2, usageError{fmt.Sprintf("-redis: %v", err)}
	}
	if note := fallbackNote(c.given["redis"], os.Getenv("REDIS_URL"), o.url.String()); note != "" {
		fmt.Fprintln(os.Stderr, note)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if c.in, err = inspect.New(client, o.prefix); err != nil {
		return 2, usageError{fmt.Sprintf("-prefix: %v", err)}
	}
	if err := c.in.Ping(ctx); err != nil {
		return 1, fmt.Errorf("cannot reach Redis at %s: %v", o.url.String(), err)
	}
	if o.scan {
		if _, err := c.in.ScanQueues(ctx); err != nil {
			return 1, err
		}
	}
	if o.cmd.name == "metrics" {
		cancel()
		if c.queue != "" {
			if err := keys.CheckQueue(c.queue); err != nil {
				return 2, usageError{err.Error()}
			}
		}
		return serveMetrics(c, o.addr, out)
	}
	if o.cmd.run == nil { // dashboard
		cancel()
		return serveDashboard(client, dashboardFlags{prefix: o.prefix, queue: c.queue, addr: o.addr, actions: o.actions,
			private: o.private, tokenFile: o.tokenFile, tlsCert: o.tlsCert, tlsKey: o.tlsKey, hosts: o.hosts}, out)
	}
	if c.queue != "" {
		if err := c.mustQueue(ctx, c.queue); err != nil {
			return 1, asked(err, o)
		}
	}
	if err := o.cmd.run(c, ctx, o.operand); err != nil {
		if ue := (usageError{}); errors.As(err, &ue) {
			return 2, err
		}
		return 1, asked(err, o)
	}
	return 0, nil
}

// queues returns -queue, or every queue.
func (c *cli) queues(ctx context.Context) ([]string, error) {
	if c.queue != "" {
		if err := keys.CheckQueue(c.queue); err != nil {
			return nil, err
		}
		return []string{c.queue}, nil
	}
	return c.in.Queues(ctx)
}

func (c *cli) mustQueue(ctx context.Context, q string) error {
	if err := keys.CheckQueue(q); err != nil {
		return err
	}
	qs, err := c.in.Queues(ctx)
	if err != nil {
		return err
	}
	if !slices.Contains(qs, q) {
		return fmt.Errorf("no queue %q (no manager or worker of it named it in Redis within a week; -scan finds one an earlier build left)", q)
	}
	return nil
}

func (c *cli) emit(v any) error {
	enc := json.NewEncoder(c.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func (c *cli) table(header string, rows [][]string) {
	tw := tabwriter.NewWriter(c.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		cells := make([]string, len(r))
		for i, cell := range r {
			cells[i] = printable(cell)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	tw.Flush()
}

// printable quotes a cell holding a control character (a queue name with a
// newline or a tab, say), so that it cannot break the table.
func printable(s string) string {
	if strings.IndexFunc(s, unicode.IsControl) < 0 {
		return s
	}
	return strconv.Quote(s)
}

func (c *cli) listWorkers(ctx context.Context) ([]inspect.Worker, error) {
	qs, err := c.queues(ctx)
	if err != nil {
		return nil, err
	}
	now, err := c.in.Now(ctx)
	if err != nil {
		return nil, err
	}
	var out []inspect.Worker
	for _, q := range qs {
		ws, err := c.in.Workers(ctx, q, now)
		if err != nil {
			return nil, err
		}
		out = append(out, ws...)
	}
	return out, nil
}

func (c *cli) workers(ctx context.Context) error {
	ws, err := c.listWorkers(ctx)
	if err != nil {
		return err
	}
	if c.json {
		return c.emit(orEmpty(ws))
	}
	var rows [][]string
	for _, w := range ws {
		state := w.State
		if w.Slow { // backups overtook most of its tasks that got one
			state += fmt.Sprintf(" (slow: %d of %d backup races lost)", w.Overtaken, w.BackupRaces)
		}
		rows = append(rows, []string{w.Queue, w.ID, state, dur(time.Duration(w.Since * float64(time.Second))),
			w.Host, strconv.Itoa(w.PID), cmp.Or(w.Version, "-"),
			dur(time.Duration(w.HeartbeatAge * float64(time.Second))), fmt.Sprintf("%d/%d", w.Running, w.Concurrency),
			strconv.FormatInt(w.Held, 10), strconv.FormatInt(w.Taken, 10), strconv.FormatInt(w.Delivered, 10),
			strconv.FormatInt(w.Failed, 10), strings.Join(w.Functions, ","), cmp.Or(w.Alone, "-"), w.Error})
	}
	c.table("QUEUE\tWORKER\tSTATE\tFOR\tHOST\tPID\tVERSION\tHEARTBEAT\tRUNNING\tHELD\tTAKEN\tDELIVERED\tFAILED\tFUNCTIONS\tALONE\tERROR", rows)
	return nil
}

// eachQueue returns what list gives for each queue of c (-queue, or all),
// one after the other.
func eachQueue[T any](ctx context.Context, c *cli, list func(q string) ([]T, error)) ([]T, error) {
	qs, err := c.queues(ctx)
	if err != nil {
		return nil, err
	}
	var out []T
	for _, q := range qs {
		xs, err := list(q)
		if err != nil {
			return nil, err
		}
		out = append(out, xs...)
	}
	return out, nil
}

func (c *cli) listBatches(ctx context.Context) ([]inspect.Batch, error) {
	out, err := eachQueue(ctx, c, func(q string) ([]inspect.Batch, error) { return c.in.Batches(ctx, q) })
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, err
}

func (c *cli) batches(ctx context.Context) error {
	bs, err := c.listBatches(ctx)
	if err != nil {
		return err
	}
	var ended []inspect.Batch
	if c.all {
		if ended, err = c.listHistory(ctx); err != nil {
			return err
		}
	}
	if c.json {
		return c.emit(orEmpty(append(bs, ended...)))
	}
	// A pipeline is one job: its batches, running and ended, are listed
	// under it by stage, not as batches.
	pipes, bs, ended, err := c.pipelines(ctx, bs, ended)
	if err != nil {
		return err
	}
	c.table(batchHeader, batchRows(bs, time.Now()))
	if len(pipes) > 0 {
		fmt.Fprintln(c.out)
		c.table(pipelineHeader, pipelineRows(pipes, time.Now()))
	}
	if c.all {
		fmt.Fprintln(c.out)
		c.table(historyHeader, historyRows(ended, time.Now()))
	}
	return nil
}

// pipelines takes the batches of pipelines out of listed and ended, and
// returns those pipelines with the rest: the pipelines listed (running,
// orphaned, held) and, with -all, those among ended too, each with every
// stage it ran, counted over all its batches whatever -n read
// (Inspector.Pipelines).
func (c *cli) pipelines(ctx context.Context, listed, ended []inspect.Batch) ([]inspect.Pipeline, []inspect.Batch, []inspect.Batch, error) {
	ps, plainListed, err := c.in.Pipelines(ctx, append(slices.Clone(listed), ended...))
	if err != nil {
		return nil, nil, nil, err
	}
	plainListed = slices.DeleteFunc(plainListed, func(b inspect.Batch) bool { return !b.Ended.IsZero() })
	plainEnded := slices.DeleteFunc(slices.Clone(ended), func(b inspect.Batch) bool { return b.Call.Pipeline != "" })
	if !c.all {
		ps = slices.DeleteFunc(ps, func(p inspect.Pipeline) bool { return !p.Ended.IsZero() })
	}
	return ps, plainListed, plainEnded, nil
}

// listHistory returns the last c.n ended batches of each queue, newest
// first; records that cannot be read are said on stderr and skipped.
func (c *cli) listHistory(ctx context.Context) ([]inspect.Batch, error) {
	out, err := eachQueue(ctx, c, func(q string) ([]inspect.Batch, error) {
		bs, malformed, err := c.in.History(ctx, q, c.n)
		if malformed > 0 {
			fmt.Fprintf(os.Stderr, "redmap: %d record(s) of queue %q's history are unreadable; skipped\n", malformed, q)
		}
		return bs, err
	})
	if err != nil {
		return nil, err
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Ended.After(out[j].Ended) })
	return out[:min(len(out), max(c.n, 0))], nil
}

// The columns of the running batches and of the ended ones. CALL is what
// each call said of its batch by name (codec.CallInfo), "-" if nothing.
const (
	batchHeader   = "QUEUE\tBATCH\tNAME\tSTATE\tFUNC\tCALL\tDONE\tFAILED\tTOTAL\tPROGRESS\tRATE/S\tETA\tAGE\tWAITING"
	historyHeader = "QUEUE\tBATCH\tFUNC\tCALL\tOUTCOME\tDONE\tFAILED\tTOTAL\tFAILED BY\tENDED\tTOOK\tREASON"
)

// pipelineHeader heads the pipelines: a line for each, then one for each
// of its stages, in the order of its steps. A stage's DONE, FAILED,
// RUNNING and TOTAL are in its UNIT (inspect.Stage.Unit): a map stage's
// elements, a reduce stage's partitions; KEYS FAILED are a reduce stage's
// keys that failed after its fold, apart ("-" for a map stage).
const pipelineHeader = "PIPELINE\tQUEUE\tSTATE\tFUNC\tBATCHES\tDONE\tFAILED\tRUNNING\tTOTAL\tUNIT\tKEYS FAILED\tRATE/S\tAGE\tCALL\tWAITING"

func pipelineRows(ps []inspect.Pipeline, now time.Time) [][]string {
	var rows [][]string
	for _, p := range ps {
		n := 0
		for _, s := range p.Stages {
			n += s.Batches
		}
		call := "-"
		if p.Label != "" {
			call = codec.CallInfo{Label: p.Label}.String()
		}
		age := "-"
		if !p.Started.IsZero() {
			age = dur(cmp.Or(p.Ended, now).Sub(p.Started))
		}
		rows = append(rows, []string{p.Name, p.Queue, p.Outcome, fmt.Sprintf("%d stage(s)", len(p.Stages)), strconv.Itoa(n), "", "", "", "", "", "", "", age, call, p.Waiting})
		for _, s := range p.Stages {
			batches := strconv.Itoa(s.Batches)
			if s.Reruns > 0 {
				batches += fmt.Sprintf("+%drerun", s.Reruns)
			}
			kf := "-"
			if s.Unit == "partitions" {
				kf = strconv.Itoa(s.FailedKeys)
			}
			rows = append(rows, []string{"  " + s.Stage, "", s.Outcome, cmp.Or(s.Func, "-"), batches, strconv.Itoa(s.Done), strconv.Itoa(s.Failed),
				strconv.Itoa(s.Running), strconv.Itoa(s.Total), s.Unit, kf, rate(s.Rate), "", "", ""})
		}
	}
	return rows
}

func historyRows(bs []inspect.Batch, now time.Time) [][]string {
	var rows [][]string
	for _, b := range bs {
		causes := make([]string, 0, len(b.FailedBy))
		for k, n := range b.FailedBy {
			causes = append(causes, fmt.Sprintf("%s %d", k, n))
		}
		sort.Strings(causes)
		took := "-"
		if !b.Started.IsZero() {
			took = dur(b.Ended.Sub(b.Started))
		}
		rows = append(rows, []string{b.Queue, b.ID, b.Func, cmp.Or(b.Call.String(), "-"), b.Outcome, strconv.Itoa(b.Done), strconv.Itoa(b.Failed),
			strconv.Itoa(b.Total), strings.Join(causes, ", "), ago(now, b.Ended), took, b.Reason})
	}
	return rows
}

// eta shows a batch's ETA; under a second, as such, not "0s".
func eta(b inspect.Batch) string {
	d := time.Duration(b.ETA * float64(time.Second))
	switch {
	case b.Done+b.Failed >= b.Total, b.Paused:
		return "-"
	case d <= 0:
		return "?"
	case d < time.Second:
		return "<1s"
	}
	return dur(d)
}

// dur is the one format of a duration in every command, as the dashboard
// writes it: 4.2s, 42s, 2m32s, 1h05m.
func dur(d time.Duration) string {
	s := d.Seconds()
	switch {
	case d < 0:
		return "-"
	case s < 10:
		return fmt.Sprintf("%.1fs", s)
	case s < 60:
		return fmt.Sprintf("%.0fs", math.Floor(s))
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", int(s)/60, int(s)%60)
	}
	return fmt.Sprintf("%dh%02dm", int(s)/3600, int(s)%3600/60)
}

// rate shows elements a second with a sensible precision: 0.7/s is not 1.
func rate(r float64) string {
	switch {
	case r == 0:
		return "0"
	case r < 1:
		return fmt.Sprintf("%.2f", r)
	case r < 10:
		return fmt.Sprintf("%.1f", r)
	}
	return fmt.Sprintf("%.0f", r)
}

func batchRows(bs []inspect.Batch, now time.Time) [][]string {
	var rows [][]string
	for _, b := range bs {
		pct := 0.0
		if b.Total > 0 {
			pct = 100 * float64(b.Done+b.Failed) / float64(b.Total)
		}
		rows = append(rows, []string{b.Queue, b.ID, cmp.Or(b.Durable, "-"), b.Outcome, cmp.Or(b.Func, "-"), cmp.Or(b.Call.String(), "-"), strconv.Itoa(b.Done), strconv.Itoa(b.Failed), strconv.Itoa(b.Total),
			fmt.Sprintf("%.0f%%", pct), rate(b.Rate), eta(b), age(b, now), waiting(b)})
	}
	return rows
}

// waiting is why a batch does not advance, and the suspects of it that
// workers run alone.
func waiting(b inspect.Batch) string {
	notes := b.Alone
	if b.Waiting != "" {
		notes = append([]string{b.Waiting}, b.Alone...)
	}
	if b.Counts != "" {
		notes = append(notes, "counts: "+b.Counts)
	}
	return strings.Join(notes, "; ")
}

// age is how long ago a batch started, by its manager's clock, or "-".
func age(b inspect.Batch, now time.Time) string {
	if b.Started.IsZero() {
		return "-"
	}
	return dur(now.Sub(b.Started))
}

// queueStatus is a queue as status shows it: the queue, its live workers
// and its running batches.
type queueStatus struct {
	inspect.Queue
	LiveWorkers    []inspect.Worker `json:"live_workers"`
	RunningBatches []inspect.Batch  `json:"running_batches"`
	Limits         []inspect.Limit  `json:"limits"`
}

// status prints each queue's depth, live workers, running batches and
// limits, the busiest queues first; without -all, the idle ones
// (inspect.Queue.Idle) are counted in one line, their idle workers and
// limits left out. -json lists every queue, by name. A queue whose records cannot be read is left out, and its error
// returned once the others are printed.
func (c *cli) status(ctx context.Context) error {
	qs, err := c.queues(ctx)
	if err != nil {
		return err
	}
	var out []queueStatus
	var live []inspect.Worker
	var running []inspect.Batch
	var limits []inspect.Limit
	var unread []error // queues whose records could not be read: the others are shown
	snaps, errs := c.in.Statuses(ctx, qs)
	for j, q := range qs {
		snap, err := snaps[j], errs[j]
		if err != nil {
			unread = append(unread, fmt.Errorf("queue %q: %w", q, err))
			continue
		}
		s := queueStatus{Queue: snap.Queue, LiveWorkers: []inspect.Worker{}, RunningBatches: snap.Batches, Limits: orEmpty(snap.Limits)}
		limits = append(limits, snap.Limits...)
		for _, w := range snap.Workers {
			if w.Live {
				s.LiveWorkers = append(s.LiveWorkers, w)
			}
		}
		live = append(live, s.LiveWorkers...)
		running = append(running, s.RunningBatches...)
		out = append(out, s)
	}
	if c.json {
		if err := c.emit(orEmpty(out)); err != nil {
			return err
		}
		return errors.Join(unread...)
	}
	// The busiest first; without -all, the idle ones (nothing queued,
	// running or ended in 15 minutes) fold into one line, their idle
	// workers and limits left out: 200 queues must not bury the few busy.
	slices.SortStableFunc(out, func(a, b queueStatus) int { return inspect.Busiest(a.Queue, b.Queue) })
	var rows [][]string
	idle, idleWorkers := 0, 0
	folded := map[string]bool{}
	for _, q := range out {
		if q.Idle() && !c.all {
			idle++
			folded[q.Name] = true
			continue
		}
		state := "running"
		if q.Paused != nil {
			state = "paused"
			if !q.Paused.Since.IsZero() {
				state += " " + q.Paused.Since.UTC().Format(time.RFC3339)
			}
			if q.Paused.By != "" {
				state += " by " + q.Paused.By
			}
		}
		rows = append(rows, []string{q.Name, strconv.FormatInt(q.Depth, 10), strconv.Itoa(q.Workers), strconv.FormatInt(q.Running, 10), strconv.Itoa(q.Batches), state})
	}
	c.table("QUEUE\tDEPTH\tWORKERS\tRUNNING\tBATCHES\tSTATE", rows)
	live = slices.DeleteFunc(live, func(w inspect.Worker) bool {
		if folded[w.Queue] && w.State == "idle" {
			idleWorkers++
			return true
		}
		return false
	})
	limits = slices.DeleteFunc(limits, func(l inspect.Limit) bool { return folded[l.Queue] })
	if idle > 0 {
		fmt.Fprintf(c.out, "%d idle queue(s), nothing queued, running or ended in 15 minutes", idle)
		if idleWorkers > 0 {
			fmt.Fprintf(c.out, ", with %d idle worker(s)", idleWorkers)
		}
		fmt.Fprintln(c.out, " (-all lists them)")
	}
	fmt.Fprintln(c.out)
	var wrows [][]string
	for _, w := range live {
		wrows = append(wrows, []string{w.Queue, w.ID, dur(time.Duration(w.HeartbeatAge * float64(time.Second))),
			fmt.Sprintf("%d/%d", w.Running, w.Concurrency), strings.Join(w.Functions, ",")})
	}
	c.table("QUEUE\tWORKER\tHEARTBEAT\tRUNNING\tFUNCTIONS", wrows)
	fmt.Fprintln(c.out)
	c.table(batchHeader, batchRows(running, time.Now()))
	if len(limits) > 0 {
		fmt.Fprintln(c.out)
		var lrows [][]string
		for j, r := range limitRows(limits, time.Now()) {
			lrows = append(lrows, append([]string{limits[j].Queue}, r...))
		}
		c.table("QUEUE\tFUNC\tLIMIT\tSOURCE\tRUNNING\tWAITING\tREFUSED\tRETRY-AFTER", lrows)
	}
	return errors.Join(unread...)
}

func (c *cli) failures(ctx context.Context) error {
	if c.batch != "" {
		return c.failedElements(ctx)
	}
	qs, err := c.queues(ctx)
	if err != nil {
		return err
	}
	var groups []inspect.FailureGroup
	for _, q := range qs {
		gs, malformed, err := c.in.Failures(ctx, q)
		if err != nil {
			return err
		}
		if malformed > 0 {
			fmt.Fprintf(os.Stderr, "redmap: %d entries of queue %q's failure list are unreadable; skipped\n", malformed, q)
		}
		groups = append(groups, gs...)
	}
	sort.SliceStable(groups, func(i, j int) bool { return groups[i].Count > groups[j].Count })
	groups = groups[:min(len(groups), max(c.n, 0))]
	if c.json {
		return c.emit(orEmpty(groups))
	}
	var rows [][]string
	now := time.Now()
	for _, g := range groups {
		rows = append(rows, []string{g.Queue, g.Func, g.Kind, strconv.FormatInt(g.Count, 10),
			ago(now, g.First), ago(now, g.Last), strconv.Itoa(len(g.Workers)), g.Group})
	}
	c.table("QUEUE\tFUNC\tKIND\tCOUNT\tFIRST\tLAST\tSEEN BY\tGROUP", rows)
	for _, g := range groups {
		fmt.Fprintf(c.out, "\n%s %s, %d× — %s\n  last: %s (task %s, seen by %s)\n", g.Func, g.Kind, g.Count, g.Group,
			g.Error, g.SampleTask, strings.Join(g.Workers, ", "))
		if g.SampleStack != "" {
			fmt.Fprintf(c.out, "  a stack:\n%s\n", indent(firstLines(g.SampleStack, 12)))
		}
	}
	return nil
}

// ago says how long before now t was, to the second.
func ago(now, t time.Time) string { return dur(now.Sub(t)) + " ago" }

// drain drains the worker whose id is wid or begins with it, if only one
// does.
func (c *cli) drain(ctx context.Context, wid string) error {
	ws, err := c.listWorkers(ctx)
	if err != nil {
		return err
	}
	var match []inspect.Worker
	for _, w := range ws {
		if w.ID == wid {
			match = []inspect.Worker{w}
			break
		}
		if strings.HasPrefix(w.ID, wid) {
			match = append(match, w)
		}
	}
	switch len(match) {
	case 0:
		return fmt.Errorf("no worker %q", wid)
	case 1:
	default:
		ids := make([]string, len(match))
		for i, w := range match {
			ids[i] = w.ID
		}
		return fmt.Errorf("%q is the start of %d workers' ids (%s): give more of it", wid, len(match), strings.Join(ids, ", "))
	}
	w := match[0]
	if err := c.in.Drain(ctx, w.Queue, w.ID); err != nil {
		return err
	}
	if c.json {
		return c.emit(map[string]string{"drained": w.ID, "queue": w.Queue})
	}
	fmt.Fprintf(c.out, "draining worker %s of queue %s: it takes no more tasks and exits when idle\n", w.ID, w.Queue)
	return nil
}

func (c *cli) purge(ctx context.Context, q string) error {
	if err := c.mustQueue(ctx, q); err != nil {
		return err
	}
	if !c.yes {
		n, err := c.in.Queued(ctx, q)
		if err != nil {
			return err
		}
		return fmt.Errorf("purge would drop the %d queued task id(s) of queue %q, failing those still wanted in their batches; run again with -yes", n, q)
	}
	n, dropped, err := c.in.Purge(ctx, q)
	if err != nil {
		return err
	}
	if c.json {
		return c.emit(map[string]any{"queue": q, "purged": n, "dropped": dropped})
	}
	fmt.Fprintf(c.out, "dropped %d queued task id(s) from queue %s: %d task(s) failed in their batches, %d no manager wanted any more\n", dropped, q, n, dropped-n)
	return nil
}

// pause stops the taking of queue q's tasks (Inspector.Pause).
func (c *cli) pause(ctx context.Context, q string) error {
	if err := c.mustQueue(ctx, q); err != nil {
		return err
	}
	by := c.by
	if by == "" {
		by = os.Getenv("USER")
	}
	did, err := c.in.Pause(ctx, q, by)
	if err != nil {
		return err
	}
	if c.json {
		return c.emit(map[string]any{"queue": q, "paused": true, "was_running": did})
	}
	if !did {
		fmt.Fprintf(c.out, "queue %s was paused already\n", q)
		return nil
	}
	fmt.Fprintf(c.out, "paused queue %s: its workers finish what they hold and take nothing more; its batches wait, their managers warn, until redmap resume %s\n", q, q)
	return nil
}

// resume lets queue q's workers take its tasks again (Inspector.Resume).
func (c *cli) resume(ctx context.Context, q string) error {
	if err := c.mustQueue(ctx, q); err != nil {
		return err
	}
	did, rung, err := c.in.Resume(ctx, q)
	if err != nil {
		return err
	}
	if c.json {
		return c.emit(map[string]any{"queue": q, "paused": false, "was_paused": did, "woken": rung})
	}
	if !did {
		fmt.Fprintf(c.out, "queue %s was not paused\n", q)
		return nil
	}
	fmt.Fprintf(c.out, "resumed queue %s: %d idle worker(s) woken to take its tasks\n", q, rung)
	return nil
}

// cancel cancels what name names on queue q: a pipeline, a running batch,
// or a durable batch or job (Inspector.Cancel).
func (c *cli) cancel(ctx context.Context, operand []string) error {
	q, name := operand[0], operand[1]
	if err := c.mustQueue(ctx, q); err != nil {
		return err
	}
	did, err := c.in.Cancel(ctx, q, name, c.discard)
	switch {
	case err != nil:
		return err
	case did.Pipeline != nil:
		return c.cancelledPipeline(q, name, *did.Pipeline)
	case did.Batch != "":
		if c.json {
			return c.emit(map[string]any{"queue": q, "name": name, "batch": did.Batch, "manager": did.Manager})
		}
		fmt.Fprintf(c.out, "cancelled batch %s of queue %s: its manager %s, at its next Poll, withdraws its tasks, records it cancelled, and its call returns ErrCancelled\n", did.Batch, q, did.Manager)
		return nil
	}
	jc := *did.Job
	if c.json {
		return c.emit(map[string]any{"queue": q, "name": name, "batches": jc.Batches, "partition_keys": jc.PartitionKeys})
	}
	names := slices.Sorted(maps.Keys(jc.Batches))
	ended := 0
	for _, n := range names {
		switch jc.Batches[n] {
		case "asked":
			fmt.Fprintf(c.out, "cancelled durable batch %q of queue %s: its tasks are withdrawn; the manager holding it, if still alive, ends its call within its Poll\n", n, q)
		case "cancelled":
			fmt.Fprintf(c.out, "cancelled durable batch %q of queue %s: its tasks are withdrawn, and the call that takes it over fails its elements with ErrCancelled\n", n, q)
		case "already":
			fmt.Fprintf(c.out, "durable batch %q of queue %s was cancelled already: the call that takes it over fails its elements with ErrCancelled\n", n, q)
		case "ended":
			ended++
			fmt.Fprintf(c.out, "durable batch %q of queue %s has ended: its results wait in Redis for the call that takes it over (the same call, manager.Durable(%q))\n", n, q, n)
		}
	}
	if pd := jc.Pipeline; pd != nil {
		record := "deleted its record"
		if !pd.Record {
			record = "found no record of it"
		}
		fmt.Fprintf(c.out, "no manager holds durable pipeline %q of queue %s: %s, %d key(s) of its partitions, and the keys of %s; the same call again runs it from its start\n",
			name, q, record, jc.PartitionKeys, strings.Join(quoted(pd.Deleted), ", "))
	} else if jc.PartitionKeys > 0 {
		fmt.Fprintf(c.out, "deleted %d key(s) of the partitions of map/reduce by key %q\n", jc.PartitionKeys, name)
	}
	if ended > 0 {
		return fmt.Errorf("nothing cancelled: %q has ended, and cancelling would discard its results; run again with -discard to cancel it anyway, dropping its results", name)
	}
	return nil
}

// cancelledPipeline says what the cancel of pipeline name (or of the
// pipeline of batch name) of queue q did.
func (c *cli) cancelledPipeline(q, name string, pc inspect.PipelineCancel) error {
	if c.json {
		return c.emit(map[string]any{"queue": q, "name": name, "pipeline": pc})
	}
	if name != pc.Pipeline {
		fmt.Fprintf(c.out, "batch %s is of pipeline %q: the whole pipeline is cancelled\n", name, pc.Pipeline)
	}
	if pc.Durable != nil {
		for _, n := range slices.Sorted(maps.Keys(pc.Durable.Batches)) {
			fmt.Fprintf(c.out, "durable batch %q of pipeline %q: %s\n", n, pc.Pipeline, pc.Durable.Batches[n])
		}
	}
	if pd := orphaned(pc); pd != nil {
		// Its manager died: the cancel ended it here, as its manager would have.
		if pd.Record {
			fmt.Fprintf(c.out, "no manager holds durable pipeline %q of queue %s: deleted its record", pc.Pipeline, q)
		} else {
			fmt.Fprintf(c.out, "no manager holds durable pipeline %q of queue %s: it had no record left", pc.Pipeline, q)
		}
		fmt.Fprintf(c.out, ", %d key(s) of its partitions, and the keys of %s; the same call again runs it from its start\n",
			pc.Durable.PartitionKeys, strings.Join(quoted(pd.Deleted), ", "))
		for _, n := range pd.Held {
			fmt.Fprintf(c.out, "durable batch %q is still held (its manager's claim has not lapsed): it stays cancelled; run the cancel again once the claim lapses to delete it\n", n)
		}
	}
	for _, mid := range pc.Managers {
		if len(pc.Running) == 0 {
			fmt.Fprintf(c.out, "asked manager %s to cancel pipeline %q of queue %s: none of its batches runs; if it is between two stages, no later one starts, and its call returns ErrCancelled\n", mid, pc.Pipeline, q)
			continue
		}
		fmt.Fprintf(c.out, "cancelled pipeline %q of queue %s: manager %s, at its next Poll, ends its %d running batch(es), submits no later stage, and its call returns ErrCancelled\n",
			pc.Pipeline, q, mid, len(pc.Running))
	}
	if len(pc.Managers) == 0 && (pc.Durable == nil || len(pc.Durable.Batches) == 0) && orphaned(pc) == nil {
		return fmt.Errorf("pipeline %q of queue %q has ended, or its manager no longer publishes: nothing cancelled", pc.Pipeline, q)
	}
	return nil
}

// orphaned is what the cancel deleted of durable pipeline pc, if no
// manager held it; nil otherwise.
func orphaned(pc inspect.PipelineCancel) *inspect.PipelineDeleted {
	if pc.Durable == nil {
		return nil
	}
	return pc.Durable.Pipeline
}

func quoted(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strconv.Quote(s)
	}
	return out
}

func orEmpty[T any](xs []T) []T {
	if xs == nil {
		return []T{}
	}
	return xs
}

func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[:min(n, len(lines))], "\n")
}

func indent(s string) string { return "    " + strings.ReplaceAll(s, "\n", "\n    ") }
