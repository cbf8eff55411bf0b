package codec

// version is the first field of every envelope and result; a reader refuses
// any other, so a fleet running two incompatible redmap versions fails loudly.
// Version 2 added a task's reducer, seed and first index.
const version = 2

// Task is the envelope of one task: a chunk of Count consecutive elements of a
// batch, all for one function.
type Task struct {
	Func  string // registered name of the function
	Sig   string // "func(In) Out" as the manager's handle sees it
	Count int    // number of elements in Input
	Input []byte // a MessagePack array of Count encoded inputs (see EncodeElements)

	Const     string // BLAKE3 hash of the batch's constant data, or "" if none
	ConstSize int64  // its size in bytes

	Attempts int   // attempt budget: lost attempts plus retries of an element
	Timeout  int64 // per-element timeout, ms; 0 for none
	Retry    bool  // retry function errors too, not only retryable ones

	// Reduce names the reducer that folds the outputs into one partial
	// (manager.MapReduce), with its signature; "" for a plain map, whose
	// result carries every output.
	Reduce, ReduceSig string
	Seed              uint64 // the batch's seed for redmap.Rand
	Start             int    // the batch index of the first element
}

// taskFields is the length of a task's array.
const taskFields = 14

// EncodeTask returns the wire form of t: one MessagePack array.
func EncodeTask(t *Task) ([]byte, error) {
	w := newWriter(len(t.Func) + len(t.Sig) + len(t.Input) + len(t.Const) + 32)
	w.arrayLen(taskFields)
	w.int(version)
	w.str(t.Func)
	w.str(t.Sig)
	w.int(t.Count)
	w.bytes(t.Input)
	w.str(t.Const)
	w.int(int(t.ConstSize))
	w.int(t.Attempts)
	w.int(int(t.Timeout))
	w.bool(t.Retry)
	w.str(t.Reduce)
	w.str(t.ReduceSig)
	w.int(int(t.Seed))
	w.int(t.Start)
	return w.result()
}

// DecodeTask parses a task envelope of at most limit bytes (DefaultMaxFrame if
// limit <= 0).
func DecodeTask(b []byte, limit int) (*Task, error) {
	if err := checkSize("task", b, limit); err != nil {
		return nil, err
	}
	d := newReader(b)
	if d.arrayLen() != taskFields {
		return nil, d.fail("task", "want a 14-field array")
	}
	if d.int() != version {
		return nil, d.fail("task", "unknown version")
	}
	t := &Task{Func: d.str(), Sig: d.str(), Count: d.int(), Input: d.bytes(), Const: d.str(), ConstSize: int64(d.int()),
		Attempts: d.int(), Timeout: int64(d.int()), Retry: d.bool(),
		Reduce: d.str(), ReduceSig: d.str(), Seed: uint64(d.int()), Start: d.int()}
	if err := d.end("task"); err != nil {
		return nil, err
	}
	if t.Count < 0 || t.Count > len(t.Input) || t.ConstSize < 0 || t.Attempts < 0 || t.Timeout < 0 || t.Start < 0 {
		return nil, corrupt("task: count or size out of range", nil)
	}
	return t, nil
}
