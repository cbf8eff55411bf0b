package wire

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/redmap/redmap/codec"
)

// The records redmap keeps in Redis for operators, and the entries of a
// manager's result list, each with the one pair of functions that writes and
// reads it. Writers and readers (worker, manager, CLI) use these and nothing
// else, so a record changes in one place.

// WorkerInfo is what a worker publishes with every heartbeat (the hash
// w:<id>:info, living one lease): who it is, what it serves, how it does.
type WorkerInfo struct {
	Host        string
	PID         int
	Concurrency int
	Lease       time.Duration
	Started     time.Time
	Heartbeat   time.Time // when the worker sent it, by its own clock
	Running     int64     // tasks running now
	Taken       int64
	Delivered   int64
	Failed      int64
	Functions   []string      // the names it registered
	Serves      []string      // what it registered, "<name>\t<signature>" each; served.lua reads them
	State       string        // "running", "draining" once it takes no more tasks; "stopped" (it retired) or "dead" (reaped) once gone
	Every       time.Duration // how often it heartbeats
	Gone        time.Time     // when it was reaped (reap.lua writes it), by the Redis clock; zero while registered
	Error       string        // its last failed Redis call, "" once all is well
	CacheHits   int64         // constant lookups its memo served
	CacheBytes  int64         // bytes of constants it fetched
	Suspects    int64         // suspects it ran alone (tasks lost SuspectAfter times: maybe poison pills)
	Alone       string        // the suspect it runs alone now, and why; "" if none
	AloneTask   string        // that suspect's task id, "" if none: its batch shows it (id.Batch)
	Version     string        // its program's build (buildinfo.Version)
	// BusyFor is how long, by the worker's clock at Heartbeat, it has run
	// tasks (Running > 0) or none, whichever it does now: how long an
	// idle or running worker has been so (0 if unknown: an older build).
	BusyFor time.Duration
}

// The fields of a worker's info hash that something other than
// EncodeWorkerInfo writes or reads: served.lua reads "serves", and
// PublishError writes "error" alone when a heartbeat fails.
const (
	InfoFunctions = "functions"
	InfoServes    = "serves"
	InfoError     = "error"
)

// EncodeWorkerInfo returns i as the field, value pairs of its hash.
func EncodeWorkerInfo(i WorkerInfo) []any {
	return []any{
		"host", i.Host,
		"pid", i.PID,
		"concurrency", i.Concurrency,
		"lease", i.Lease.Milliseconds(),
		"started", i.Started.Unix(),
		"heartbeat", i.Heartbeat.UnixMilli(),
		"running", i.Running,
		"taken", i.Taken,
		"delivered", i.Delivered,
		"failed", i.Failed,
		InfoFunctions, strings.Join(i.Functions, ","),
		InfoServes, strings.Join(i.Serves, "\n"),
		"state", i.State,
		InfoError, i.Error,
		"cache_hits", i.CacheHits,
		"cache_bytes", i.CacheBytes,
		"every", i.Every.Milliseconds(),
		"suspects", i.Suspects,
		"alone", i.Alone,
		"alone_task", i.AloneTask,
		"version", i.Version,
		"busy_for", i.BusyFor.Milliseconds(),
	}
}

// DecodeWorkerInfo reads a worker's info hash. A field that is missing (a
// hash that only PublishError wrote) reads as zero; one that does not parse
// is an error naming it, with the rest decoded.
func DecodeWorkerInfo(h map[string]string) (WorkerInfo, error) {
	var bad []string
	num := func(k string) int64 {
		s, ok := h[k]
		if !ok {
			return 0
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			bad = append(bad, k)
		}
		return n
	}
	i := WorkerInfo{
		Host:        h["host"],
		PID:         int(num("pid")),
		Concurrency: int(num("concurrency")),
		Lease:       time.Duration(num("lease")) * time.Millisecond,
		Started:     time.Unix(num("started"), 0),
		Heartbeat:   time.UnixMilli(num("heartbeat")),
		Running:     num("running"),
		Taken:       num("taken"),
		Delivered:   num("delivered"),
		Failed:      num("failed"),
		State:       h["state"],
		Error:       h[InfoError],
		CacheHits:   num("cache_hits"),
		CacheBytes:  num("cache_bytes"),
		Every:       time.Duration(num("every")) * time.Millisecond,
		Suspects:    num("suspects"),
		Alone:       h["alone"],
		AloneTask:   h["alone_task"],
		Version:     h["version"],
		BusyFor:     time.Duration(num("busy_for")) * time.Millisecond,
	}
	if g := num("gone"); g > 0 {
		i.Gone = time.UnixMilli(g)
	}
	if f := h[InfoServes]; f != "" {
		i.Serves = strings.Split(f, "\n")
	}
	if f := h[InfoFunctions]; f != "" {
		i.Functions = strings.Split(f, ",")
	}
	if len(bad) > 0 {
		return i, fmt.Errorf("worker info: malformed %s", strings.Join(bad, ", "))
	}
	return i, nil
}

