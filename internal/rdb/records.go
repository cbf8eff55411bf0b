package rdb

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
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
	Functions   []string // the names it registered
	Serves      []string // what it registered, "<name>\t<signature>" each; served.lua reads them
	State       string   // "running", or "draining" once it takes no more tasks
	Error       string   // its last failed Redis call, "" once all is well
	CacheHits   int64    // constant lookups its memo served
	CacheBytes  int64    // bytes of constants it fetched
}

// The fields of a worker's info hash that something other than
// EncodeWorkerInfo writes or reads: served.lua reads "serves", and
// PublishError writes "error" alone when a heartbeat fails.
const (
	infoFunctions = "functions"
	infoServes    = "serves"
	infoError     = "error"
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
		infoFunctions, strings.Join(i.Functions, ","),
		infoServes, strings.Join(i.Serves, "\n"),
		"state", i.State,
		infoError, i.Error,
		"cache_hits", i.CacheHits,
		"cache_bytes", i.CacheBytes,
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
		Error:       h[infoError],
		CacheHits:   num("cache_hits"),
		CacheBytes:  num("cache_bytes"),
	}
	if f := h[infoServes]; f != "" {
		i.Serves = strings.Split(f, "\n")
	}
	if f := h[infoFunctions]; f != "" {
		i.Functions = strings.Split(f, ",")
	}
	if len(bad) > 0 {
		return i, fmt.Errorf("worker info: malformed %s", strings.Join(bad, ", "))
	}
	return i, nil
}

// FailureRecord is what a worker records of a failed element for operators
// (redmap failures), as JSON in the queue's failure list.
type FailureRecord struct {
	Time   time.Time `json:"time"`
	Worker string    `json:"worker"`
	Task   string    `json:"task"`
	Func   string    `json:"func"`
	Index  int       `json:"index"` // within the task's chunk; -1 for all of it
	Kind   string    `json:"kind"`
	Error  string    `json:"error"`
	Stack  string    `json:"stack,omitempty"`
}

// FailureGroup is the failures of one function, kind and error message,
// as operators read them (redmap failures, the dashboard).
type FailureGroup struct {
	Func, Kind string
	Error      string // the message's first line, without "attempt N: "
	Count      int
	Last       time.Time
	Task       string // the task of the last one
	Stack      string // a stack one of them recorded, if any did
}

// GroupFailures groups failure records by function, kind and message
// (retries of one element, "attempt 2: ...", fall in the group of the
// first), most frequent first.
func GroupFailures(recs []FailureRecord) []FailureGroup {
	index := map[[3]string]int{}
	var out []FailureGroup
	for _, f := range recs {
		msg, _, _ := strings.Cut(f.Error, "\n")
		if _, rest, ok := strings.Cut(msg, ": "); ok && strings.HasPrefix(msg, "attempt ") {
			msg = rest
		}
		k := [3]string{f.Func, f.Kind, msg}
		i, ok := index[k]
		if !ok {
			i = len(out)
			index[k] = i
			out = append(out, FailureGroup{Func: f.Func, Kind: f.Kind, Error: msg})
		}
		g := &out[i]
		g.Count++
		if f.Time.After(g.Last) {
			g.Last, g.Task = f.Time, f.Task
		}
		if g.Stack == "" {
			g.Stack = f.Stack
		}
	}
	slices.SortStableFunc(out, func(a, b FailureGroup) int { return b.Count - a.Count })
	return out
}

// EncodeFailure returns f as an entry of the failure list.
func EncodeFailure(f FailureRecord) string {
	b, _ := json.Marshal(f) // strings, ints and a time: cannot fail
	return string(b)
}

// DecodeFailure reads an entry of the failure list.
func DecodeFailure(s string) (FailureRecord, error) {
	var f FailureRecord
	if err := json.Unmarshal([]byte(s), &f); err != nil {
		return FailureRecord{}, fmt.Errorf("failure record: %w", err)
	}
	return f, nil
}

// BatchProgress is how far a running batch has got, as its manager publishes
// it for operators (the hash m:<id>:batches, batch id -> JSON).
type BatchProgress struct {
	Func     string        `json:"func"`
	Total    int           `json:"total"`
	Done     int           `json:"done"`
	Failed   int           `json:"failed"`
	Rate     float64       `json:"rate"` // elements a second
	ETA      time.Duration `json:"eta"`
	Started  time.Time     `json:"started"`
	Worker   string        `json:"worker,omitempty"`   // the private queue's worker
	Waiting  string        `json:"waiting,omitempty"`  // why it does not advance
	Priority int           `json:"priority,omitempty"` // 1 to 5
}

// EncodeProgress returns p as a field value of the batches hash.
func EncodeProgress(p BatchProgress) string {
	b, _ := json.Marshal(p) // plain fields: cannot fail
	return string(b)
}

// DecodeProgress reads a field value of the batches hash.
func DecodeProgress(s string) (BatchProgress, error) {
	var p BatchProgress
	if err := json.Unmarshal([]byte(s), &p); err != nil {
		return BatchProgress{}, fmt.Errorf("batch progress: %w", err)
	}
	return p, nil
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
)

// Entry is one entry of a manager's result list.
type Entry struct {
	Kind   EntryKind
	Task   string // the task it ends (for a result, inside Result)
	Worker string // EntryLost: the worker that died
	Result []byte // EntryResult: the encoded result
}

// The scripts write lost and purged entries with the prelude's lost_entry
// and purged_entry; these are their forms. A result is a MessagePack map or
// array, which never starts with these ASCII letters.
const (
	lostPrefix   = "lost "
	purgedPrefix = "purged "
	wakeEntry    = "wake"
)

// EncodeEntry returns e as the scripts write it into a result list.
func EncodeEntry(e Entry) string {
	switch e.Kind {
	case EntryLost:
		return lostPrefix + e.Task + " " + e.Worker
	case EntryPurged:
		return purgedPrefix + e.Task
	case EntryWake:
		return wakeEntry
	}
	return string(e.Result)
}

// DecodeEntry reads an entry of a result list.
func DecodeEntry(s string) Entry {
	if rest, ok := strings.CutPrefix(s, lostPrefix); ok {
		tid, wid, _ := strings.Cut(rest, " ")
		return Entry{Kind: EntryLost, Task: tid, Worker: wid}
	}
	if tid, ok := strings.CutPrefix(s, purgedPrefix); ok {
		return Entry{Kind: EntryPurged, Task: tid}
	}
	if s == wakeEntry {
		return Entry{Kind: EntryWake}
	}
	return Entry{Kind: EntryResult, Result: []byte(s)}
}
