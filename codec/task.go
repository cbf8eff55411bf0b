package codec

import "errors"

// version is the first field of every envelope and result; a reader refuses
// any other, so a fleet running two incompatible redmap versions fails loudly.
const version = 1

var errTrailing = errors.New("trailing bytes")

// Task is the envelope of one task: a chunk of Count consecutive elements of a
// batch, all for one function.
type Task struct {
	Func  string // registered name of the function
	Sig   string // "func(In) Out" as the manager's handle sees it
	Count int    // number of elements in Input
	Input []byte // a MessagePack array of Count encoded inputs (see EncodeElements)
}

// EncodeTask returns the wire form of t: one MessagePack array.
func EncodeTask(t *Task) ([]byte, error) {
	w := newWriter(len(t.Func) + len(t.Sig) + len(t.Input) + 24)
	w.arrayLen(5)
	w.int(version)
	w.str(t.Func)
	w.str(t.Sig)
	w.int(t.Count)
	w.bytes(t.Input)
	return w.result()
}

// DecodeTask parses a task envelope of at most limit bytes (DefaultMaxFrame if
// limit <= 0).
func DecodeTask(b []byte, limit int) (*Task, error) {
	if err := checkSize("task", b, limit); err != nil {
		return nil, err
	}
	d := newReader(b)
	if d.arrayLen() != 5 {
		return nil, d.fail("task", "want a 5-field array")
	}
	if d.int() != version {
		return nil, d.fail("task", "unknown version")
	}
	t := &Task{Func: d.str(), Sig: d.str(), Count: d.int(), Input: d.bytes()}
	if err := d.end("task"); err != nil {
		return nil, err
	}
	if t.Count < 0 || t.Count > len(t.Input) {
		return nil, corrupt("task: count out of range", nil)
	}
	return t, nil
}
