package memory

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/id"
)

// The manager's side of the contract: task sets with their counts and
// epochs, result lists, the queue-wide records a manager publishes.

// ErrDurable is what a durable batch's operations (Claim, Resume, Kept,
// Sums, AddSums) return: durable batches need Redis (their tests use it).
var ErrDurable = errors.New("memory: durable batches are not kept in memory")

// managerState is what a shard keeps of its managers.
type managerState struct {
	counts  map[string]int64    // each task set's count of tasks ever submitted
	epochs  map[string]string   // each task set's epoch
	lists   map[string][]string // each manager's result list
	changed chan struct{}       // closed and replaced at every push
	cancels []string            // tasks withdrawn, in order
	sent    []string            // every task submitted, in order
	dropped map[string]bool
	// run, if set, plays a worker that runs each task as it is submitted:
	// the outputs of its elements; nanos is the time each element took, as
	// results report it; entry, if set, is the raw entry of task tid
	// instead (any bytes, as a broken or hostile worker could write).
	run   func(t *codec.Task) ([]byte, error)
	nanos int64
	entry func(tid string) []byte
	// queue-wide (shard 0)
	served      map[string]bool // functions a live worker serves
	noWorker    bool            // Served says no worker is live at all
	published   []map[string]wire.BatchProgress
	cancelBatch []string // batch ids the next PublishBatches says an operator cancelled
}

func newManagerState() managerState {
	return managerState{counts: map[string]int64{}, epochs: map[string]string{}, lists: map[string][]string{},
		changed: make(chan struct{}), dropped: map[string]bool{},
		served: map[string]bool{}}
}

// Scene-setting and looking, for the manager's tests.

// RunOnSubmit plays a worker that runs each task as it is submitted (and
// those Complete completes) with run, the outputs of its elements, each
// element reported to have taken nanos; nil: tasks wait.
func (s *Shard) RunOnSubmit(run func(t *codec.Task) ([]byte, error), nanos int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m.run, s.m.nanos = run, nanos
}

// WriteEntries makes the played worker push entry(tid) for each task it
// runs, in place of its result.
func (s *Shard) WriteEntries(entry func(tid string) []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m.entry = entry
}

// Complete plays a worker that finishes task tid, as RunOnSubmit does: its
// result is pushed and it leaves its task set. It reports whether the task
// was in the set.
func (s *Shard) Complete(tid string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tasks[tid]
	if !ok {
		return false
	}
	delete(s.tasks, tid)
	s.pushLocked(id.Manager(tid), string(s.resultLocked(tid, t.payload)))
	return true
}

// Push appends entry to manager mid's result list.
func (s *Shard) Push(mid, entry string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pushLocked(mid, entry)
}

// Lose forgets every task set, their counts and epochs, as a Redis that
// lost its data (or a replica promoted before it had the writes).
func (s *Shard) Lose() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tasks = map[string]task{}
	s.m.counts, s.m.epochs = map[string]int64{}, map[string]string{}
}

// Serve says that a live worker serves function name (Served); SetNoWorker
// that no worker is live at all.
func (s *Shard) Serve(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m.served[name] = true
}

// SetNoWorker says, in Served, that no worker is live.
func (s *Shard) SetNoWorker(none bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m.noWorker = none
}

// CancelBatches makes the next PublishBatches say that an operator asked
// for batches ids to be cancelled.
func (s *Shard) CancelBatches(ids ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m.cancelBatch = append(s.m.cancelBatch, ids...)
}

// SetShardNames sets the queue's list of shard names.
func (s *Shard) SetShardNames(names ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.names = slices.Clone(names)
	s.count = max(s.count, len(names)+1)
}

// SubmittedIDs returns the id of every task submitted, in order.
func (s *Shard) SubmittedIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.m.sent)
}

// Payload returns task tid's payload, nil if it is in no task set.
func (s *Shard) Payload(tid string) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tasks[tid].payload
}

// Cancels returns the tasks withdrawn by Cancel, in order.
func (s *Shard) Cancels() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.m.cancels)
}

