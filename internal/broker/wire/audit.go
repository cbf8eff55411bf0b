package wire

// Placed is where a group of a manager's outstanding tasks waits when Redis
// keeps them: a worker's private list (Worker not "") or their batch's lane.
type Placed struct {
	Worker string
	Lane   Lane
	Tasks  []string // task ids
}

// Audited says what an audit of a manager's outstanding tasks did (see
// audit.lua).
type Audited struct {
	Requeued int // tasks found in no list and no held set, queued again
	Lost     int // private tasks of a worker no longer live, reported lost
	Healed   int // lanes put back in their ring or the manager's lanes hash
	// Absent are the tasks of the call not in the task set (answered,
	// withdrawn or lost), and Unread the length of the result list then.
	Absent []string
	Unread int64
}
