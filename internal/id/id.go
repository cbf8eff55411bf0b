// Package id makes the ids of managers, workers and tasks.
package id

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/zeebo/blake3"
)

// New returns a random 128-bit id as 32 hex digits, for managers and workers.
func New() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error
	return hex.EncodeToString(b[:])
}

// Durable returns the owner id of the durable batch named name on a queue:
// "D" and 31 hex digits of the name's BLAKE3 hash. It stands where a
// manager's id does in the batch's keys and task ids, so that the batch's
// tasks and results are found again under its name by whichever manager
// takes it over; it can never equal a manager's id (New's are lowercase hex).
func Durable(name string) string {
	sum := blake3.Sum256([]byte(name))
	return "D" + hex.EncodeToString(sum[:])[:31]
}

// DurableJob returns the job id of the durable map/reduce by key named
// name (manager.ReduceByKey with manager.Durable): 16 hex digits of a
// BLAKE3 hash of the name, which its partitions' keys carry (see
// keys.Partition), so that the call that takes the job over, and an
// operator's cancel, find them by its name.
func DurableJob(name string) string {
	sum := blake3.Sum256([]byte("redmap shuffle\x00" + name))
	return hex.EncodeToString(sum[:8])
}

// IsDurable reports whether owner is a durable batch's (see Durable).
func IsDurable(owner string) bool { return strings.HasPrefix(owner, "D") }

// Task returns the id of the seq-th task of manager mid: "<mid>-<seq in
// base 36>". The id carries its manager, so a worker knows where the result
// goes without a lookup; the Lua scripts split it at the first '-'.
func Task(mid string, seq uint64) string {
	return mid + "-" + strconv.FormatUint(seq, 36)
}

// TaskAt is Task for a task of priority p: the id ends "~<p>" unless p is
// def, the default, so that a script putting the task back finds its list
// from its id (the prelude's public_of).
func TaskAt(mid string, seq uint64, p, def int) string {
	if p == def {
		return Task(mid, seq)
	}
	return Task(mid, seq) + "~" + strconv.Itoa(p)
}

// TaskIn is TaskAt for a task of n elements in a batch's lane (the list its
// tasks wait in, see keys.Lane): "<mid>-<seq>,<n>.<lane>[~<p>]", numbers in
// base 36, so that a script putting the task back finds its lane from its
// id (the prelude's lane_of), and one moving it in or out of its lane
// counts the elements waiting there (the prelude's size_of) without
// reading its payload.
func TaskIn(mid string, seq, lane uint64, n, p, def int) string {
	t := mid + "-" + strconv.FormatUint(seq, 36) + "," + strconv.FormatUint(uint64(n), 36) + "." + strconv.FormatUint(lane, 36)
	if p == def {
		return t
	}
	return t + "~" + strconv.Itoa(p)
}

// Unsized returns task id tid without the element count TaskIn puts in
// it: the same for the seq-th task of a lane whatever its size, as a
// durable batch records its tasks' sums (a takeover cut into other
// chunks then differs in sum, not in name).
func Unsized(tid string) string {
	i := strings.IndexByte(tid, ',')
	if i < 0 {
		return tid
	}
	j := strings.IndexAny(tid[i:], ".~")
	if j < 0 {
		return tid[:i]
	}
	return tid[:i] + tid[i+j:]
}

// Batch returns the id of manager mid's seq-th batch, "<mid>:<seq>", as
// operators see it (redmap batches, the dashboard).
func Batch(mid string, seq uint64) string { return mid + ":" + strconv.FormatUint(seq, 10) }

// BatchOf returns the id of the batch task id tid belongs to, from its
// manager and its lane (see TaskIn), or "" for a task of no lane.
func BatchOf(tid string) string {
	seq, err := strconv.ParseUint(Lane(tid), 36, 64)
	if err != nil {
		return ""
	}
	return Batch(Manager(tid), seq)
}

// Lane returns the lane in task id tid ("" for a task of no lane: a private
// one).
func Lane(tid string) string {
	_, rest, ok := strings.Cut(tid, "-")
	if !ok {
		return ""
	}
	_, lane, ok := strings.Cut(rest, ".")
	if !ok {
		return ""
	}
	if i := strings.IndexByte(lane, '~'); i >= 0 {
		lane = lane[:i]
	}
	return lane
}

// Priority returns the priority in task id tid, or def if it has none.
func Priority(tid string, def int) int {
	i := strings.LastIndexByte(tid, '~')
	if i < 0 {
		return def
	}
	p, err := strconv.Atoi(tid[i+1:])
	if err != nil {
		return def
	}
	return p
}

// Manager returns the manager id in a task id, or "" if it has none.
func Manager(tid string) string {
	mid, _, ok := strings.Cut(tid, "-")
	if !ok {
		return ""
	}
	return mid
}

// Size returns the element count in task id tid (see TaskIn), or 0 for an
// id that has none (a private task's), as the prelude's size_of reads it.
func Size(tid string) int {
	mid, rest, ok := strings.Cut(tid, "-")
	if !ok || mid == "" {
		return 0
	}
	i := strings.IndexAny(rest, ",.~")
	if i <= 0 || rest[i] != ',' {
		return 0
	}
	rest = rest[i+1:]
	j := strings.IndexByte(rest, '.')
	if j <= 0 {
		return 0
	}
	n, err := strconv.ParseUint(rest[:j], 36, 31)
	if err != nil {
		return 0
	}
	return int(n)
}

// Seq returns the sequence number in task id tid (see Task), and whether it
// has one.
func Seq(tid string) (uint64, bool) {
	_, rest, ok := strings.Cut(tid, "-")
	if !ok {
		return 0, false
	}
	if i := strings.IndexAny(rest, ",.~"); i >= 0 {
		rest = rest[:i]
	}
	n, err := strconv.ParseUint(rest, 36, 64)
	return n, err == nil
}