// Dropped reports whether manager mid's keys were dropped.
func (s *Shard) Dropped(mid string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.dropped[mid]
}

// Published returns what each PublishBatches published, in order.
func (s *Shard) Published() []map[string]wire.BatchProgress {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.m.published)
}

// The contract.

// Submit queues tasks on p.Lane (the public list here) or p.Worker's
// private list, as submit.lua: the set was intact if it counted at least
// what the manager expected and its epoch is the manager's (or it has
// none yet); a recovery's p.Expect.NewEpoch replaces it.
func (s *Shard) Submit(_ context.Context, p *broker.SubmitParams) (*broker.SubmitResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.rec.Call("submit"); err != nil {
		return nil, err
	}
	mid, exp := p.Manager, p.Expect
	intact := s.m.counts[mid] >= exp.Count && (s.m.epochs[mid] == "" || s.m.epochs[mid] == exp.Epoch)
	switch {
	case exp.NewEpoch != "":
		s.m.epochs[mid] = exp.NewEpoch
	case s.m.epochs[mid] == "":
		s.m.epochs[mid] = exp.Epoch
	}
	for _, t := range p.Tasks {
		s.m.counts[mid]++
		s.m.sent = append(s.m.sent, t.ID)
		if s.m.run != nil || s.m.entry != nil { // a worker that runs tasks as they come
			s.pushLocked(mid, string(s.resultLocked(t.ID, t.Payload)))
			continue
		}
		s.tasks[t.ID] = task{payload: t.Payload, attempt: s.tasks[t.ID].attempt} // its attempts are kept apart, as in Redis
		if p.Worker != "" {
			s.private[p.Worker] = append(s.private[p.Worker], t.ID)
		} else {
			s.public = append(s.public, t.ID)
		}
	}
	switch {
	case p.Worker != "" && len(p.Tasks) > 0:
		s.ringLocked(p.Worker, "1")
	case p.Worker == "":
		s.ringIdle(len(p.Tasks))
	}
	return &broker.SubmitResult{Count: s.m.counts[mid], Intact: intact}, nil
}

// resultLocked is the entry the played worker pushes for task tid.
func (s *Shard) resultLocked(tid string, payload []byte) []byte {
	if s.m.entry != nil {
		return s.m.entry(tid)
	}
	t, err := codec.DecodeTask(payload, 0)
	if err != nil {
		panic(err)
	}
	values, err := s.m.run(t)
	if err != nil {
		panic(err)
	}
	r, err := codec.EncodeResult(&codec.Result{Task: tid, Values: values, Nanos: s.m.nanos * int64(t.Count)})
	if err != nil {
		panic(err)
	}
	return r
}

// Cancel withdraws tasks from their task set.
func (s *Shard) Cancel(_ context.Context, p *broker.CancelParams) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.rec.Call("cancel"); err != nil {
		return err
	}
	for _, tid := range p.Tasks {
		delete(s.tasks, tid)
		delete(s.copied, tid)
	}
	s.m.cancels = append(s.m.cancels, p.Tasks...)
	return nil
}

// Backup queues copies of p.Tasks, as backup.lua: only while a worker is
// idle, only of tasks still in their task sets and never lost, each with
// the worker that holds the original, and marks them copied. It keeps no record of races (the
// operators' reads are redisbroker.Admin's, on Redis).
func (s *Shard) Backup(_ context.Context, p *broker.BackupParams) ([]broker.Backup, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.rec.Call("backup"); err != nil {
		return nil, err
	}
	out := make([]broker.Backup, len(p.Tasks))
	idle := len(s.idle) > 0
	for i, tid := range p.Tasks {
		out[i] = broker.Backup{Task: tid, State: broker.BackupBusy}
		t, ok := s.tasks[tid]
		switch {
		case !idle:
		case !ok:
			out[i].State = broker.BackupGone
		case t.attempt > 0:
			out[i].State = broker.BackupLost
		default:
			out[i].State = broker.BackupQueued
			for _, w := range slices.Sorted(maps.Keys(s.held)) {
				if s.held[w][tid] {
					out[i].Holder = w
					break
				}
			}
			s.backups = append(s.backups, backupEntry{tid: tid, holder: out[i].Holder})
			s.copied[tid] = true
		}
	}
	if idle {
		s.ringIdle(len(p.Tasks))
	}
	return out, nil
}

