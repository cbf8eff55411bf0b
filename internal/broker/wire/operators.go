package wire

import "time"

// What the operators' tools read of a queue (broker.Operator).

// Registered is one registered worker of a queue.
type Registered struct {
	Queue     string
	ID        string
	Deadline  int64      // lease deadline, Redis ms
	Info      WorkerInfo // as published by its heartbeats
	Malformed error      // what of Info did not decode, if any
	Held      int64      // tasks it holds
	// Races counts its tasks that got a backup (keys.Races), Lost those
	// whose backup's result came first.
	Races, Lost int64
}

// PublishedBatch is a running batch as its manager published it.
type PublishedBatch struct {
	Queue, Manager, ID string
	Progress           BatchProgress
	Malformed          error // the progress record did not decode
}

// Backlog is what waits in a queue's public lanes, all shards.
type Backlog struct {
	Tasks, Elements int64
	// Oldest is when the longest-waiting task was submitted, by the Redis
	// clock; zero if none waits. Now is the Redis clock as it was read.
	Oldest, Now time.Time
}

// The sources of a function's limit (limit.lua).
const (
	LimitFromCode     = "code" // declared with the function's handle
	LimitFromOperator = "op"   // set by an operator (redmap limit)
)

// FuncLimit is what the queue's limits hash says of one function: the
// limit in force and its source, both sources' records (nil if absent or
// unreadable), the tasks holding a slot of its cap, and how many takes a
// limit refused one of its tasks.
type FuncLimit struct {
	Func     string
	InForce  Limit
	Source   string // LimitFromOperator, LimitFromCode, or "" if none is in force
	Operator *LimitRecord
	Code     *LimitRecord
	Running  int64
	Refused  int64
	// RetryAfter counts the waits its elements made because it answered
	// redmap.RetryAfter (throttle.lua).
	RetryAfter int64
	// Waiting counts the tasks of the function queued in the public
	// lanes (the private lists are not counted).
	Waiting int64
	// Bad says why a record in Redis could not be read, if one could not.
	Bad string
}
