package manager

import (
	"cmp"
	"context"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/part"
)

// Backup tasks (manager.Backups, redmap.Idempotent): near a batch's end, a
// task held far longer than the batch's typical task is copied, and the
// copy is queued for another worker; the first result wins at the finish,
// which the task set fences, and the other is discarded.
//
// The rule, per batch with backups on:
//   - every task of it is submitted, and at most its copy budget of them
//     may still wait in Redis (the "nearly" of "work left only in running
//     tasks");
//   - at least backupMinRuns of its tasks have finished, whose runs'
//     median m gives the bar: max(backupFactor × m, backupFloor);
//   - a task is copied once it has been held longer than the bar, as far
//     as the manager can tell: a lane is first in, first out, so a task
//     queued before one that finished was taken before that one began
//     (its result's arrival less its run), and has been held at least
//     since then. A task of which no later one finished may still wait,
//     and is not copied;
//   - a batch gets at most backupShare of its tasks' worth of copies (at
//     least one), the longest held first; a copy is never copied;
//   - the copy is queued only while some worker of the queue is idle, never
//     to the worker that holds the original, never for a task lost before
//     (it may be a poison pill) nor of a limited function (backup.lua and
//     take.lua).
const (
	backupFactor  = 2
	backupFloor   = time.Second
	backupMinRuns = 3
	backupShare   = 0.1
	// backupRuns is how many finished runs a batch keeps for its median.
	backupRuns = 1024
)

// backupTick is how often the manager looks for tasks to copy: a local
// look at its running batches, and a script call only to queue copies.
const backupTick = 100 * time.Millisecond

// backups is a batch's backup tasks as its manager keeps them; its batch's
// mu guards it.
type backups struct {
	on     bool
	runs   []int64             // the run times of finished tasks, ns (the first backupRuns)
	copies map[int]*backupCopy // by chunk index: the tasks copied
	counts wire.Backups
}

// backupCopy is one task's copy: the worker that holds the original ("" if
// unknown), and whether its race ended; early if the copy's result came
// before backupsQueued noted the copy queued (the Backup call's reply).
type backupCopy struct {
	holder string
	ended  bool
	early  bool
}

// bar returns how long a task must have been held to be copied, and false
// if too few tasks finished to say.
func (k *backups) bar() (time.Duration, bool) {
	if len(k.runs) < backupMinRuns {
		return 0, false
	}
	runs := slices.Clone(k.runs)
	slices.Sort(runs)
	median := time.Duration(runs[len(runs)/2])
	return max(backupFactor*median, backupFloor), true
}

// budget returns how many copies a batch of tasks tasks may have.
func budget(tasks int) int {
	return max(1, int(math.Ceil(backupShare*float64(tasks))))
}

// ran notes the run of a finished task.
func (k *backups) ran(nanos int64) {
	if len(k.runs) < backupRuns {
		k.runs = append(k.runs, nanos)
	}
}

// ended notes that chunk ci's task ended with a result, a copy's
// (byCopy) or the original's, and returns the race that ended, if the
// task had a copy.
func (k *backups) ended(ci int, byCopy bool) (broker.Race, bool) {
	c, ok := k.copies[ci]
	if !ok || c.ended {
		return broker.Race{}, false
	}
	c.ended = true
	if byCopy {
		k.counts.Won++
	} else {
		k.counts.Wasted++
	}
	return broker.Race{Worker: c.holder, Lost: byCopy}, true
}