// Ping answers.
func (s *Shard) Ping(context.Context) error { return s.rec.Call("ping") }

// trimLocked drops the entries handled last time (if the last of them is
// still the one marked) and returns up to limit more.
func (s *Shard) trimLocked(p *broker.ReadResultsParams) []string {
	l := s.m.lists[p.Manager]
	if p.Handled > 0 && len(l) >= p.Handled && broker.Mark(l[p.Handled-1]) == p.Mark {
		l = l[p.Handled:]
		s.m.lists[p.Manager] = l
	}
	if p.Limit <= 0 {
		return slices.Clone(l) // LRANGE 0 -1
	}
	return slices.Clone(l[:min(p.Limit, len(l))])
}

// ReadResults trims what was handled and reads up to p.Limit entries.
func (s *Shard) ReadResults(_ context.Context, p *broker.ReadResultsParams) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.rec.Call("readresults"); err != nil {
		return nil, err
	}
	return s.trimLocked(p), nil
}

// ReadThenWait reads, and waits up to p.Wait for an entry if none came.
func (s *Shard) ReadThenWait(ctx context.Context, p *broker.ReadResultsParams) (*broker.ReadThenWaitResult, error) {
	entries, err := s.ReadResults(ctx, p)
	if err != nil || len(entries) > 0 || p.Wait <= 0 {
		return &broker.ReadThenWaitResult{Entries: entries}, err
	}
	first, err := s.WaitResults(ctx, &broker.WaitResultsParams{Manager: p.Manager, Timeout: p.Wait})
	if first == "" {
		return &broker.ReadThenWaitResult{FromWait: true}, err
	}
	return &broker.ReadThenWaitResult{Entries: []string{first}, FromWait: true}, err
}

// WaitResults waits up to p.Timeout for an entry on p.Manager's list and
// returns the first, leaving it there.
func (s *Shard) WaitResults(ctx context.Context, p *broker.WaitResultsParams) (string, error) {
	if p.Timeout <= 0 {
		return "", errors.New("wait results: timeout must be positive")
	}
	t := time.NewTimer(p.Timeout)
	defer t.Stop()
	for {
		s.mu.Lock()
		if err := s.rec.Call("waitresults"); err != nil {
			s.mu.Unlock()
			return "", err
		}
		if l := s.m.lists[p.Manager]; len(l) > 0 {
			s.mu.Unlock()
			return l[0], nil
		}
		changed := s.m.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-t.C:
			return "", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// Unstaged returns the entries: memory stages no result.
func (s *Shard) Unstaged(_ context.Context, p *broker.EntriesParams) ([]string, error) {
	return p.Entries, nil
}

// StagedSizes returns each entry's length.
func (s *Shard) StagedSizes(_ context.Context, p *broker.EntriesParams) ([]int, error) {
	sizes := make([]int, len(p.Entries))
	for i, e := range p.Entries {
		sizes[i] = len(e)
	}
	return sizes, nil
}

// WakeCollector pushes a wake entry.
func (s *Shard) WakeCollector(_ context.Context, p *broker.ManagerParams) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pushLocked(p.Manager, wire.EncodeEntry(wire.Entry{Kind: wire.EntryWake}))
	return nil
}

// Renew renews nothing: memory's keys never expire. It records the call.
func (s *Shard) Renew(context.Context, *broker.RenewParams) error {
	return s.rec.Call("renew")
}

// Drop deletes a manager's task set and result list.
func (s *Shard) Drop(_ context.Context, p *broker.ManagerParams) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.rec.Call("drop"); err != nil {
		return err
	}
	s.m.dropped[p.Manager] = true
	for tid := range s.tasks {
		if id.Manager(tid) == p.Manager {
			delete(s.tasks, tid)
		}
	}
	delete(s.m.lists, p.Manager)
	delete(s.m.counts, p.Manager)
	delete(s.m.epochs, p.Manager)
	return nil
}

