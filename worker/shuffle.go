package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/backoff"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/engine"
)

// The tasks of a map/reduce by key (manager.ReduceByKey; wire.Shuffle): a
// map task combines and partitions its elements' pairs and stores the
// partials in Redis; a reduce task folds a partition's partials and stores
// its output. Both then finish as any task does, with a small output the
// manager counts (wire.MapSummary, wire.ReduceOutput).

// shuffleRedis is where a worker keeps the partitions of a map/reduce by
// key: the queue's first shard (the broker's).
type shuffleRedis interface {
	StorePartials(ctx context.Context, p *broker.StorePartialsParams) error
	Partials(ctx context.Context, p *broker.PartialsParams) ([][]byte, error)
	StoreOutput(ctx context.Context, p *broker.StoreOutputParams) error
}

var _ shuffleRedis = broker.Queue(nil)

// partitionWait bounds how long a task tries to reach its partitions while
// Redis cannot be reached (a failover, a restart): past it the task fails,
// and its manager learns why.
const partitionWait = 30 * time.Second

// defaultPage is the size of an output page when the task does not say.
const defaultPage = 1 << 20

// shuffle runs task c of a map/reduce by key and returns its output frame
// and failures.
func (w *Worker) shuffle(ctx context.Context, c *resolved, t wire.Taken) ([]byte, []codec.Failure) {
	sh, err := wire.DecodeShuffle(c.task.Shuffle)
	if err != nil {
		return nil, whole1(codec.KindDecode, "task: %v", err)
	}
	if sh.Pipe != nil {
		return w.pipeTask(ctx, c, sh, t)
	}
	s, ok := c.h.Shuffler()
	switch {
	case !ok:
		return nil, whole1(codec.KindTypeMismatch, "%q is not an emitter (redmap.Emit): it cannot run in a map/reduce by key", c.task.Func)
	case c.reducer == nil:
		return nil, whole1(codec.KindDecode, "task: a map/reduce by key's task names no reducer")
	}
	if sh.Phase == wire.PhaseMap {
		return w.combine(ctx, c, s, sh, t)
	}
	return w.reduceParts(ctx, c, s, sh)
}

// withdrawn reports whether map task c, about to store its partials, is no
// longer wanted (its job cancelled, its partitions deleted, or its task
// set lost while it ran), and if so marks it withdrawn: it stores nothing,
// for its partials would outlive the job by their TTL, and reports no
// result, for a failure would be taken as its outcome by a manager that
// has since queued it again (after Redis lost its task set). One call a
// map task; on an error it is taken as wanted.
func (w *Worker) withdrawn(ctx context.Context, c *resolved, t wire.Taken) bool {
	gone, err := w.source.unwanted(ctx, map[int][]string{t.Shard: {t.ID}})
	c.withdrawn = err == nil && len(gone.Tasks) > 0
	return c.withdrawn
}

// combine runs a map task: the emitter over its elements, their pairs
// combined per key and cut into partitions, each stored under the task's
// range of the call's elements.
func (w *Worker) combine(ctx context.Context, c *resolved, s engine.Shuffler, sh *wire.Shuffle, t wire.Taken) ([]byte, []codec.Failure) {
	partials, keys, fails := s.Combine(ctx, c.task.Count, c.task.Input, c.policy, c.reducer, sh.Parts)
	if partials == nil {
		return codec.NewOutputEncoder(0).Bytes(), fails
	}
	if w.withdrawn(ctx, c, t) {
		return nil, nil
	}
	start := sh.Base + c.task.Start
	field := wire.Range(start, c.task.Count)
	if err := w.retryRedis(ctx, "store a map task's partials", func(ctx context.Context) error {
		return w.spill.StorePartials(ctx, &broker.StorePartialsParams{Shuffle: sh, Field: field, Partials: partials})
	}); err != nil {
		return codec.NewOutputEncoder(0).Bytes(), []codec.Failure{{Index: 0, Through: c.task.Count - 1, Kind: codec.KindError,
			Msg: fmt.Sprintf("storing the task's partials in Redis: %v", err)}}
	}
	sum := wire.MapSummary{Ranges: []int{start, c.task.Count}, Keys: keys}
	for _, p := range partials {
		sum.Bytes += int64(len(p))
	}
	out := codec.NewOutputEncoder(1)
	if err := out.Add(&sum); err != nil {
		return nil, whole1(codec.KindEncode, "summary: %v", err)
	}
	return out.Bytes(), fails
}

