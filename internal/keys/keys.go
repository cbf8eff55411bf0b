// Package keys builds every Redis key redmap uses, one function per key.
//
// All keys of one queue carry the hash tag {queue}, so the multi-key scripts of
// internal/broker/redisbroker touch one cluster slot. The Lua scripts build manager, worker
// and task keys from Base with the same suffixes as the functions below; a test
// in internal/broker/redisbroker holds the two in step.
package keys

import (
	"crypto/sha1"
	"encoding/hex"
	"strconv"
	"strings"
	"time"
)

// ShardSep separates a queue's name from the rest of the name of one of its
// shards other than shard 0: "<queue>#<i>" or "<queue>#<i>.<j>". Queue names
// may not contain it.
const ShardSep = "#"

// PartitionSep ends a queue's name in the hash tag of a map/reduce by
// key's partition (PartitionTag): no queue's name holds it, so a partition
// is never taken for a queue.
const PartitionSep = "%"

// MaxShards caps the shards of a queue.
const MaxShards = 256

// Shard returns a name for shard i of queue: the queue's own name for shard
// 0, so a queue of one shard is laid out as before sharding existed, and
// "<queue>#<i>" for the others. Each name is its own hash tag, so on a
// Cluster the shards spread over slots. (A manager may pick another name
// of ShardName's for shard i, one whose slot is on the master it wants; the
// queue's list of shard names in Redis says which.)
func Shard(queue string, i int) string { return ShardName(queue, i, 0) }

// ShardName returns the j-th candidate name of shard i > 0 of queue:
// "<queue>#<i>", then "<queue>#<i>.<j>".
func ShardName(queue string, i, j int) string {
	switch {
	case i == 0:
		return queue
	case j == 0:
		return queue + ShardSep + strconv.Itoa(i)
	}
	return queue + ShardSep + strconv.Itoa(i) + "." + strconv.Itoa(j)
}

// SplitShard is the inverse of ShardName: the queue and shard number a
// name found in Redis belongs to.
func SplitShard(name string) (queue string, i int) {
	q, n, ok := strings.Cut(name, ShardSep)
	if !ok {
		return name, 0
	}
	n, _, _ = strings.Cut(n, ".")
	i, err := strconv.Atoi(n)
	if err != nil || i <= 0 {
		return name, 0
	}
	return q, i
}

// Slot returns the Redis Cluster slot of key: CRC16 (XMODEM) of its hash
// tag, or of all of it if it has none, modulo 16384.
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

// Base is the prefix shared by every key of a queue: "<prefix>:{<queue>}:".
func Base(prefix, queue string) string {
	var b strings.Builder
	b.Grow(len(prefix) + len(queue) + 4)
	b.WriteString(prefix)
	b.WriteString(":{")
	b.WriteString(queue)
	b.WriteString("}:")
	return b.String()
}

// The priorities of public tasks: a worker takes a higher one first.
const (
	MinPriority     = 1
	MaxPriority     = 5
	DefaultPriority = 3
)

// Ring is the round of lanes of priority p that a take goes over (LIST of
// lane names, "<manager id>.<lane>"): "ring" for DefaultPriority,
// "ring:<p>" for the others. A take moves each lane it looks at from the
// front to the back, so the lanes of a priority share the workers.
func Ring(prefix, queue string, p int) string {
	if p == DefaultPriority {
		return Base(prefix, queue) + "ring"
	}
	return Base(prefix, queue) + "ring:" + strconv.Itoa(p)
}

// Rings returns the queue's rings, highest priority first.
func Rings(prefix, queue string) []string {
	rs := make([]string, 0, MaxPriority-MinPriority+1)
	for p := MaxPriority; p >= MinPriority; p-- {
		rs = append(rs, Ring(prefix, queue, p))
	}
	return rs
}

// Lane is the list of task ids of one batch that any worker serving its
// function may take (LIST); lane is "<manager id>.<lane>" (see id.TaskIn).
func Lane(prefix, queue, lane string) string { return Base(prefix, queue) + "l:" + lane }