// backupEnded notes chunk ci's result r for the batch's backups: its run
// for the median, when it began at the latest, and the race it ended, if
// it had a copy; b.mu must be held.
func (b *Batch[Out]) backupEnded(ci int, r *codec.Result) {
	k := &b.bk
	if !k.on {
		return
	}
	b.feed.chunks[ci].began = time.Now().Add(-time.Duration(r.Nanos))
	k.ran(r.Nanos)
	if r.Backup && k.copies[ci] == nil {
		// The copy ran and won before the reply of the call that queued it
		// was read (an idle worker is rung at once): it is counted started
		// now, while the batch runs, so that its record counts it; its
		// holder is recorded once the reply names it (backupsQueued).
		if k.copies == nil {
			k.copies = make(map[int]*backupCopy)
		}
		k.copies[ci] = &backupCopy{early: true}
		k.counts.Started++
		b.env.backups.started.Add(1)
	}
	race, raced := k.ended(ci, r.Backup)
	if !raced {
		return
	}
	if r.Backup {
		b.env.backups.won.Add(1)
	} else {
		b.env.backups.wasted.Add(1)
	}
	if race.Worker != "" {
		b.env.backups.race(race)
	}
}

// backupsOver counts the copies whose race had not ended when the batch
// did as wasted: their tasks ended otherwise (failed, cancelled).
func (b *Batch[Out]) backupsOver() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ci := range b.bk.copies {
		if _, raced := b.bk.ended(ci, false); raced {
			b.env.backups.wasted.Add(1)
		}
	}
}

// dueBackups returns the tasks of the batch to copy now, by the rule
// above, the longest held first, at most broker.MaxBackups; the
// queue has shards shards. It marks them copied only once backupsQueued
// says so.
func (b *Batch[Out]) dueBackups(now time.Time, shards int) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := &b.bk
	if !k.on || b.finished() || !b.feed.exhausted || b.feed.inflight == 0 {
		return nil
	}
	room := budget(len(b.feed.chunks)) - k.counts.Started
	bar, ok := k.bar()
	if last := b.feed.chunks[len(b.feed.chunks)-1]; room <= 0 || !ok || last.start+last.count < b.feed.n {
		return nil // no room, too few runs to say, or not all submitted yet: no scan
	}
	type due struct {
		tid  string
		held time.Duration
	}
	var dues []due
	began := make([]time.Time, max(shards, 1)) // per shard: the earliest start of a task after this one
	waiting := 0
	for ci := len(b.feed.chunks) - 1; ci >= 0; ci-- {
		c := &b.feed.chunks[ci]
		if c.tid == "" {
			continue
		}
		s := shardIndex(c.tid, shards)
		switch {
		case c.over:
			if !c.began.IsZero() && (began[s].IsZero() || c.began.Before(began[s])) {
				began[s] = c.began
			}
		case began[s].IsZero():
			waiting++ // it may still wait in its lane
		case k.copies[ci] == nil && now.Sub(began[s]) > bar:
			dues = append(dues, due{c.tid, now.Sub(began[s])})
		}
	}
	if waiting > budget(len(b.feed.chunks)) || len(dues) == 0 {
		return nil
	}
	slices.SortStableFunc(dues, func(x, y due) int { return cmp.Compare(y.held, x.held) })
	dues = dues[:min(len(dues), room, broker.MaxBackups)]
	tids := make([]string, len(dues))
	for i, d := range dues {
		tids[i] = d.tid
	}
	return tids
}

// backupsQueued records what became of the copies dueBackups asked for:
// those queued are counted started, and never copied again; those gone or
// lost are never copied either; those refused for want of an idle worker
// may be asked for again.
func (b *Batch[Out]) backupsQueued(got []broker.Backup) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := &b.bk
	if k.copies == nil {
		k.copies = make(map[int]*backupCopy)
	}
	for _, g := range got {
		ci, ok := b.chunkOf(g.Task)
		if !ok {
			continue
		}
		switch g.State {
		case broker.BackupQueued:
			if c := k.copies[ci]; c != nil && c.early { // counted, and won, already (backupEnded)
				if g.Holder != "" {
					b.env.backups.race(broker.Race{Worker: g.Holder, Lost: true})
				}
				continue
			}
			k.copies[ci] = &backupCopy{holder: g.Holder}
			k.counts.Started++
			b.env.backups.started.Add(1)
			if b.feed.chunks[ci].over {
				// The original's result came before the reply: the copy
				// is wasted already, and no result will end its race.
				if race, raced := k.ended(ci, false); raced {
					b.env.backups.wasted.Add(1)
					if race.Worker != "" {
						b.env.backups.race(race)
					}
				}
			}
		case broker.BackupGone, broker.BackupLost:
			k.copies[ci] = &backupCopy{ended: true} // not copied: never asked again
		}
	}
}