// ForgetLanes keeps no lanes: it records the call.
func (s *Shard) ForgetLanes(context.Context, *broker.ForgetLanesParams) error {
	return s.rec.Call("forgetlanes")
}

// Submitted returns a task set's count and epoch.
func (s *Shard) Submitted(_ context.Context, p *broker.ManagerParams) (*broker.SubmittedResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.rec.Call("submitted"); err != nil {
		return nil, err
	}
	return &broker.SubmittedResult{Count: s.m.counts[p.Manager], Epoch: s.m.epochs[p.Manager]}, nil
}

// Missing returns those of p.Tasks not in their task set, with its count
// and epoch.
func (s *Shard) Missing(_ context.Context, p *broker.MissingParams) (*broker.MissingResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.rec.Call("missing"); err != nil {
		return nil, err
	}
	out := &broker.MissingResult{Count: s.m.counts[p.Manager], Epoch: s.m.epochs[p.Manager]}
	for _, tid := range p.Tasks {
		if _, ok := s.tasks[tid]; !ok {
			out.Missing = append(out.Missing, tid)
		}
	}
	return out, nil
}

// Audit finds the manager's tasks that are in its task set but in no list
// and no held set, and queues them again (a private one of a worker whose
// lease lapsed is lost instead); it names those not in the set, and counts
// the result list.
func (s *Shard) Audit(_ context.Context, p *broker.AuditParams) (*wire.Audited, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.rec.Call("audit"); err != nil {
		return nil, err
	}
	out := &wire.Audited{Unread: int64(len(s.m.lists[p.Manager]))}
	placed := map[string]bool{}
	for _, l := range s.private {
		for _, tid := range l {
			placed[tid] = true
		}
	}
	for _, tid := range s.public {
		placed[tid] = true
	}
	for _, ms := range s.held {
		for m := range ms {
			placed[wire.HeldID(m)] = true
		}
	}
	now := time.Now()
	for _, g := range p.Groups {
		for _, tid := range g.Tasks {
			if _, ok := s.tasks[tid]; !ok {
				out.Absent = append(out.Absent, tid)
				continue
			}
			if placed[tid] {
				continue
			}
			switch until, live := s.leases[g.Worker]; {
			case g.Worker == "":
				s.public = append([]string{tid}, s.public...)
				out.Requeued++
			case live && until.After(now):
				s.private[g.Worker] = append([]string{tid}, s.private[g.Worker]...)
				out.Requeued++
			default:
				delete(s.tasks, tid)
				s.pushLocked(p.Manager, wire.EncodeEntry(wire.Entry{Kind: wire.EntryLost, Task: tid, Worker: g.Worker}))
				out.Lost++
			}
		}
	}
	return out, nil
}

// SetAsideTasks sets nothing aside: memory holds no foreign data.
func (s *Shard) SetAsideTasks(context.Context, *broker.SetAsideTasksParams) bool { return false }

// Resume is a durable batch's: not kept in memory.
func (s *Shard) Resume(context.Context, *broker.ResumeParams) (*wire.Resumed, error) {
	return nil, ErrDurable
}

// Kept is a durable batch's: not kept in memory.
func (s *Shard) Kept(context.Context, *broker.KeptParams) ([]string, error) { return nil, ErrDurable }