// LaneElements and LaneTimes are the keys beside a lane, for operators
// (see unlane in internal/broker/redisbroker/prelude.lua): the elements of the tasks
// in it (STRING, a counter), and when its tasks were submitted (ZSET,
// score the first sequence number of a submit, member "<seq>:<Redis ms>").
func LaneElements(prefix, queue, lane string) string { return Lane(prefix, queue, lane) + ":e" }

// LaneTimes is the key of when lane's tasks were submitted: see LaneElements.
func LaneTimes(prefix, queue, lane string) string { return Lane(prefix, queue, lane) + ":t" }

// Lanes is manager mid's hash of its lanes (lane, without the manager id →
// what its tasks call: "<func>\t<signature>", and "\n<reducer>\t<signature>"
// for a MapReduce), read by a take to pass lanes a worker cannot run.
func Lanes(prefix, queue, mid string) string { return Base(prefix, queue) + "m:" + mid + ":lanes" }

// Workers holds the queue's registered workers, scored by lease deadline in
// Redis milliseconds (ZSET wid → deadline).
func Workers(prefix, queue string) string { return Base(prefix, queue) + "workers" }

// ShardNames lists the names of the queue's shards other than shard 0 that
// its managers use (LIST of shard names, in the order managers added them;
// absent: the queue has one shard). Workers serve every shard it names. It
// lives in shard 0.
func ShardNames(prefix, queue string) string { return Base(prefix, queue) + "shards" }

// Idle is the set of workers that found nothing to take and wait on their bell
// (SET of wid).
func Idle(prefix, queue string) string { return Base(prefix, queue) + "idle" }

// Private is the list of task ids only worker wid may take (LIST).
func Private(prefix, queue, wid string) string { return Base(prefix, queue) + "w:" + wid + ":private" }

// Held is the set of task ids worker wid has taken and not finished: the
// worker–task map (SET of task id; "!<task id>" for a task of its private
// list, which must not go to another worker if it dies).
func Held(prefix, queue, wid string) string { return Base(prefix, queue) + "w:" + wid + ":held" }

// Bell is the list an idle worker wid blocks on; a submit pushes a token to wake
// it (LIST of tokens).
func Bell(prefix, queue, wid string) string { return Base(prefix, queue) + "w:" + wid + ":bell" }

// Tasks is the task set of manager mid: its outstanding tasks and their
// envelopes (HASH task id → codec.Task frame), plus the field "_", the count
// of tasks ever submitted to it (see submit.lua). Payloads live and expire
// with the set; a count below what the manager was acknowledged means Redis
// lost writes.
func Tasks(prefix, queue, mid string) string { return Base(prefix, queue) + "m:" + mid + ":tasks" }

// Attempts counts the lost attempts of manager mid's tasks: how often each
// was re-queued after its worker died (HASH task id → count; absent means
// 0); and marks the tasks that got a backup task ("+<task id>" → 1), until
// they are cancelled.
func Attempts(prefix, queue, mid string) string {
	return Base(prefix, queue) + "m:" + mid + ":attempts"
}

// Results is the list of encoded results for manager mid, read and then
// trimmed by that manager (LIST of codec.Result frames, and "lost ..." lines
// for private tasks whose worker died).
func Results(prefix, queue, mid string) string { return Base(prefix, queue) + "m:" + mid + ":results" }

// Kept holds the results a durable batch's manager has read (LIST, as
// Results): its collector moves each entry it handles from Results onto Kept
// rather than dropping it, so that a manager that takes the batch over
// finds every result already delivered. Only a durable batch's owner (see
// id.Durable) has one; it lives and expires with the owner's task set.
func Kept(prefix, queue, mid string) string { return Base(prefix, queue) + "m:" + mid + ":kept" }

// Staged holds the results over broker.Inline bytes that manager mid's result
// list refers to (HASH "<task id> <worker id> <n>" → codec.Result frame):
// a worker writes one with a plain HSET in the MULTI of its finish, whose
// script either refers to it from the result list (a "staged <field>"
// entry) or deletes it (a result no longer wanted), so Redis never copies
// the result into Lua. The manager reads it with the entry, and the trim
// of the entry deletes it (a durable batch's owner's is kept with the
// entry). It lives and expires with the task set.
func Staged(prefix, queue, mid string) string { return Base(prefix, queue) + "m:" + mid + ":staged" }

