package manager

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"runtime/pprof"
	"slices"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/engine"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/keys"
)

// DefaultPartitions is the partitions of a map/reduce by key without
// Partitions.
const DefaultPartitions = 16

// Partitions sets how many partitions a map/reduce by key (ReduceByKey)
// cuts its keys into, from 1 to 65,536: each is one reduce task, one
// Redis key of partials and one of output (on a Cluster, spread over the
// masters), and the largest share of the output a manager holds at once
// with ReduceByKeySeq. Default DefaultPartitions. Other calls ignore it.
func Partitions(n int) CallOption { return func(o *callOptions) { o.partitions = n } }

// maxShuffleRounds bounds how often a map/reduce by key runs lost map tasks
// again (their partials lost with Redis's data) before it fails with
// ErrLost.
const maxShuffleRounds = 4

// outputPage is the size of a page of a partition's output: what
// ReduceByKeySeq holds of it at once, besides one partition's pairs being
// decoded.
const outputPage = 1 << 20

// ReduceByKey runs emitter em on every element of xs on the queue's
// workers and reduces the pairs it emits per key with red: the result maps
// each key emitted to the fold of its values. The shuffle runs on the
// workers: each map task combines its pairs per key with red, cuts them
// into partitions by a stable hash of the key (Partitions) and stores each
// partition's partial in Redis; then one reduce task per partition folds
// its partials; the manager reads the P outputs. red must be associative
// and commutative (see redmap.Reducer).
//
// Each element counts exactly once, whatever workers die or run a task
// again: a map task's partials are stored under its range of elements, so
// a re-run replaces them; a reduce task reads only the ranges whose map
// task's result the manager accepted. Partials Redis lost (a FLUSHALL, a
// failover that lost writes) make their map tasks run again.
//
// If elements fail (the emitter's error or panic, or red failing to
// combine a task's pairs, which fails that task's elements), the result
// holds the pairs of the others, with a *redmap.BatchError naming each
// failed index. A partition whose reduce fails (red's error, say) leaves
// its keys out, with an error wrapping the cause. If ctx ends first it
// returns nil and ctx.Err().
//
// Call options apply as for Map: ChunkSize, Attempts, Timeout and the
// others to the map tasks, and to the reduce tasks but ChunkSize. With
// Durable(name), the call outlives its manager: its phases are durable
// batches named "<name>/map", "<name>/reduce@<round>" (and
// "<name>/map@<start>+<count>" for map tasks run again), its partitions
// are named for name and kept DurableTTL, and the same call again takes it
// over where it was (a phase that had ended runs again, which changes
// nothing in the result). OnWorker is refused.
//
// Memory: Redis holds the combined partials of the map tasks done and not
// yet reduced, then each partition's output until the manager read it; the
// manager holds the whole result. For results larger than the manager's
// memory, use ReduceByKeySeq.
func ReduceByKey[In any, K comparable, V any](ctx context.Context, m *Manager, em *redmap.Emitter[In, K, V], red *redmap.Reducer[V], xs []In, opts ...CallOption) (map[K]V, error) {
	out := make(map[K]V)
	j, err := startShuffle(ctx, m, em, red, xs, opts)
	if err != nil {
		return nil, err
	}
	defer j.drop()
	for p := range j.parts {
		part := make(map[K]V) // a partition read again after a loss starts over
		if err := readPartition(ctx, j, p, func(ps engine.Pairs[K, V]) bool {
			for i, k := range ps.K {
				part[k] = ps.V[i]
			}
			return true
		}, true); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			j.noteFailed(p, err)
			continue
		}
		for k, v := range part {
			out[k] = v
		}
	}
	return out, j.err()
}