// reduceParts runs a reduce task: for each of its elements (a partition and
// the ranges whose partials it must hold), the partials folded per key and
// stored as the partition's output in their place.
func (w *Worker) reduceParts(ctx context.Context, c *resolved, s engine.Shuffler, sh *wire.Shuffle) ([]byte, []codec.Failure) {
	return w.eachPartition(ctx, c, sh, func(in wire.ReduceInput, partials [][]byte, page int, res *wire.ReduceOutput) *codec.Failure {
		pages, keys, f := s.Merge(ctx, partials, c.reducer, page)
		if f != nil {
			return &codec.Failure{Kind: f.Kind, Msg: fmt.Sprintf("partition %d: %s", in.Part, f.Msg)}
		}
		if err := w.retryRedis(ctx, "store a partition's output", func(ctx context.Context) error {
			return w.spill.StoreOutput(ctx, &broker.StoreOutputParams{Shuffle: sh, Part: in.Part, Pages: pages})
		}); err != nil {
			return &codec.Failure{Kind: codec.KindError, Msg: fmt.Sprintf("storing partition %d's output in Redis: %v", in.Part, err)}
		}
		res.Keys, res.Pages = keys, len(pages)
		for _, pg := range pages {
			res.Bytes += int64(len(pg))
		}
		return nil
	})
}

// eachPartition runs reduce task c's partitions: for each of its elements
// (a partition and the ranges whose partials it must hold), the partials
// read from Redis and handed to reduce with the page size of the outputs,
// which fills in res or fails the partition. A partition missing some
// partials says which (res.Missing), and is not reduced.
func (w *Worker) eachPartition(ctx context.Context, c *resolved, sh *wire.Shuffle, reduce func(in wire.ReduceInput, partials [][]byte, page int, res *wire.ReduceOutput) *codec.Failure) ([]byte, []codec.Failure) {
	ins := make([]wire.ReduceInput, c.task.Count)
	if err := codec.DecodeElements(c.task.Input, ins); err != nil {
		return nil, whole1(codec.KindDecode, "reduce task's input: %v", err)
	}
	page := sh.Page
	if page <= 0 {
		page = defaultPage
	}
	out := codec.NewOutputEncoder(len(ins))
	var fails []codec.Failure
	for i, in := range ins {
		partials, res, f := w.partitionPartials(ctx, sh, in)
		if f == nil && len(res.Missing) == 0 {
			f = reduce(in, partials, page, &res)
		}
		if f == nil {
			if err := out.Add(&res); err != nil {
				f = &codec.Failure{Kind: codec.KindEncode, Msg: err.Error()}
			}
		}
		if f != nil {
			fails = append(fails, codec.Failure{Index: i, Kind: f.Kind, Msg: f.Msg})
			out.AddNil()
		}
	}
	return out.Bytes(), fails
}

// partitionPartials reads the partials of partition in.Part of the ranges
// in.Runs names; res.Missing lists those Redis does not have.
func (w *Worker) partitionPartials(ctx context.Context, sh *wire.Shuffle, in wire.ReduceInput) ([][]byte, wire.ReduceOutput, *codec.Failure) {
	var res wire.ReduceOutput
	ranges, err := wire.ExpandRanges(in.Runs)
	if err == nil && (in.Part < 0 || in.Part >= sh.Parts) {
		err = fmt.Errorf("worker: partition %d of %d", in.Part, sh.Parts)
	}
	if err != nil {
		return nil, res, &codec.Failure{Kind: codec.KindDecode, Msg: fmt.Sprintf("reduce input: %v", err)}
	}
	fields := make([]string, len(ranges)/2)
	for j := range fields {
		fields[j] = wire.Range(ranges[2*j], ranges[2*j+1])
	}
	var partials [][]byte
	err = w.retryRedis(ctx, "read a partition's partials", func(ctx context.Context) (err error) {
		partials, err = w.spill.Partials(ctx, &broker.PartialsParams{Shuffle: sh, Part: in.Part, Fields: fields})
		return err
	})
	if err != nil {
		return nil, res, &codec.Failure{Kind: codec.KindError, Msg: fmt.Sprintf("reading partition %d's partials from Redis: %v", in.Part, err)}
	}
	for j, p := range partials {
		if p == nil {
			res.Missing = append(res.Missing, j)
		}
	}
	return partials, res, nil
}

// whole1 is a whole task's failure, as a list.
func whole1(kind codec.Kind, format string, args ...any) []codec.Failure {
	return []codec.Failure{*wholeFailure(kind, format, args...)}
}

// retryRedis calls f until it succeeds, fails other than transiently, ctx
// ends or partitionWait passes.
func (w *Worker) retryRedis(ctx context.Context, what string, f func(context.Context) error) error {
	var bo backoff.Backoff
	deadline := time.Now().Add(partitionWait)
	for logged := false; ; {
		err := f(ctx)
		if err == nil || !broker.Transient(err) || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		if !logged {
			w.log.WarnContext(ctx, "cannot "+what+"; trying again", "err", err, "for", partitionWait)
			logged = true
		}
		if !bo.Wait(ctx) {
			return err
		}
	}
}