// Widest holds the length of the largest payload ever stored in manager
// mid's task set (STRING, a decimal), so that a take or a finish of its tasks may read
// or check them all with one HMGET when none is large, instead of a check
// per task that copies nothing. Absent, it is unknown: scripts then check
// each task apart. It lives and expires with the task set.
func Widest(prefix, queue, mid string) string { return Base(prefix, queue) + "m:" + mid + ":widest" }

// Sums holds the sums of a durable batch's tasks' inputs as first
// submitted (HASH task id → hex sum), so that a call that takes the batch
// over with another input is refused; it lives with the owner's task set.
func Sums(prefix, queue, owner string) string { return Base(prefix, queue) + "m:" + owner + ":sums" }

// Durables lists the queue's durable batches (HASH owner id → JSON
// wire.DurableEntry: the batch's name, and when it expires unless a manager
// holds it again), so that one no manager took over within DurableTTL is
// recorded in the history as expired. A manager holding one renews its entry;
// its end removes it.
func Durables(prefix, queue string) string { return Base(prefix, queue) + "durables" }

// Cancelled marks a durable batch an operator cancelled while no manager
// held it (STRING: the reason): the call that takes it over fails its
// elements with redmap.ErrCancelled.
func Cancelled(prefix, queue, owner string) string {
	return Base(prefix, queue) + "m:" + owner + ":cancelled"
}

// Paused marks a shard of a queue paused by an operator (STRING: JSON
// wire.Pause): while it exists, a take of the shard takes nothing and
// leaves the worker idle (take.lua). redmap pause writes it on every shard
// of the queue; redmap resume deletes them and rings the idle workers.
func Paused(prefix, queue string) string { return Base(prefix, queue) + "paused" }

// Backups is the shard's backup tasks (LIST of "<task id>\t<worker id>":
// a copy of a task that ran long near its batch's end, and the worker
// that holds the original, or "" if its manager did not find it). A take
// looks at it before the rings: it never gives a copy to the worker that
// holds the original, drops one whose task ended, and counts none against
// a limit (a copy of a limited function's task is dropped). backup.lua
// writes it; it lives 10 minutes past its last write and holds at most
// BackupsMax entries.
func Backups(prefix, queue string) string { return Base(prefix, queue) + "backups" }

// BackupsMax bounds keys.Backups: what a take reads of it a call.
const BackupsMax = 64

// Races is the queue's record of the workers whose tasks got a backup
// (HASH "<worker id>\traces" -> its tasks that got one, "<worker id>\tlost"
// -> those a backup beat): its managers add to it as the races end, and
// redmap workers names a worker that lost most of at least 2 races as
// slow. It lives a day past its last write.
func Races(prefix, queue string) string { return Base(prefix, queue) + "races" }

// ShuffleJob says where the partitions of durable map/reduce by key job
// (id.DurableJob) are (STRING: the job's wire.Shuffle, living its
// DurableTTL), written as the job starts, so that an operator's cancel of
// the job by its name deletes them.
func ShuffleJob(prefix, queue, job string) string { return Base(prefix, queue) + "shuffle:" + job }

// Pipeline is what a durable pipeline has done (STRING: an encoded
// wire.PipelineRecord), owner being the id of the pipeline's own durable
// claim: its fingerprint, and the phases that ended with what they gave,
// so that the call that takes the pipeline over runs none of them again.
// Its holder writes it, fenced, as each phase ends, living DurableTTL; the
// pipeline's end deletes it.
func Pipeline(prefix, queue, owner string) string {
	return Base(prefix, queue) + "m:" + owner + ":pipeline"
}

// Claim says which manager holds durable batch owner now (STRING: JSON
// wire.Holder), living a lease its holder renews every Poll: a second
// manager that finds it is refused the batch, naming the holder.
func Claim(prefix, queue, owner string) string { return Base(prefix, queue) + "m:" + owner + ":claim" }