// LiveWorkers returns the workers whose lease holds.
func (s *Shard) LiveWorkers(context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.rec.Call("liveworkers"); err != nil {
		return nil, err
	}
	var out []string
	now := time.Now()
	for wid, until := range s.leases {
		if until.After(now) {
			out = append(out, wid)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Served says a batch is served if the function it calls (the name before
// the tab) was Serve'd, that no worker is live if SetNoWorker said so,
// else that none registered it.
func (s *Shard) Served(_ context.Context, p *broker.ServedParams) ([]wire.Serving, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.rec.Call("served"); err != nil {
		return nil, err
	}
	out := make([]wire.Serving, len(p.Calls))
	for i, c := range p.Calls {
		name, _, _ := strings.Cut(c, "\t")
		out[i] = wire.Serving{Code: wire.Unregistered, Name: name}
		if s.m.noWorker {
			out[i].Code = wire.NoWorker
		}
		if s.m.served[name] {
			out[i].Code = wire.ServedBy
		}
	}
	return out, nil
}

// ReadLimit finds none in force.
func (s *Shard) ReadLimit(context.Context, *broker.ReadLimitParams) (*broker.LimitResult, error) {
	return &broker.LimitResult{}, s.rec.Call("readlimit")
}

// AdoptShards takes the names the list has, growing it by the proposals
// beyond them, and returns the list.
func (s *Shard) AdoptShards(_ context.Context, p *broker.ShardsParams) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.rec.Call("adoptshards"); err != nil {
		return nil, err
	}
	if len(p.Names) > len(s.names) {
		s.names = append(s.names, p.Names[len(s.names):]...)
	}
	s.count = max(s.count, len(s.names)+1)
	return slices.Clone(s.names), nil
}

// AddShards adds the names the list lacks, and returns it.
func (s *Shard) AddShards(_ context.Context, p *broker.ShardsParams) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.rec.Call("addshards"); err != nil {
		return nil, err
	}
	for _, n := range p.Names {
		if !slices.Contains(s.names, n) {
			s.names = append(s.names, n)
		}
	}
	s.count = max(s.count, len(s.names)+1)
	return slices.Clone(s.names), nil
}

// PublishBatches records what was published and returns the batches
// CancelBatches named.
func (s *Shard) PublishBatches(_ context.Context, p *broker.PublishBatchesParams) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.rec.Call("publishbatches"); err != nil {
		return nil, err
	}
	s.m.published = append(s.m.published, p.Batches)
	c := s.m.cancelBatch
	s.m.cancelBatch = nil
	return c, nil
}

// RecordBatches keeps no history: the history's tests run on Redis. It
// records the call.
func (s *Shard) RecordBatches(context.Context, *broker.RecordBatchesParams) error {
	return s.rec.Call("recordbatches")
}

// RecordFailed keeps no failed elements, as RecordBatches. It records the
// call.
func (s *Shard) RecordFailed(context.Context, *broker.RecordFailedParams) error {
	return s.rec.Call("recordfailed")
}

// RestoreStages keeps no stage counts, as RecordBatches. It records the
// call.
func (s *Shard) RestoreStages(context.Context, *broker.RestoreStagesParams) error {
	return s.rec.Call("restorestages")
}

// Claim is a durable batch's: not kept in memory.
func (s *Shard) Claim(context.Context, *broker.ClaimParams) (*wire.Claimed, error) {
	return nil, ErrDurable
}

// Sums is a durable batch's: not kept in memory.
func (s *Shard) Sums(context.Context, *broker.SumsParams) (map[string]string, error) {
	return nil, ErrDurable
}

// AddSums is a durable batch's: not kept in memory.
func (s *Shard) AddSums(context.Context, *broker.AddSumsParams) error { return ErrDurable }

func (s *Shard) pushLocked(mid, entry string) {
	s.m.lists[mid] = append(s.m.lists[mid], entry)
	close(s.m.changed)
	s.m.changed = make(chan struct{})
}

// Pipeline is a durable pipeline's: not kept in memory.
func (s *Shard) Pipeline(context.Context, *broker.PipelineParams) (*wire.PipelineRecord, error) {
	return nil, ErrDurable
}

// RecordPipeline is a durable pipeline's: not kept in memory.
func (s *Shard) RecordPipeline(context.Context, *broker.RecordPipelineParams) error {
	return ErrDurable
}