// FailureGroup counts the failed elements of one function, kind and
// fingerprint (the message with its numbers, ids, quoted strings and paths
// masked: see Fingerprint), as operators read them (redmap failures, the
// dashboard): a field of the queue's failure-groups hash, as JSON. A worker
// sends the groups it saw since its last heartbeat, and failures.lua adds
// them to the queue's.
type FailureGroup struct {
	Func        string `json:"func"`
	Kind        string `json:"kind"`
	Fingerprint string `json:"fingerprint"`
	Count       int64  `json:"count"`
	First       int64  `json:"first_ms"` // Unix ms, the workers' clocks
	Last        int64  `json:"last_ms"`
	Sample      string `json:"sample"`          // the last one's message, in full
	Task        string `json:"task"`            // the last one's task
	Stack       string `json:"stack,omitempty"` // a stack one of them recorded
	// Workers that saw it, comma-separated, at most MaxGroupWorkers
	// (a string: Lua's cjson cannot tell an empty list from an empty map).
	Workers string `json:"workers"`
}

// MaxGroupWorkers caps the workers a failure group names.
const MaxGroupWorkers = 10

// OtherGroup is the fingerprint of the failures of a function and kind
// counted past keys.MaxFailureGroups groups.
const OtherGroup = "(other)"

// Key returns the group's field in the failure-groups hash.
func (g FailureGroup) Key() string { return g.Func + "\t" + g.Kind + "\t" + g.Fingerprint }

// MaxSample and MaxStack cap a failure group's message and stack, in
// bytes: what is past them is cut, on the way into Redis and out of it.
const (
	MaxSample = 2 << 10
	MaxStack  = 16 << 10
)

// EncodeGroup returns g as a field value of the failure-groups hash, its
// sample and stack cut to MaxSample and MaxStack.
func EncodeGroup(g FailureGroup) string { return encodeJSON(g.cut()) }

// DecodeGroup reads a field value of the failure-groups hash, its sample
// and stack cut to MaxSample and MaxStack whoever wrote them.
func DecodeGroup(s string) (FailureGroup, error) {
	g, err := decodeJSON[FailureGroup](s, "failure group")
	return g.cut(), err
}

// cut returns g with its sample and stack at most MaxSample and MaxStack
// bytes, cut at a rune's start.
func (g FailureGroup) cut() FailureGroup {
	g.Sample, g.Stack = Cut(g.Sample, MaxSample), Cut(g.Stack, MaxStack)
	return g
}

// Cut returns s cut to at most n bytes (at a rune's start), with an
// ellipsis if anything was cut.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n - len("…")
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

// encodeJSON returns v, a record of plain fields, as JSON.
func encodeJSON(v any) string {
	b, _ := json.Marshal(v) // plain fields: cannot fail
	return string(b)
}

// decodeJSON reads a record of what (for the error) from JSON.
func decodeJSON[T any](s, what string) (T, error) {
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		var zero T
		return zero, fmt.Errorf("%s: %w", what, err)
	}
	return v, nil
}

// The parts of a message that Fingerprint masks, in the order it masks
// them: quoted strings, paths, UUIDs and long hex ids, then numbers.
var (
	quotedRe = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'[^']*'|` + "`[^`]*`")
	pathRe   = regexp.MustCompile(`(?:[A-Za-z]:\\|\.{0,2}/|~/)[^\s"':,;()\[\]{}]*[/\\][^\s"':,;()\[\]{}]*|(?:\.{0,2}/|~/)[^\s"':,;()\[\]{}/]+`)
	hexRe    = regexp.MustCompile(`\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b|\b0x[0-9a-fA-F]+\b|\b[0-9a-fA-F]*[0-9][0-9a-fA-F]*[a-fA-F][0-9a-fA-F]*\b|\b[0-9a-fA-F]*[a-fA-F][0-9a-fA-F]*[0-9][0-9a-fA-F]*\b`)
	numRe    = regexp.MustCompile(`-?\b\d+(?:\.\d+)?(?:[eE][-+]?\d+)?`)
)