// Fence is the claim of durable batch owner that its last holder took
// (STRING: JSON wire.Holder with its token), on every shard the batch uses:
// every write of the batch's owner carries the claim it holds, and a script
// that finds another here refuses it, so that a holder that lost the batch
// to another manager writes nothing more of it. It outlives the claim's
// lease and the batch's end, for DurableTTL, so that a holder cut off for
// longer still learns who took the batch; it is outside the batch's own
// keys (m:<owner>:*), which its end deletes.
func Fence(prefix, queue, owner string) string { return Base(prefix, queue) + "fence:" + owner }

// Aside holds, within the MULTI of a submit that a durable batch's fence
// refuses, what its owner's task set held of the tasks submitted (HASH task
// id → payload; "_ttl" → the set's TTL, ms), so that the set is put back
// as it was: it never outlives the MULTI.
func Aside(prefix, queue, owner string) string { return Base(prefix, queue) + "m:" + owner + ":aside" }

// Object is the metadata of a cached object with BLAKE3 hash h, hex-encoded
// (HASH size → bytes, parts → number of parts). It exists only once every part
// is stored. Objects are keyed by content, not by queue, and each carries its
// own hash tag, so large objects spread over cluster shards.
func Object(prefix, h string) string { return prefix + ":obj:{" + h + "}" }

// ObjectPart is part i of object h, counted from 0 (STRING, at most the part
// size).
func ObjectPart(prefix, h string, i int) string { return Object(prefix, h) + ":p:" + strconv.Itoa(i) }

// ObjectHolders holds the batches holding object h, scored by the deadline of
// their hold in Redis milliseconds (ZSET holder → deadline).
func ObjectHolders(prefix, h string) string { return Object(prefix, h) + ":holders" }

// WorkerInfo describes worker wid for operators: host, pid, concurrency,
// when it started, what it runs and its counters; written every heartbeat,
// expiring with its lease (HASH field → value).
func WorkerInfo(prefix, queue, wid string) string { return Base(prefix, queue) + "w:" + wid + ":info" }

// Drain is the flag that, when set, asks worker wid to stop taking tasks and exit once idle
// (STRING "1").
func Drain(prefix, queue, wid string) string { return Base(prefix, queue) + "w:" + wid + ":drain" }

// Types holds, per handle signature, the structure of its types as the
// manager that submitted it sees them (HASH signature -> lines of
// redmap.Handle.Types), so that a worker refusing a task can name the first
// difference. Written once per handle per manager; expires after a week.
func Types(prefix, queue string) string { return Base(prefix, queue) + "types" }

// Failures holds the queue's most recent failed elements, newest last, for
// operators (LIST of JSON records, capped).
func Failures(prefix, queue string) string { return Base(prefix, queue) + "failures" }

// Batches describes manager mid's running batches for operators (HASH batch
// id → JSON progress), refreshed every Poll and expiring with the manager.
func Batches(prefix, queue, mid string) string { return Base(prefix, queue) + "m:" + mid + ":batches" }

// BatchesNext is where a manager publishing more batches than one script
// call takes (broker.ScriptBudget) builds its next Batches, slice by slice,
// before it replaces Batches at once (HASH, as Batches).
func BatchesNext(prefix, queue, mid string) string { return Batches(prefix, queue, mid) + ":next" }

// LostBatches holds the batches manager mid last published, once it was
// found lost, until they are all recorded in the history, a slice a call
// (HASH, as Batches; see lost.lua).
func LostBatches(prefix, queue, mid string) string { return Base(prefix, queue) + "m:" + mid + ":lost" }

// Losing lists the managers found lost whose LostBatches are not yet all
// recorded (SET of manager id; see lost.lua). It lives in shard 0.
func Losing(prefix, queue string) string { return Base(prefix, queue) + "losing" }