// ReduceByKeySeq is ReduceByKey for results larger than the manager's
// memory: it returns the pairs as a sequence, read from Redis one page of
// about 1 MiB at a time as the caller iterates, and a function that returns
// the call's error once the iteration ended (nil if every element and
// partition succeeded). The work starts when the sequence is first
// iterated; it may be iterated once. Breaking out of it ends the call,
// deleting what is left in Redis. Each key comes once.
//
// The manager holds one page and the bookkeeping of one call; a partition
// whose output Redis loses after some of its pages were yielded cannot be
// yielded exactly again, so the sequence stops there with an error
// wrapping ErrLost.
func ReduceByKeySeq[In any, K comparable, V any](ctx context.Context, m *Manager, em *redmap.Emitter[In, K, V], red *redmap.Reducer[V], xs []In, opts ...CallOption) (iter.Seq2[K, V], func() error) {
	var result error
	used := false
	seq := func(yield func(K, V) bool) {
		if used {
			result = errors.New("manager: a ReduceByKeySeq sequence is iterated once")
			return
		}
		used = true
		j, err := startShuffle(ctx, m, em, red, xs, opts)
		if err != nil {
			result = err
			return
		}
		defer j.drop()
		for p := range j.parts {
			stopped := false
			err := readPartition(ctx, j, p, func(ps engine.Pairs[K, V]) bool {
				for i, k := range ps.K {
					if !yield(k, ps.V[i]) {
						stopped = true
						return false
					}
				}
				return true
			}, false)
			if stopped {
				result = j.err()
				return
			}
			if err != nil {
				if ctx.Err() != nil {
					result = ctx.Err()
					return
				}
				j.noteFailed(p, err)
			}
			j.dropPartition(p)
		}
		result = j.err()
	}
	return seq, func() error { return result }
}

// readPartition reads partition p's output from Redis, page by page,
// passing each to use until it returns false. If the output is not there
// (Redis lost it), it has the partition reduced again and starts over, if
// restart or no page was used yet; else it fails with ErrLost.
func readPartition[K comparable, V any](ctx context.Context, j *shuffleJob, p int, use func(engine.Pairs[K, V]) bool, restart bool) error {
	for round := 0; ; round++ {
		out, ok := j.outputs[p]
		if !ok {
			return j.failedParts[p]
		}
		used := 0
		var missing bool
		for i := range out.Pages {
			b, err := j.page(ctx, p, i)
			if errors.Is(err, broker.ErrPageMissing) {
				missing = true
				break
			}
			if err != nil {
				return err
			}
			ps, err := engine.DecodePairs[K, V](b)
			if err != nil {
				return fmt.Errorf("%w: page %d of partition %d's output: %v", redmap.ErrDecode, i, p, err)
			}
			used++
			if !use(ps) {
				return nil
			}
		}
		if !missing {
			return nil
		}
		if used > 0 && !restart {
			return fmt.Errorf("%w: partition %d's output was lost from Redis after %d of its %d pages were read", redmap.ErrLost, p, used, out.Pages)
		}
		if round >= maxShuffleRounds {
			return fmt.Errorf("%w: partition %d's output was lost from Redis %d times", redmap.ErrLost, p, round+1)
		}
		j.m.log.Warn("a partition's output was lost from Redis; it is computed again", "job", j.sh.Job, "partition", p)
		if err := j.redo(ctx, []int{p}, true); err != nil {
			return err
		}
	}
}

// shuffleJob is one map/reduce by key between its phases and the reading of
// its output.
type shuffleJob struct {
	m     *Manager
	store shuffleStore
	sh    wire.Shuffle
	parts int
	total int // elements of the call
	// mapRun runs the map tasks of the call's elements start to
	// start+count-1 as one batch (all of them if count < 0); reduce runs
	// the reduce tasks of partitions ps.
	mapRun func(ctx context.Context, start, count int) (wire.MapSummary, error)
	reduce func(ctx context.Context, ps []int) ([]wire.ReduceOutput, error)

	ranges      []int // start, count of each map task whose partials count
	elemErr     *redmap.BatchError
	outputs     map[int]wire.ReduceOutput
	failedParts map[int]error
	stopRenew   func()
}

// shuffleStore is where a manager reads a map/reduce by key's outputs: the
// queue's first shard (the broker's).
type shuffleStore interface {
	OutputPage(ctx context.Context, p *broker.OutputPageParams) ([]byte, error)
	DropPartitions(ctx context.Context, p *broker.PartitionsParams) error
	RenewPartitions(ctx context.Context, p *broker.PartitionsParams) error
	RecordShuffle(ctx context.Context, p *broker.RecordShuffleParams) error
}

var _ shuffleStore = broker.Queue(nil)