// Fingerprint returns the group of a failure's message, the way error
// trackers fingerprint: its first line, without a retry's "attempt N: "
// prefix, with quoted strings ("…"), paths (<path>), UUIDs and hex ids
// (<id>) and numbers (<n>) masked, so that messages that differ only in
// what they name fall in one group. Every number is masked, an HTTP
// status too ("item 499" and "item 599" are one cause; a status's words,
// "Too Many Requests", keep two statuses apart where the message has them).
func Fingerprint(msg string) string {
	msg, _, _ = strings.Cut(msg, "\n")
	if rest, ok := strings.CutPrefix(msg, "attempt "); ok {
		if _, after, ok := strings.Cut(rest, ": "); ok {
			msg = after
		}
	}
	msg = quotedRe.ReplaceAllString(msg, `"…"`)
	msg = pathRe.ReplaceAllString(msg, "<path>")
	msg = hexRe.ReplaceAllStringFunc(msg, func(h string) string {
		if len(h) < 8 && !strings.HasPrefix(h, "0x") && !strings.Contains(h, "-") {
			return h // a short word such as "bad" or "deadbeef"-less "cafe1": left as is
		}
		return "<id>"
	})
	msg = numRe.ReplaceAllString(msg, "<n>")
	return strings.TrimSpace(msg)
}

// The causes of failure a batch's record counts that no worker reports
// (BatchRecord.FailedBy): the manager's own.
const (
	CausePurged      = "purged"
	CauseNoWorker    = "no worker"
	CauseUnavailable = "redis unavailable"
	CauseOther       = "other"
)

// FailureCauses returns every cause a batch's record may count failed
// elements by (BatchRecord.FailedBy): the workers' kinds (codec.Kind), the
// manager's own, and the ends of a batch cut short (cancelled, closed).
// The metrics export each from the start, at 0.
func FailureCauses() []string {
	var out []string
	for _, k := range codec.Kinds() {
		out = append(out, k.String())
	}
	return append(out, CausePurged, CauseNoWorker, CauseUnavailable, OutcomeClosed, OutcomeCancelled, CauseOther)
}

// BatchProgress is how far a running batch has got, as its manager publishes
// it for operators (the hash m:<id>:batches, batch id -> JSON).
type BatchProgress struct {
	Func   string `json:"func"`
	Total  int    `json:"total"`
	Done   int    `json:"done"`
	Failed int    `json:"failed"`
	// FailedKeys are a pipeline's keys that failed in the steps after a
	// by-key step's fold, in a reduce stage's batch: apart from Total,
	// Done and Failed, which count its partitions (see BatchRecord).
	FailedKeys int           `json:"failed_keys,omitempty"`
	Rate       float64       `json:"rate"` // elements a second
	ETA        time.Duration `json:"eta"`
	Started    time.Time     `json:"started"`
	Worker     string        `json:"worker,omitempty"`   // the private queue's worker
	Waiting    string        `json:"waiting,omitempty"`  // why it does not advance
	Priority   int           `json:"priority,omitempty"` // 1 to 5
	// StartedMs is Started in Unix ms, which lost.lua copies into the
	// batch's record when its manager is lost.
	StartedMs int64 `json:"started_ms,omitempty"`
	// Durable is a durable batch's name (manager.Durable), "" for another.
	Durable string `json:"durable,omitempty"`
	// Call is what the call says of its batch by name (codec.CallInfo).
	Call codec.CallInfo `json:"call,omitzero"`
	// Backups counts the batch's backup tasks (manager.Backups).
	Backups Backups `json:"backups,omitzero"`
}

// Backups counts a batch's backup tasks: copies of tasks that ran long,
// queued near its end (Started); races a copy's result won (Won); copies
// whose original's result came first, run or not (Wasted). Started is at
// least Won plus Wasted; the rest still race.
type Backups struct {
	Started int `json:"started"`
	Won     int `json:"won"`
	Wasted  int `json:"wasted"`
}