// Throughput counts the elements the queue's managers saw end (a value or
// an error) in the ThroughputBucket-long interval that starts at second
// bucket·ThroughputBucket of the Unix clock (STRING integer); each lives
// ThroughputSpan, so a queue keeps at most ThroughputSpan/ThroughputBucket
// of them. The dashboard charts them.
func Throughput(prefix, queue string, bucket int64) string {
	return Base(prefix, queue) + "tp:" + strconv.FormatInt(bucket, 10)
}

// The throughput counters' interval and how long each is kept.
const (
	ThroughputBucket = 5 * time.Second
	ThroughputSpan   = 15*time.Minute + ThroughputBucket
)

// Cancels holds the ids of manager mid's batches an operator asked to
// cancel (SET of batch id); the manager reads and deletes it every Poll.
func Cancels(prefix, queue, mid string) string { return Base(prefix, queue) + "m:" + mid + ":cancel" }

// History holds the queue's ended batches, as their managers (or whoever
// noticed a manager was lost) recorded them (HASH batch id → JSON record).
// It lives in shard 0, bounded by HistoryIndex.
func History(prefix, queue string) string { return Base(prefix, queue) + "history" }

// FailedElements holds the failed elements of ended batch bid, for
// operators (HASH "<index>" → JSON wire.FailedElement, at most
// wire.MaxFailedElements of them; "omitted" → how many more failed). Its
// batch's manager writes it with the batch's history record; it lives as
// long as the history (HistoryAge), and trim_history deletes it with the
// batch's record. It lives in shard 0, beside History.
func FailedElements(prefix, queue, bid string) string {
	return Base(prefix, queue) + "failed:" + bid
}

// Ended is queue's totals of ended batches (HASH "outcome:<outcome>" ->
// batches, "kind:<kind>" -> failed elements), counted as the history is
// written.
func Ended(prefix, queue string) string { return Base(prefix, queue) + "ended" }

// Stages holds the counts of pipeline's stages (codec.CallInfo's Pipeline:
// its durable name, or its job id) over its batches that ended (HASH
// "<stage>\t<field>" -> value: batches, reruns, total, done, failed, failed_keys,
// started, ended (Unix ms), outcome, func), counted as the history is
// written, so that they outlive its trims; it lives a week past the last
// batch of the pipeline that ended.
func Stages(prefix, queue, pipeline string) string {
	return Base(prefix, queue) + "stages:" + pipeline
}

// HistoryIndex orders the queue's history (ZSET batch id → when it ended,
// Redis ms): the oldest are trimmed past a count or an age.
func HistoryIndex(prefix, queue string) string { return Base(prefix, queue) + "history:at" }

// Managers lists the managers that publish running batches (ZSET manager
// id → when their next publish is due, Redis ms): a manager whose publish
// is overdue is lost, and its batches go to the history as "manager lost".
func Managers(prefix, queue string) string { return Base(prefix, queue) + "managers" }

// QueueIndex lists the queues under prefix (ZSET queue name → when a
// manager's publish or a worker's heartbeat last named it, Redis ms), so
// that operators' reads (redmap status, /metrics, the dashboard) list the
// queues without walking the keyspace. Each manager and worker names its
// queue at its first publish or heartbeat and then at most every
// QueueIndexEvery; a name not renewed for QueueIndexAge is dropped. Its
// hash tag, "{#}", is no queue's ('#' is refused in a queue name): on a
// Cluster the index is one slot of its own (5121), apart from every queue.
func QueueIndex(prefix string) string { return prefix + ":{#}:queues" }

// How often a writer renews its queue's name in QueueIndex, and how long a
// name stays there unrenewed.
const (
	QueueIndexEvery = time.Minute
	QueueIndexAge   = 7 * 24 * time.Hour
)

// Gone lists the workers that stopped or died lately (ZSET worker id →
// when, Redis ms), kept GoneFor; each one's info hash (WorkerInfo) is kept as
// long, with its last state.
func Gone(prefix, queue string) string { return Base(prefix, queue) + "gone" }

// FailureGroups counts the queue's failed elements per group (HASH "<func>\t<kind>\t<fingerprint>"
// → JSON of the group: count, first and last seen, workers, one sample), so
// every failure is counted even when its record is dropped.
func FailureGroups(prefix, queue string) string { return Base(prefix, queue) + "failgroups" }