// summaries folds the map tasks' summaries in the manager: a map/reduce by
// key's map phase is a MapReduce of them. It never runs on a worker.
var summaries = redmap.Reduce("redmap.shuffle-summaries", func(_ context.Context, a, b wire.MapSummary) (wire.MapSummary, error) {
	return wire.MapSummary{Ranges: append(a.Ranges, b.Ranges...), Keys: a.Keys + b.Keys, Bytes: a.Bytes + b.Bytes, Fails: append(a.Fails, b.Fails...)}, nil
})

// startShuffle runs both phases of a map/reduce by key: the map tasks,
// then one reduce task per partition, running lost map tasks again while
// partials are missing. It returns the job, ready to read.
func startShuffle[In any, K comparable, V any](ctx context.Context, m *Manager, em *redmap.Emitter[In, K, V], red *redmap.Reducer[V], xs []In, opts []CallOption) (*shuffleJob, error) {
	if err := em.Validate(); err != nil {
		return nil, err
	}
	if err := red.Validate(); err != nil {
		return nil, err
	}
	co, err := byKeyOptions("ReduceByKey", opts)
	if err != nil {
		return nil, err
	}
	if err := m.ready(ctx); err != nil {
		return nil, err
	}
	// Each phase of a durable call is a durable batch of its own, named
	// after it.
	durable := co.durable
	co.durable = ""
	phaseOn := func(ctx context.Context, phase string) (*Manager, error) {
		if durable == "" {
			return m, nil
		}
		return m.owner(ctx, durable+"/"+phase, co.durableWait)
	}
	j := newShuffleJob(ctx, m, co.partitions, len(xs), durable)
	redRef := &reducerRef{name: red.Name(), sig: red.Signature(), types: types(red)}
	base := spec{name: em.Name(), sig: em.Signature(), types: types(em), limit: em.Limit(), idempotent: idempotentOf(em), red: redRef}
	j.mapRun = mapPhase(j, base, co, xs, phaseOn)
	j.reduce = reducePhase(j, base, co, phaseOn)
	j.stopRenew = j.renew()
	sum, err := j.mapRun(ctx, 0, -1)
	if err := j.elementErrors(err, 0); err != nil {
		j.drop()
		return nil, err
	}
	j.ranges = sortRanges(sum.Ranges)
	if err := j.redo(ctx, slices.Collect(func(yield func(int) bool) {
		for p := range j.parts {
			if !yield(p) {
				return
			}
		}
	}), false); err != nil {
		j.drop()
		return nil, err
	}
	return j, nil
}

// newShuffleJob returns the job of a map/reduce by key of total elements
// into parts partitions, its partitions salted. A durable call's job
// (durable: the call's name) is named for the call, so that the call that
// takes it over finds its partitions, and recorded, so that an operator's
// cancel by its name finds them.
func newShuffleJob(ctx context.Context, m *Manager, parts, total int, durable string) *shuffleJob {
	var jid [8]byte
	_, _ = rand.Read(jid[:])
	job := hex.EncodeToString(jid[:])
	ttl := 10 * m.opts.KeyTTL
	if durable != "" {
		job, ttl = id.DurableJob(durable), m.opts.DurableTTL
	}
	j := &shuffleJob{m: m, store: m.spill, parts: parts, total: total, outputs: make(map[int]wire.ReduceOutput), failedParts: make(map[int]error)}
	j.sh = wire.Shuffle{Job: job, Parts: parts, TTL: ttl.Milliseconds(), Page: outputPage}
	j.sh.Salts = j.salts(ctx)
	if durable != "" {
		// Where its partitions are, for an operator's cancel of the job by
		// its name (redmap cancel), which deletes them.
		// Without it they still expire after DurableTTL.
		if err := j.store.RecordShuffle(ctx, &broker.RecordShuffleParams{Shuffle: &j.sh}); err != nil {
			m.log.Warn("could not record where a durable map/reduce by key's partitions are; a cancel by its name leaves them to expire", "job", durable, "err", err)
		}
	}
	return j
}

// phaseOnFunc returns the manager a phase of a map/reduce by key runs on:
// the call's, or for a durable call the owner of the phase's batch.
type phaseOnFunc func(ctx context.Context, phase string) (*Manager, error)

