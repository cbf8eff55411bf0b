package wire

import (
	"strings"
	"time"
)

// The protocol's messages as both sides see them: what a manager submits,
// what a worker takes, holds and finishes, and what the upkeep scripts
// report. internal/broker/redisbroker turns them into script calls; the manager's and the
// worker's seams speak in these, not in Redis's terms.

// Task is a task to submit: its id and its encoded envelope.
type Task struct {
	ID      string
	Payload []byte
}

// Expect is what a submit expects of the manager's task set (see
// submit.lua): at least Count tasks ever submitted, under Epoch. NewEpoch, if
// set, installs a new epoch (a recovery does).
type Expect struct {
	Count    int64
	Epoch    string
	NewEpoch string
}

// Lane is the lane of a batch's public tasks: its name ("<manager
// id>.<lane>", see id.TaskIn) and what its tasks call ("<func>\t<signature>",
// and "\n<reducer>\t<signature>" for a MapReduce).
type Lane struct {
	Name, Calls string
}

// Calls returns what a lane's tasks call: fn with signature sig, and
// reducer red with signature redSig if red is not "".
func Calls(fn, sig, red, redSig string) string {
	if red == "" {
		return fn + "\t" + sig
	}
	return fn + "\t" + sig + "\n" + red + "\t" + redSig
}

// SuspectAfter is how many times a task must have been lost (its worker
// died, stalled past its lease, or stopped with it running) to be a
// suspect: maybe a poison pill, handed only to a worker that holds nothing
// and run alone there. A task lost once was most likely lost beside what
// killed its worker, or with a worker killed from outside: it runs side by
// side again. prelude.lua's SUSPECT says the same (TestSuspectAgrees).
const SuspectAfter = 2

// Taken is a task a worker has taken and now holds.
type Taken struct {
	ID      string
	Attempt int
	Payload []byte
	Private bool      // from the worker's private list
	Shard   int       // the shard it was taken from (see NewShard)
	At      time.Time // when the take's reply came
	// HeldBack is how long its function's limit held it back at the head
	// of its list (0 if it did not).
	HeldBack time.Duration
	// Backup: a copy of a task another worker runs, queued by its manager
	// near its batch's end because the task ran long (keys.Backups); the
	// first result wins.
	Backup bool
}

// Suspect reports whether t is a suspect (see SuspectAfter): it came alone,
// to a worker that held nothing, and must run alone.
func (t Taken) Suspect() bool { return t.Attempt >= SuspectAfter }

// Member returns the task's member in the worker's held set: its id,
// "!"-prefixed if private.
func (t Taken) Member() string {
	if t.Private {
		return "!" + t.ID
	}
	return t.ID
}

// TakeEnd is what a take says besides its tasks.
type TakeEnd struct {
	// Drained: the take left every list empty and registered the worker
	// idle; its next take should wait for its bell.
	Drained bool
	// Suspect: a suspect (a task lost SuspectAfter times) is next in a list, and was
	// left there because the worker holds tasks: it gets it once it holds
	// none (see take.lua).
	Suspect bool
	// Shards: the queue's shard count (1 + the names in its list of shard
	// names), said by a take of shard 0 when it is above what the worker
	// said it knows; 0 otherwise.
	Shards int
	// Room: a task of a limited function waits for the worker to have room
	// to start it (it takes none ahead); the worker takes again when one
	// of its tasks ends. The take did not register it idle.
	Room bool
	// Paused: an operator paused the queue (redmap pause); the take took
	// nothing, and Drained is set too.
	Paused bool
	// Wait, if not 0: a rate refused a task of a limited function; its
	// next token is due in Wait. A drained worker waits on its bell that
	// long at most.
	Wait time.Duration
}

// HeldID returns the task id of a held-set member.
func HeldID(member string) string { return strings.TrimPrefix(member, "!") }

// Done is a finished task: its id and its encoded result, and the shard it
// was taken from.
type Done struct {
	ID     string
	Result []byte
	Shard  int
	// Record, for a batch's only task whose result says so
	// (codec.Result.Recorded), is the batch's history record (JSON) to
	// write with the result, bounded by Keep and AgeMs (see Solo).
	Record string
	Keep   int
	AgeMs  int64
	// Withdrawn: its task was found no longer wanted after it ran, and
	// stored nothing; there is no result to report (its manager, if it
	// wants the task again, has queued it again).
	Withdrawn bool
}

// Finished is what a report of results came to: how many Redis took
// (Sent), how many of those were delivered (the rest were discarded: no
// longer wanted, or reported twice), and the results not reported: those
// Redis refused for want of memory (Full: a later call may land them),
// and those of calls that failed otherwise (Failed: Redis unreachable).
type Finished struct {
	Sent, Delivered int
	Full, Failed    []Done
}

// Beat is what a heartbeat learns: whether an operator asked the worker to
// drain, and over how many shards the queue's managers spread their tasks
// (read from shard 0; 1 if none said).
type Beat struct {
	Drain  bool
	Shards int
}

// Reaped says what a Reap did.
type Reaped struct {
	Workers  int // dead workers removed
	Requeued int // their public tasks put back at the front of the queue
	Lost     int // their private tasks reported lost to their managers
}

// Serving says whether a live worker of the queue can run what a batch
// calls (see served.lua).
type Serving struct {
	// Code: ServedBy, NoWorker, Unregistered (no live worker registered
	// Name) or OtherSignature (one registered Name with Signature).
	Code      int
	Name      string
	Signature string
	// Paused: an operator paused the queue (redmap pause), since the
	// Redis ms it says (0 if its mark does not): its batches wait until it
	// is resumed. The same in every Serving of one reply.
	Paused      bool
	PausedSince int64
}

// The codes of Serving.
const (
	NoWorker       = 0
	Unregistered   = 1
	OtherSignature = 2
	ServedBy       = 3
)