// Record returns the history record of batch id of manager mid from p, its
// progress: the one mapping from one to the other, which the scripts'
// with_progress mirrors (prelude.lua: they copy the decoded progress whole,
// less what only a running batch has). The caller sets how it ended.
func (p BatchProgress) Record(id, mid string) BatchRecord {
	return BatchRecord{ID: id, Manager: mid, Func: p.Func, Priority: p.Priority, Worker: p.Worker,
		Total: p.Total, Done: p.Done, Failed: p.Failed, FailedKeys: p.FailedKeys, Started: p.StartedMs, Call: p.Call, Backups: p.Backups}
}

// The outcomes of a batch in the queue's history.
const (
	OutcomeDone        = "done"         // every element has its value
	OutcomeFailed      = "failed"       // some element failed, or the batch ended on an error
	OutcomeCancelled   = "cancelled"    // its context ended, Cancel, or an operator cancelled it
	OutcomeClosed      = "closed"       // its manager was closed before it ended
	OutcomeManagerLost = "manager lost" // its manager stopped publishing (lost.lua)
	OutcomeExpired     = "expired"      // a durable batch no manager took over within DurableTTL (lost.lua)
)

// BatchRecord is a batch that ended, as the queue's history keeps it (the
// hash history, batch id -> JSON): written by its manager before Wait, Map
// or Close return, or by whoever noticed its manager was lost (lost.lua,
// which writes the same JSON fields from the last published progress).
type BatchRecord struct {
	ID       string `json:"id"`
	Manager  string `json:"manager"`
	Func     string `json:"func"`
	Priority int    `json:"priority,omitempty"`
	Worker   string `json:"worker,omitempty"` // the private queue's worker
	Total    int    `json:"total"`
	Done     int    `json:"done"` // elements with an outcome, failed ones included
	Failed   int    `json:"failed"`
	// FailedKeys are, in the batch of a pipeline's reduce stage, the keys
	// that failed in the steps after the fold. Such a batch's elements
	// are its partitions (one a reduce task): Total, Done and Failed count
	// them, a partition failed being one whose reduce failed whole, and a
	// partition whose keys failed only in part is done; its failed keys
	// are counted here, apart. 0 in any other batch.
	FailedKeys int `json:"failed_keys,omitempty"`
	// FailedBy counts its failures per cause ("panic", "lost", ...):
	// failed elements, and failed keys (Failed + FailedKeys in all).
	FailedBy map[string]int `json:"failed_by,omitempty"`
	Outcome  string         `json:"outcome"`
	Reason   string         `json:"reason,omitempty"` // why it ended early, if it did
	Started  int64          `json:"started_ms"`       // Unix ms, the manager's clock
	Ended    int64          `json:"ended_ms"`         // Unix ms: the manager's clock, or Redis's for "manager lost"
	// Call is what the call said of its batch by name (codec.CallInfo).
	Call codec.CallInfo `json:"call,omitzero"`
	// Backups counts the batch's backup tasks (manager.Backups).
	Backups Backups `json:"backups,omitzero"`
}

// Holder is the manager that holds a durable batch (keys.Claim): a second
// manager that makes the same call is refused, told who holds it.
type Holder struct {
	Manager string `json:"manager"`
	Host    string `json:"host"`
	PID     int    `json:"pid"`
	PIDs    string `json:"pid_ns,omitempty"` // its PID namespace (Linux), where its pid means something
	Since   int64  `json:"since_ms"`         // Unix ms, the holder's clock
	// Every and Lease say how often the holder renews its claim and how
	// long each renewal lives, ms: a claim not renewed for a few Every is
	// one whose holder is gone or cut off (inspect says it is orphaned),
	// though it lives out its Lease. 0 in an older build's.
	Every int64 `json:"every_ms,omitempty"`
	Lease int64 `json:"lease_ms,omitempty"`
	// Token numbers the claims of the batch, each one more than the last
	// (claim.lua sets it): 0 in a claim not taken yet. It must stay the
	// last field: claim.lua appends it to the record the manager encodes.
	Token int64 `json:"token,omitempty"`
}

// Resumed is what a manager taking over a durable batch finds of it on one
// shard (redisbroker.Resume).
type Resumed struct {
	Count       int64    // tasks ever submitted to its task set ("_")
	Epoch       string   // the task set's epoch ("_e")
	Kept        int64    // results delivered so far, in the kept list
	Outstanding []string // tasks queued or held by a worker, their results to come
	Cancelled   string   // why an operator cancelled the batch while no manager held it, or ""
}