// mapPhase returns how j runs map tasks of base over xs: all of them
// (count -1), or count from start again, as a batch of one chunk.
func mapPhase[In any](j *shuffleJob, base spec, co callOptions, xs []In, phaseOn phaseOnFunc) func(ctx context.Context, start, count int) (wire.MapSummary, error) {
	return func(ctx context.Context, start, count int) (wire.MapSummary, error) {
		sh := j.sh
		sh.Phase, sh.Base = wire.PhaseMap, start
		mco := co
		in := xs
		phase := "map"
		if count >= 0 {
			in, mco.chunk = xs[start:start+count], count
			phase = fmt.Sprintf("map@%d+%d", start, count)
		}
		sp := base
		enc, err := wire.EncodeShuffle(&sh)
		if err != nil {
			return wire.MapSummary{}, err
		}
		sp.shuffle, sp.phase = enc, "map"
		on, err := phaseOn(ctx, phase)
		if err != nil {
			return wire.MapSummary{}, err
		}
		b, err := submit(ctx, on, sp, elements[In]{xs: in}, mco, summaries)
		if err != nil {
			return wire.MapSummary{}, err
		}
		sum, err := b.reduced(ctx)
		j.m.stats.partialBytes.Add(sum.Bytes)
		return sum, err
	}
}

// reducePhase returns how j runs the reduce tasks of partitions ps, one
// partition a task, as a batch: a durable call names each after its round.
func reducePhase(j *shuffleJob, base spec, co callOptions, phaseOn phaseOnFunc) func(ctx context.Context, ps []int) ([]wire.ReduceOutput, error) {
	round := 0
	return func(ctx context.Context, ps []int) ([]wire.ReduceOutput, error) {
		sh := j.sh
		sh.Phase = wire.PhaseReduce
		rco := co
		rco.chunk = 1
		sp := base
		enc, err := wire.EncodeShuffle(&sh)
		if err != nil {
			return nil, err
		}
		sp.shuffle, sp.phase = enc, "reduce"
		runs := wire.CompressRanges(j.ranges)
		ins := make([]wire.ReduceInput, len(ps))
		for i, p := range ps {
			ins[i] = wire.ReduceInput{Part: p, Runs: runs}
		}
		on, err := phaseOn(ctx, fmt.Sprintf("reduce@%d", round))
		if err != nil {
			return nil, err
		}
		round++
		b, err := submit(ctx, on, sp, elements[wire.ReduceInput]{xs: ins}, rco, (*redmap.Reducer[wire.ReduceOutput])(nil))
		if err != nil {
			return nil, err
		}
		return b.Wait(ctx)
	}
}

// sortRanges sorts a list of ranges (start, count, ...) by start, so that
// a reduce folds the partials of each partition in the order of the
// elements: a reducer that appends (a list of files, say) then finds its
// arguments in order.
func sortRanges(rs []int) []int {
	pairs := make([][2]int, len(rs)/2)
	for i := range pairs {
		pairs[i] = [2]int{rs[2*i], rs[2*i+1]}
	}
	slices.SortFunc(pairs, func(a, b [2]int) int { return a[0] - b[0] })
	out := make([]int, 0, len(rs))
	for _, p := range pairs {
		out = append(out, p[0], p[1])
	}
	return out
}

// reducerRef is the reducer a batch's tasks name (codec.Task.Reduce) when
// it is not the one the manager folds their outputs with: a map/reduce by
// key's map tasks combine with the caller's reducer, and the manager folds
// their summaries.
type reducerRef struct {
	name, sig string
	types     []string
}

// elementErrors keeps the element failures of a map batch whose first
// element is the call's element base (a *redmap.BatchError) and returns
// any other error, which ends the call.
func (j *shuffleJob) elementErrors(err error, base int) error {
	var be *redmap.BatchError
	if err == nil || !errors.As(err, &be) {
		return err
	}
	if j.elemErr == nil {
		j.elemErr = &redmap.BatchError{Total: j.total}
	}
	for _, f := range be.Failed {
		g := *f
		g.Index += base
		// A range run again replaces what its first run said of it.
		j.elemErr.Failed = slices.DeleteFunc(j.elemErr.Failed, func(h *redmap.TaskError) bool { return h.Index == g.Index })
		j.elemErr.Failed = append(j.elemErr.Failed, &g)
	}
	slices.SortFunc(j.elemErr.Failed, func(a, b *redmap.TaskError) int { return a.Index - b.Index })
	return nil
}

