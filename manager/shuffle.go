package manager

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/engine"
	"github.com/redmap/redmap/internal/keys"
)

// DefaultPartitions is the partitions of a map/reduce by key without
// Partitions.
const DefaultPartitions = 16

// Partitions sets how many partitions a map/reduce by key (ReduceByKey, or
// each by-key step of a pipeline) cuts its keys into, from 1 to 65,536:
// each is one reduce task, one Redis key of partials and one of output (on
// a Cluster, spread over the masters), and the largest share of the output
// a manager holds at once with ReduceByKeySeq. Default DefaultPartitions.
// Other calls ignore it.
func Partitions(n int) CallOption { return func(o *callOptions) { o.partitions = n } }

// maxShuffleRounds bounds how often a by-key step runs again what stored
// partials Redis lost, or reduces again a partition whose output it lost,
// before it fails with ErrLost.
const maxShuffleRounds = 4

// outputPage is the size of a page of a partition's output: what
// ReduceByKeySeq holds of it at once, besides one partition's pairs being
// decoded.
const outputPage = 1 << 20

// ReduceByKey runs emitter em on every element of xs on the queue's
// workers and reduces the pairs it emits per key with red: the result maps
// each key emitted to the fold of its values. It is the pipeline
// ByKey(From(xs), em, red), run as Collect runs it, its pairs gathered in
// a map. The shuffle runs on the workers: each map task combines its pairs
// per key with red, cuts them into partitions by a stable hash of the key
// (Partitions) and stores each partition's partial in Redis; then one
// reduce task per partition folds its partials; the manager reads the P
// outputs. red must be associative and commutative (see redmap.Reducer).
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
// failed index (its TaskErrors' Stage is 1, the by-key step). A partition
// whose reduce fails (red's error, say) leaves its keys out, with an error
// wrapping the cause. If ctx ends first it returns nil and ctx.Err().
//
// Call options apply as for Map: ChunkSize, Attempts, Timeout and the
// others to the map tasks, and to the reduce tasks but ChunkSize. With
// Durable(name), the call outlives its manager as a durable pipeline does
// (Collect): its phases are durable batches named "<name>/map",
// "<name>/reduce1@<round>" (and "<name>/map@<start>+<count>" for map tasks
// run again), held under "<name>/pipeline", its partitions kept
// DurableTTL, and the same call again takes it over where it was.
// OnWorker is refused.
//
// Memory: Redis holds the combined partials of the map tasks done and not
// yet reduced, then each partition's output until the manager read it; the
// manager holds the whole result. For results larger than the manager's
// memory, use ReduceByKeySeq.
func ReduceByKey[In any, K comparable, V any](ctx context.Context, m *Manager, em *redmap.Emitter[In, K, V], red *redmap.Reducer[V], xs []In, opts ...CallOption) (map[K]V, error) {
	out := make(map[K]V)
	// A partition's pairs join the result once it was read whole: one
	// read again after a loss starts over, one that fails leaves its keys
	// out.
	part := make(map[K]V)
	err := runPipeline(ctx, m, ByKey(From(xs), em, red).p, opts, true, func(page []byte) (bool, error) {
		kvs, err := engine.DecodePage[redmap.KV[K, V]](page)
		for _, kv := range kvs {
			part[kv.Key] = kv.Value
		}
		return err == nil, err
	}, func(int) { clear(part) }, func() int {
		maps.Copy(out, part)
		part = make(map[K]V)
		return 0
	})
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	maps.Copy(out, part)
	return out, err
}

// ReduceByKeySeq is ReduceByKey for results larger than the manager's
// memory: it returns the pairs as a sequence, read from Redis one page of
// about 1 MiB at a time as the caller iterates, and a function that returns
// the call's error once the iteration ended (nil if every element and
// partition succeeded). The work starts when the sequence is first
// iterated; it may be iterated once. Breaking out of it ends the call,
// deleting what is left in Redis. Each key comes once. It is Stream of
// the pipeline ByKey(From(xs), em, red).
//
// The manager holds one page and the bookkeeping of one call; a partition
// whose output Redis loses after some of its pages were yielded cannot be
// yielded exactly again, so the sequence stops there with an error
// wrapping ErrLost.
func ReduceByKeySeq[In any, K comparable, V any](ctx context.Context, m *Manager, em *redmap.Emitter[In, K, V], red *redmap.Reducer[V], xs []In, opts ...CallOption) (iter.Seq2[K, V], func() error) {
	kvs, errf := Stream(ctx, m, ByKey(From(xs), em, red), opts...)
	seq := func(yield func(K, V) bool) {
		for kv := range kvs {
			if !yield(kv.Key, kv.Value) {
				return
			}
		}
	}
	return seq, errf
}

// shuffleStore is where a manager reads and renews by-key steps'
// partitions: the queue's first shard (the broker's).
type shuffleStore interface {
	OutputPage(ctx context.Context, p *broker.OutputPageParams) ([]byte, error)
	DropPartitions(ctx context.Context, p *broker.PartitionsParams) error
	RenewPartitions(ctx context.Context, p *broker.PartitionsParams) error
}

var _ shuffleStore = broker.Queue(nil)

// summaries folds the map tasks' summaries in the manager: a by-key step's
// map phase is a MapReduce of them. It never runs on a worker.
var summaries = redmap.Reduce("redmap.shuffle-summaries", func(_ context.Context, a, b wire.MapSummary) (wire.MapSummary, error) {
	return wire.MapSummary{Ranges: append(a.Ranges, b.Ranges...), Keys: a.Keys + b.Keys, Bytes: a.Bytes + b.Bytes, Fails: append(a.Fails, b.Fails...)}, nil
})

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

// salts picks, on a Cluster, each partition's key name of job sh so that
// the partitions go round the masters (as proposeNames does a queue's
// shards); nil elsewhere, or if the Cluster does not say its slots.
func salts(ctx context.Context, m *Manager, sh *wire.Shuffle) []int {
	cm, cluster, err := m.router.p.masters(ctx)
	if !cluster || err != nil || len(cm.Addrs) == 0 {
		return nil
	}
	salts := make([]int, sh.Parts)
	for p := range salts {
		want := cm.Addrs[p%len(cm.Addrs)]
		for s := range 64 * len(cm.Addrs) {
			if cm.Owner(keys.Slot(keys.PartitionTag(m.opts.Queue, sh.Job, p, s))) == want {
				salts[p] = s
				break
			}
		}
	}
	return salts
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

// page returns page i of partition p's output of job sh.
func page(ctx context.Context, m *Manager, sh *wire.Shuffle, p, i int) ([]byte, error) {
	var b []byte
	err := m.faults.riding(ctx, func() error {
		return m.faults.callQueue("reading a map/reduce by key's output", func() (err error) {
			b, err = m.spill.OutputPage(ctx, &broker.OutputPageParams{Shuffle: sh, Part: p, Page: i})
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