// Limits holds the queue's fleet-wide limits, in shard 0 (HASH): "<func>"
// → the limit in force, "<rate> <per ms> <burst> <concurrency>" (what
// take.lua reads), "op\t<func>" → the JSON record an operator set (redmap
// limit), "code\t<func>" → the JSON record declared with the function's
// handle (its managers and workers write it). The operator's wins. Kept
// until cleared.
func Limits(prefix, queue string) string { return Base(prefix, queue) + "limits" }

// LimitState holds the limits' state (HASH "<func>" → the rate's
// theoretical arrival time of the next element, Redis ms, GCRA;
// "w\t<func>" → how many takes found a task of it waiting on its limit).
func LimitState(prefix, queue string) string { return Base(prefix, queue) + "lim:state" }

// LimitHeld maps each task of a limited function a worker holds to its
// function (HASH task id → func), so that the scripts that end a hold
// (finish, give back, reap) find the limit to return it to.
func LimitHeld(prefix, queue string) string { return Base(prefix, queue) + "lim:held" }

// LimitRunning holds the tasks of function fn that count against its
// concurrency cap (HASH task id → the worker holding it). The key names the
// function by the first 16 hex digits of its name's SHA-1, as take.lua
// does (redis.sha1hex), since a name may hold any printable character.
func LimitRunning(prefix, queue, fn string) string { return limitKey(prefix, queue, fn) + ":run" }

// LimitWaiting holds the workers a take refused a task of fn for want of
// concurrency (SET of worker id): the script that returns a slot rings
// them.
func LimitWaiting(prefix, queue, fn string) string { return limitKey(prefix, queue, fn) + ":wait" }

func limitKey(prefix, queue, fn string) string {
	sum := sha1.Sum([]byte(fn))
	return Base(prefix, queue) + "lim:" + hex.EncodeToString(sum[:])[:16]
}

// The bounds of the operators' records.
const (
	// DefaultHistory and DefaultHistoryAge bound a queue's history: the
	// last DefaultHistory batches, none older than DefaultHistoryAge.
	DefaultHistory    = 1000
	DefaultHistoryAge = 24 * time.Hour
	// GoneFor is how long a worker that stopped or died stays listed.
	GoneFor = 10 * time.Minute
	// MaxFailureGroups caps a queue's failure groups; failures of a group
	// past it count in one group of their function and kind, "(other)".
	MaxFailureGroups = 1000
	// FailureGroupsFor is how long a queue's failure groups outlive its
	// last failure.
	FailureGroupsFor = 7 * 24 * time.Hour
)

// Partition is the hash of partition p of map/reduce by key job on queue
// (HASH "<start>:<count>" of a map task's range of elements → that task's
// encoded pairs of the partition, engine.Pairs). Each partition is its own
// hash tag, "{<queue>%<job>.<p>}" (".<salt>" appended for a salt > 0, the
// candidate whose slot is on the Cluster master the manager chose), so on
// a Cluster a shuffle's partitions spread over slots as a sharded queue's
// shards do. Its reduce task deletes it.
func Partition(prefix, queue, job string, p, salt int) string {
	return partitionBase(prefix, queue, job, p, salt) + "part"
}

// PartitionOut is the reduced output of partition p of job (LIST of pages,
// each an encoded engine.Pairs), written by the partition's reduce task and
// deleted by the manager once it read it. Same hash tag as Partition.
func PartitionOut(prefix, queue, job string, p, salt int) string {
	return partitionBase(prefix, queue, job, p, salt) + "out"
}

// PartitionTag is the hash tag of Partition and PartitionOut.
func PartitionTag(queue, job string, p, salt int) string {
	tag := queue + PartitionSep + job + "." + strconv.Itoa(p)
	if salt > 0 {
		tag += "." + strconv.Itoa(salt)
	}
	return tag
}

func partitionBase(prefix, queue, job string, p, salt int) string {
	return prefix + ":{" + PartitionTag(queue, job, p, salt) + "}:"
}