// redo reduces partitions ps; while some miss partials, it runs their map
// tasks again and reduces those partitions again. all runs every map task
// again, not only those missing (the partition's partials were deleted by
// a reduce whose output was then lost).
func (j *shuffleJob) redo(ctx context.Context, ps []int, all bool) error {
	if all {
		var missing []int
		for i := 0; i < len(j.ranges); i += 2 {
			missing = append(missing, i/2)
		}
		if err := j.rerun(ctx, missing); err != nil {
			return err
		}
	}
	if len(j.ranges) == 0 {
		// No map task stored partials (no element, or all failed): every
		// partition is empty.
		for _, p := range ps {
			j.outputs[p] = wire.ReduceOutput{}
		}
		return nil
	}
	for round := 0; len(ps) > 0; round++ {
		outs, err := j.reduce(ctx, ps)
		var be *redmap.BatchError
		if err != nil && !errors.As(err, &be) {
			return err
		}
		failed := make(map[int]error)
		if be != nil {
			for _, f := range be.Failed {
				failed[f.Index] = f
			}
		}
		lost := make(map[int]bool)
		var again []int
		for i, p := range ps {
			if e, bad := failed[i]; bad {
				j.failedParts[p] = fmt.Errorf("manager: partition %d of %d could not be reduced; its keys are missing from the result: %w", p, j.parts, e)
				delete(j.outputs, p)
				continue
			}
			if len(outs[i].Missing) == 0 {
				j.m.stats.outputBytes.Add(outs[i].Bytes)
				j.outputs[p] = outs[i]
				delete(j.failedParts, p)
				continue
			}
			again = append(again, p)
			for _, r := range outs[i].Missing {
				lost[r] = true
			}
		}
		if len(again) == 0 {
			return nil
		}
		if round >= maxShuffleRounds {
			return fmt.Errorf("%w: partials of %d map tasks lost from Redis %d times", redmap.ErrLost, len(lost), round+1)
		}
		j.m.log.Warn("partials of a map/reduce by key were lost from Redis; their map tasks run again",
			"job", j.sh.Job, "map_tasks", len(lost), "partitions", len(again))
		if err := j.rerun(ctx, slices.Sorted(func(yield func(int) bool) {
			for r := range lost {
				if !yield(r) {
					return
				}
			}
		})); err != nil {
			return err
		}
		ps = again
	}
	return nil
}