// DurableEntry is a durable batch in the queue's list of them
// (keys.Durables).
type DurableEntry struct {
	Name    string `json:"name"`
	Expires int64  `json:"expires_ms"` // Redis ms: past it, with no holder, the batch is gone
}

// Pause is an operator's pause of a queue (keys.Paused).
type Pause struct {
	Since int64  `json:"since_ms"`     // Redis ms
	By    string `json:"by,omitempty"` // who paused it, as the operator said
}

// DecodePause reads a queue's pause mark.
func DecodePause(s string) (Pause, error) { return decodeJSON[Pause](s, "pause mark") }

// DecodeDurable reads an entry of the queue's list of durable batches.
func DecodeDurable(s string) (DurableEntry, error) {
	return decodeJSON[DurableEntry](s, "durable batch entry")
}

// Claim is a manager's claim on a durable batch (redisbroker.Claim).
type Claim struct {
	Owner  string        // the batch's owner id (id.Durable)
	Name   string        // the batch's name
	Holder Holder        // who claims it
	Lease  time.Duration // how long the claim lives; 0 releases it
	TTL    time.Duration // how long the batch lives after it (DurableTTL)
	Steal  string        // another holder's record to take over, or ""
	// Fence is the claim's record as its holder took it (Claimed.Record),
	// to renew or release it; "" to take the claim.
	Fence string
}

// Claimed is what a claim.lua call found (redisbroker.Claim).
type Claimed struct {
	Held   bool   // the caller holds the claim (or, releasing, no longer does)
	Record string // the claim's record now: the caller's, or the holder's
	Holder Holder // Record decoded
}

// EncodeHolder returns h as the value of a durable batch's claim.
func EncodeHolder(h Holder) string { return encodeJSON(h) }

// DecodeHolder reads the value of a durable batch's claim.
func DecodeHolder(s string) (Holder, error) { return decodeJSON[Holder](s, "durable batch's holder") }

// EncodeRecord returns r as a field value of the history hash.
func EncodeRecord(r BatchRecord) string { return encodeJSON(r) }

// DecodeRecord reads a field value of the history hash.
func DecodeRecord(s string) (BatchRecord, error) {
	r, err := decodeJSON[BatchRecord](s, "batch record")
	if err == nil && r.FailedBy == nil {
		r.FailedBy = map[string]int{}
	}
	return r, err
}

// EncodeProgress returns p as a field value of the batches hash.
func EncodeProgress(p BatchProgress) string { return encodeJSON(p) }

// DecodeProgress reads a field value of the batches hash.
func DecodeProgress(s string) (BatchProgress, error) {
	return decodeJSON[BatchProgress](s, "batch progress")
}

// EntryKind tells the entries of a result list apart.
type EntryKind int

// The kinds of result-list entry.
const (
	// EntryResult is a result a worker delivered (finish.lua): an encoded
	// codec.Result.
	EntryResult EntryKind = iota
	// EntryLost stands for the result of a private task whose worker died
	// (reap.lua): no other worker may run it.
	EntryLost
	// EntryPurged stands for the result of a task an operator purged from
	// the queue (purge.lua).
	EntryPurged
	// EntryWake ends a manager's wait for results and stands for nothing
	// (WakeCollector).
	EntryWake
	// EntryStaged refers to a result stored beside the list (keys.Staged,
	// field Field) that the manager's read did not find there: Redis lost
	// it, and the manager submits the task again. (A read replaces the
	// entries whose result it finds with the result: see redisbroker.Broker.Unstaged.)
	EntryStaged
)

// Entry is one entry of a manager's result list, read.
type Entry struct {
	Kind   EntryKind
	Task   string        // the task it ends (for a result, Result.Task)
	Worker string        // EntryLost: the worker that died
	Result *codec.Result // EntryResult: the result, decoded
	Size   int           // EntryResult: its encoded size, bytes
	Field  string        // EntryStaged: its field in the manager's staged results
}

// The scripts write lost and purged entries with the prelude's lost_entry
// and purged_entry; these are their forms. A result is a MessagePack map or
// array, which never starts with these ASCII letters.
const (
	lostPrefix   = "lost "
	purgedPrefix = "purged "
	wakeEntry    = "wake"
	// StagedPrefix starts an entry that refers to a staged result
	// (finish.lua): "staged <task id> <worker id> <n>", the rest its field.
	StagedPrefix = "staged "
)

// StagedField returns the field of a staged entry, and whether entry is one.
func StagedField(entry string) (string, bool) {
	return strings.CutPrefix(entry, StagedPrefix)
}