// chunkOf returns the index of the chunk of task tid; b.mu must be held.
// Only for the few tasks copied: it walks the chunks.
func (b *Batch[Out]) chunkOf(tid string) (int, bool) {
	for ci := len(b.feed.chunks) - 1; ci >= 0; ci-- {
		if b.feed.chunks[ci].tid == tid {
			return ci, true
		}
	}
	return 0, false
}

// shardIndex returns the index of task tid's shard among shards: its
// sequence number modulo the shard count (router.of).
func shardIndex(tid string, shards int) int {
	if shards <= 1 {
		return 0
	}
	seq, _ := id.Seq(tid)
	return int(seq % uint64(shards))
}

// backupCounts is the manager's count of its batches' backup tasks (Stats),
// and the races that ended, for the next Backup call to record.
type backupCounts struct {
	started, won, wasted atomic.Int64

	mu    sync.Mutex
	races []broker.Race
}

// race notes a race that ended.
func (c *backupCounts) race(r broker.Race) {
	c.mu.Lock()
	c.races = append(c.races, r)
	c.mu.Unlock()
}

// takeRaces returns the races noted since the last call.
func (c *backupCounts) takeRaces() []broker.Race {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.races
	c.races = nil
	return r
}

// giveBack notes races again whose record failed, for the next call.
func (c *backupCounts) giveBack(r []broker.Race) {
	c.mu.Lock()
	c.races = append(r, c.races...)
	c.mu.Unlock()
}

// stragglers queues backup tasks of the manager's running batches, every
// backupTick (or Poll, if shorter), and records the races that ended.
type stragglers struct {
	stragglersParams
	*part.Runner
}

// stragglersParams is what stragglers are built from.
type stragglersParams struct {
	mid     string
	router  *router
	batches *registry
	counts  *backupCounts
	faults  *faults
	log     *slog.Logger
}

func newStragglers(p stragglersParams, poll time.Duration) *stragglers {
	s := &stragglers{stragglersParams: p}
	s.Runner = part.Every(min(poll, backupTick), s.tick)
	return s
}

func (s *stragglers) tick(ctx context.Context) {
	now, shards := time.Now(), len(s.router.list())
	races := s.counts.takeRaces()
	for _, b := range s.batches.batches() {
		tids := b.dueBackups(now, shards)
		if len(tids) == 0 {
			continue
		}
		_ = eachShard(s.router.byShard(tids), func(sh *shard, tids []string) error {
			p := &broker.BackupParams{Manager: s.mid, Tasks: tids}
			if sh.i == 0 {
				p.Races, races = races, nil
			}
			var got []broker.Backup
			if !s.faults.keep(ctx, sh, "queuing backup tasks", quietOutage, func() (err error) {
				got, err = sh.rdb.Backup(ctx, p)
				return err
			}) {
				s.counts.giveBack(p.Races)
				return nil
			}
			queued := 0
			for _, g := range got {
				if g.State == broker.BackupQueued {
					queued++
				}
			}
			if queued > 0 {
				s.log.Info("queued backup tasks: tasks held far longer than their batch's typical task", "tasks", queued, "shard", sh.i)
			}
			b.backupsQueued(got)
			return nil
		})
	}
	if len(races) > 0 {
		first := s.router.first()
		if !s.faults.keep(ctx, first, "recording backup races", quietOutage, func() error {
			_, err := first.rdb.Backup(ctx, &broker.BackupParams{Manager: s.mid, Races: races})
			return err
		}) {
			s.counts.giveBack(races)
		}
	}
}