// rerun runs the map tasks of ranges rs (indexes of j.ranges' pairs) again,
// each as a batch of its own, all at once, each on a part of the manager's.
func (j *shuffleJob) rerun(ctx context.Context, rs []int) error {
	type done struct {
		start int
		err   error
	}
	ch := make(chan done, len(rs))
	for _, r := range rs {
		start, count := j.ranges[2*r], j.ranges[2*r+1]
		if !j.m.beside.Go(pprof.WithLabels(ctx, pprof.Labels(ProfileLabel, j.m.label)), func(ctx context.Context) {
			_, err := j.mapRun(ctx, start, count)
			ch <- done{start, err}
		}) {
			ch <- done{start, redmap.ErrClosed}
		}
	}
	var first error
	for range rs {
		d := <-ch
		if err := j.elementErrors(d.err, d.start); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// salts picks, on a Cluster, each partition's key name so that the
// partitions go round the masters (as proposeNames does a queue's shards);
// nil elsewhere, or if the Cluster does not say its slots.
func (j *shuffleJob) salts(ctx context.Context) []int {
	cm, cluster, err := j.m.router.p.masters(ctx)
	if !cluster || err != nil || len(cm.Addrs) == 0 {
		return nil
	}
	salts := make([]int, j.parts)
	for p := range salts {
		want := cm.Addrs[p%len(cm.Addrs)]
		for s := range 64 * len(cm.Addrs) {
			if cm.Owner(keys.Slot(keys.PartitionTag(j.m.opts.Queue, j.sh.Job, p, s))) == want {
				salts[p] = s
				break
			}
		}
	}
	return salts
}

// renew keeps the job's partitions from expiring while it runs (see
// everyKeyTTL). It returns the function that stops it.
func (j *shuffleJob) renew() func() {
	all := j.allParts()
	return everyKeyTTL(j.m, func(ctx context.Context) {
		if err := j.store.RenewPartitions(ctx, &broker.PartitionsParams{Shuffle: &j.sh, Parts: all}); err != nil && ctx.Err() == nil {
			j.m.log.Warn("cannot renew the TTL of a map/reduce by key's partitions", "job", j.sh.Job, "err", err)
		}
	})
}

// everyKeyTTL calls renew every KeyTTL, on a part of m's (Close stops it),
// until the function it returns is called, which returns once renew is
// no longer running.
func everyKeyTTL(m *Manager, renew func(ctx context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(m.ctx)
	done := make(chan struct{})
	if !m.beside.Go(ctx, func(ctx context.Context) {
		defer close(done)
		t := time.NewTicker(m.opts.KeyTTL)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				renew(ctx)
			}
		}
	}) {
		close(done) // the manager is closing: the job ends with it
	}
	return func() { cancel(); <-done }
}

// byKeyOptions are the options of a call with by-key steps (what, for its
// errors): with Partitions, DefaultPartitions unless they say; OnWorker is
// refused.
func byKeyOptions(what string, opts []CallOption) (callOptions, error) {
	co, err := callOptionsOf(opts)
	switch {
	case err != nil:
		return co, err
	case co.worker != "":
		return co, fmt.Errorf("manager: %s: OnWorker is not supported", what)
	case co.partitions < 0 || co.partitions > wire.MaxPartitions:
		return co, fmt.Errorf("manager: Partitions %d is not in 1..%d", co.partitions, wire.MaxPartitions)
	}
	if co.partitions == 0 {
		co.partitions = DefaultPartitions
	}
	return co, nil
}

func (j *shuffleJob) allParts() []int { return allParts(j.parts) }

// page returns page i of partition p's output.
func (j *shuffleJob) page(ctx context.Context, p, i int) ([]byte, error) {
	var b []byte
	err := j.m.faults.riding(ctx, func() error {
		return j.m.faults.callQueue("reading a map/reduce by key's output", func() (err error) {
			b, err = j.store.OutputPage(ctx, &broker.OutputPageParams{Shuffle: &j.sh, Part: p, Page: i})
			if errors.Is(err, broker.ErrPageMissing) {
				return nil
			}
			return err
		})
	})
	if err == nil && b == nil {
		return nil, broker.ErrPageMissing
	}
	return b, err
}

// noteFailed records that partition p could not be read.
func (j *shuffleJob) noteFailed(p int, err error) {
	if _, ok := j.failedParts[p]; !ok {
		j.failedParts[p] = fmt.Errorf("manager: partition %d of %d could not be read; its keys are missing from the result: %w", p, j.parts, err)
	}
	delete(j.outputs, p)
}

// dropPartition deletes partition p's keys (best effort: they expire).
func (j *shuffleJob) dropPartition(p int) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(j.m.ctx), j.m.opts.RedisTimeout)
	defer cancel()
	_ = j.store.DropPartitions(ctx, &broker.PartitionsParams{Shuffle: &j.sh, Parts: []int{p}})
}

// drop ends the job: it stops renewing its keys and deletes them.
func (j *shuffleJob) drop() {
	j.stopRenew()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(j.m.ctx), j.m.opts.RedisTimeout)
	defer cancel()
	if err := j.store.DropPartitions(ctx, &broker.PartitionsParams{Shuffle: &j.sh, Parts: j.allParts()}); err != nil {
		j.m.log.Warn("cannot delete a map/reduce by key's partitions; they expire", "job", j.sh.Job, "err", err, "ttl", time.Duration(j.sh.TTL)*time.Millisecond)
	}
}

// err returns the call's error: its failed elements and partitions, nil if
// none.
func (j *shuffleJob) err() error {
	var errs []error
	if j.elemErr != nil && len(j.elemErr.Failed) > 0 {
		errs = append(errs, j.elemErr)
	}
	for _, p := range slices.Sorted(func(yield func(int) bool) {
		for p := range j.failedParts {
			if !yield(p) {
				return
			}
		}
	}) {
		errs = append(errs, j.failedParts[p])
	}
	if len(errs) == 1 {
		return errs[0] // a *redmap.BatchError as Map's, if that is all
	}
	return errors.Join(errs...)
}