// EncodeEntry returns a lost, purged or wake entry as the scripts write it
// into a result list (a result entry is codec.EncodeResult's bytes, as a
// worker's finish writes them).
func EncodeEntry(e Entry) string {
	switch e.Kind {
	case EntryLost:
		return lostPrefix + e.Task + " " + e.Worker
	case EntryPurged:
		return purgedPrefix + e.Task
	case EntryWake:
		return wakeEntry
	case EntryStaged:
		return StagedPrefix + e.Field
	}
	panic(fmt.Sprintf("wire: EncodeEntry of a kind %d entry", e.Kind))
}

// DecodeEntry reads an entry of a result list, a result of at most limit
// bytes (codec.DefaultMaxFrame if limit <= 0) included: the one decoding
// the entry gets. A result whose frame is corrupt after its task id comes
// with the error and a Result holding just that id (see
// codec.DecodeResult), so that the caller fails that task rather than wait
// for it; a result with no readable id is an error and a nil Result.
func DecodeEntry(s string, limit int) (Entry, error) {
	if rest, ok := strings.CutPrefix(s, lostPrefix); ok {
		tid, wid, _ := strings.Cut(rest, " ")
		return Entry{Kind: EntryLost, Task: tid, Worker: wid}, nil
	}
	if tid, ok := strings.CutPrefix(s, purgedPrefix); ok {
		return Entry{Kind: EntryPurged, Task: tid}, nil
	}
	if s == wakeEntry {
		return Entry{Kind: EntryWake}, nil
	}
	if field, ok := StagedField(s); ok {
		tid, _, _ := strings.Cut(field, " ")
		return Entry{Kind: EntryStaged, Task: tid, Field: field}, nil
	}
	r, err := codec.DecodeResult([]byte(s), limit)
	e := Entry{Kind: EntryResult, Result: r, Size: len(s)}
	if r != nil {
		e.Task = r.Task
	}
	return e, err
}

// LimitRecord is one source's record of a function's fleet-wide limit (the
// queue's limits hash, keys.Limits): declared with the function's handle
// by its managers and workers, or set by an operator.
type LimitRecord struct {
	// Limit is the limit as take.lua reads it: "<rate> <per ms> <burst>
	// <concurrency>" (LimitString).
	Limit       string  `json:"limit"`
	Rate        float64 `json:"rate,omitempty"`
	PerMS       int64   `json:"per_ms,omitempty"`
	Burst       int     `json:"burst,omitempty"`
	Concurrency int     `json:"concurrency,omitempty"`
	By          string  `json:"by,omitempty"`    // who wrote it: "manager <id> on <host>", "operator on <host>"
	AtMS        int64   `json:"at_ms,omitempty"` // when, Unix ms by the writer's clock
}

// NewLimitRecord returns the record of a limit (its defaults filled in),
// written by by at at.
func NewLimitRecord(rate float64, per time.Duration, burst, concurrency int, by string, at time.Time) LimitRecord {
	r := LimitRecord{Rate: rate, PerMS: per.Milliseconds(), Burst: burst, Concurrency: concurrency, By: by, AtMS: at.UnixMilli()}
	if rate == 0 {
		r.PerMS, r.Burst = 0, 0
	}
	r.Limit = LimitString(r.Rate, r.PerMS, r.Burst, r.Concurrency)
	return r
}

// LimitString returns a limit as take.lua reads it.
func LimitString(rate float64, perMS int64, burst, concurrency int) string {
	return strconv.FormatFloat(rate, 'g', -1, 64) + " " + strconv.FormatInt(perMS, 10) + " " +
		strconv.Itoa(burst) + " " + strconv.Itoa(concurrency)
}

// DecodeLimitRecord decodes a LimitRecord; a record that does not decode,
// or whose limit does not parse, is an error.
func DecodeLimitRecord(b []byte) (LimitRecord, error) {
	var r LimitRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("limit record: %v", err)
	}
	if _, err := ParseLimit(r.Limit); err != nil {
		return r, err
	}
	return r, nil
}

// Limit is a limit in force, parsed from take.lua's form (ParseLimit).
type Limit struct {
	Rate        float64
	Per         time.Duration
	Burst       int
	Concurrency int
}

// ParseLimit parses a limit in take.lua's form; it refuses what take.lua
// would not read as a limit (a field not a finite number ≥ 0).
func ParseLimit(s string) (Limit, error) {
	f := strings.Fields(s)
	if len(f) != 4 {
		return Limit{}, fmt.Errorf("limit %q: want 4 fields", s)
	}
	var v [4]float64
	for i, x := range f {
		n, err := strconv.ParseFloat(x, 64)
		if err != nil || n != n || n < 0 || n > 1e15 {
			return Limit{}, fmt.Errorf("limit %q: field %d is not a finite number ≥ 0", s, i+1)
		}
		v[i] = n
	}
	l := Limit{Rate: v[0], Per: time.Duration(v[1] * float64(time.Millisecond)), Burst: max(1, int(v[2])), Concurrency: int(v[3])}
	if l.Rate == 0 || l.Per == 0 {
		l.Rate, l.Per, l.Burst = 0, 0, 0
	}
	return l, nil
}

// Solo is what a manager puts in the task of a batch that is one task (a
// lone Map: codec.Task.Record), so that the worker's finish writes the
// batch's history record with the result, and Map returns without a round
// trip of its own for it: the record as far as the manager knows it
// (Done, Failed, FailedBy, Outcome and Ended are the worker's to fill in),
// and the history's bounds.
type Solo struct {
	Record BatchRecord `json:"record"`
	Keep   int         `json:"keep"`   // most batches the history keeps
	AgeMs  int64       `json:"age_ms"` // the oldest it keeps, ms
}

// EncodeSolo returns s as a task's Record field.
func EncodeSolo(s Solo) string { return encodeJSON(s) }

// DecodeSolo reads a task's Record field, refusing one whose record or
// bounds cannot be a manager's: the task's worker then writes no record,
// and the manager writes its own.
func DecodeSolo(s string) (Solo, error) {
	v, err := decodeJSON[Solo](s, "solo record")
	if err != nil {
		return Solo{}, err
	}
	r := v.Record
	if r.ID == "" || r.Manager == "" || r.Total <= 0 || v.Keep <= 0 || v.AgeMs <= 0 || r.Outcome != "" {
		return Solo{}, fmt.Errorf("solo record: id, manager, total or bounds out of range")
	}
	return v, nil
}

// Complete returns rec, the record of a batch whose only task ended with
// fails among its count elements (a result's failures, in index order), as
// the task's result says it ended at ended (Unix ms): every element done,
// the failed ones counted by kind. The worker writes it with the result;
// the manager, reading the result, knows what was written, and writes its
// own record only if it ended the batch otherwise.
func Complete(rec BatchRecord, count int, fails []codec.Failure, ended int64) BatchRecord {
	rec.Done, rec.Failed, rec.FailedBy, rec.Outcome, rec.Reason, rec.Ended = rec.Total, 0, nil, OutcomeDone, "", ended
	for _, f := range fails {
		n := 1
		switch {
		case f.Index < 0:
			n = count
		case f.Through > f.Index:
			n = f.Through - f.Index + 1
		}
		n = min(n, count-rec.Failed)
		if n <= 0 {
			continue
		}
		if rec.FailedBy == nil {
			rec.FailedBy = make(map[string]int)
		}
		rec.Failed += n
		rec.FailedBy[f.Kind.String()] += n
	}
	if rec.Failed > 0 {
		rec.Outcome = OutcomeFailed
	}
	return rec
}

// SameEnd reports whether records a and b say a batch ended alike: the
// same counts, failures by cause, outcome and reason (not when).
func SameEnd(a, b BatchRecord) bool {
	return a.Total == b.Total && a.Done == b.Done && a.Failed == b.Failed && a.Outcome == b.Outcome &&
		a.Reason == b.Reason && maps.Equal(a.FailedBy, b.FailedBy)
}

// pipelineCancel begins the entry of a manager's cancel set (keys.Cancels)
// that asks it to cancel a whole pipeline rather than one batch: a batch id
// ("<manager id>:<n>") has no space.
const pipelineCancel = "pipeline "

// PipelineCancel is the entry of a manager's cancel set that asks it to
// cancel pipeline name (codec.CallInfo.Pipeline): every stage of it,
// running or still to come.
func PipelineCancel(name string) string { return pipelineCancel + name }

// CancelledPipeline returns the pipeline an entry of a manager's cancel set
// names, and whether it names one (PipelineCancel) rather than a batch.
func CancelledPipeline(entry string) (string, bool) {
	return strings.CutPrefix(entry, pipelineCancel)
}
