package codec

// Kind says why an element failed; the root package maps each kind to the
// sentinel error a caller tests with errors.Is.
type Kind uint8

// The kinds of failure a worker reports.
const (
	KindError        Kind = iota + 1 // the function returned an error
	KindPanic                        // the function panicked; Stack holds its stack
	KindUnknownFunc                  // the worker has no function of that name
	KindTypeMismatch                 // the worker's function has other types than the manager's handle
	KindDecode                       // the task or an input could not be decoded
	KindEncode                       // an output could not be encoded
	KindTooLarge                     // a frame or element is above its size cap
	KindConstMissing                 // the task's constant data is not in Redis
	KindConstCorrupt                 // the task's constant data does not match its hash
	KindLost                         // the task was lost more often than its attempt budget allows
	KindTimeout                      // the function ran past the task's timeout
	KindReduce                       // the reducer failed to fold the element's output in
	KindThrottled                    // the function kept answering RetryAfter past the batch's bound
	KindRedisFull                    // Redis, at maxmemory, refused the task's result each time it was sent
	maxKind
)

var kindNames = [...]string{"", "error", "panic", "unknown function", "type mismatch", "decode",
	"encode", "too large", "constant missing", "constant corrupt", "lost", "timeout", "reduce", "throttled", "redis full"}

// Kinds returns every kind, in order.
func Kinds() []Kind {
	out := make([]Kind, 0, maxKind-1)
	for k := KindError; k < maxKind; k++ {
		out = append(out, k)
	}
	return out
}

// String returns the kind's name, as operators see it.
func (k Kind) String() string {
	if int(k) < len(kindNames) && k > 0 {
		return kindNames[k]
	}
	return "unknown"
}

// Failure is one failed element of a task, a run of them if Through is
// past Index, or every element if Index is -1.
type Failure struct {
	Index int // index within the task's chunk, or -1 for the whole task
	Kind  Kind
	Msg   string
	Stack string // set for KindPanic
	// Through, if greater than Index, is the last index of a run of
	// elements that failed alike: Index through Through, each with this
	// kind, message and stack. It travels as an optional fifth field, so a
	// task whose 30,000 elements fail the same way (their service down, an
	// input frame unreadable from its third element on) sends one failure,
	// not 30,000.
	Through int
}

// Last returns the last index f stands for: Through for a run, else Index.
func (f *Failure) Last() int {
	if f.run() {
		return f.Through
	}
	return f.Index
}

// run reports whether f stands for a run of elements.
func (f *Failure) run() bool { return f.Index >= 0 && f.Through > f.Index }

// Extend reports whether g, the failure of the element after f's last, fails
// alike, and if so makes f's run end at g.
func (f *Failure) Extend(g *Failure) bool {
	if f.Index < 0 || g.Index != f.Last()+1 || g.Through > g.Index || g.Kind != f.Kind || g.Msg != f.Msg || g.Stack != f.Stack {
		return false
	}
	f.Through = g.Index
	return true
}

// Result is what a worker reports for one task.
type Result struct {
	Task    string    // the task id
	Attempt int       // the attempt that produced it: 0 for the first run
	Nanos   int64     // how long the worker spent running the task's elements
	Values  []byte    // a MessagePack array of one output per element; zero values where an element failed
	Fails   []Failure // failed elements, in index order
	// Recorded says the worker's finish wrote the batch's history record
	// with this result (Task.Record: the task is its batch's only one).
	// It travels as an optional seventh field, set only when true (or
	// when Worker is set).
	Recorded bool
	// Worker is the id of the worker that ran the task, set by a worker
	// only on a result with failures, so that operators can see who
	// failed an element (redmap failures -batch). It travels as an
	// optional eighth field, which a reader of an earlier release skips.
	Worker string
	// Backup says the result is of a backup task: a copy of a task that
	// ran long, queued near its batch's end (manager.Backups), whose first
	// result wins. It travels as an optional ninth field, set only when
	// true; Worker is then set too.
	Backup bool
}

// resultFields is the length of a result's array without its optional
// fields; a reader skips fields past the ones it knows, up to
// maxResultFields, so that a worker of a later release may add some.
const (
	resultFields    = 6
	maxResultFields = 16
)

// EncodeResult returns the wire form of r: one MessagePack array.
func EncodeResult(r *Result) ([]byte, error) {
	size := len(r.Task) + len(r.Values) + 16
	for _, f := range r.Fails {
		size += len(f.Msg) + len(f.Stack) + 16
	}
	size += len(r.Worker)
	w := newWriter(size)
	switch {
	case r.Backup:
		w.arrayLen(resultFields + 3)
	case r.Worker != "":
		w.arrayLen(resultFields + 2)
	case r.Recorded:
		w.arrayLen(resultFields + 1)
	default:
		w.arrayLen(resultFields)
	}
	w.int(version)
	w.str(r.Task)
	w.int(r.Attempt)
	w.int(int(r.Nanos))
	w.bytes(r.Values)
	w.arrayLen(len(r.Fails))
	for _, f := range r.Fails {
		if f.run() {
			w.arrayLen(5)
		} else {
			w.arrayLen(4)
		}
		w.int(f.Index)
		w.int(int(f.Kind))
		w.str(f.Msg)
		w.str(f.Stack)
		if f.run() {
			w.int(f.Through)
		}
	}
	if r.Recorded || r.Worker != "" || r.Backup {
		w.bool(r.Recorded)
	}
	if r.Worker != "" || r.Backup {
		w.str(r.Worker)
	}
	if r.Backup {
		w.bool(true)
	}
	return w.result()
}

// DecodeResult parses a result of at most limit bytes (DefaultMaxFrame if
// limit <= 0). If the frame is corrupt after its task id, it returns the error
// together with a Result holding just the id, so the caller can fail that task
// rather than wait for it forever.
func DecodeResult(b []byte, limit int) (*Result, error) {
	d := newReader(b)
	defer d.release()
	fields := d.arrayLen()
	if fields < resultFields || fields > maxResultFields {
		return nil, d.fail("result", "want an array of 6 to 16 fields")
	}
	if d.int() != version {
		return nil, d.fail("result", "unknown version")
	}
	r := &Result{Task: d.str(), Attempt: d.int(), Nanos: int64(d.int())}
	if d.err != nil {
		return nil, d.end("result")
	}
	if err := checkSize("result", b, limit); err != nil {
		return &Result{Task: r.Task}, err
	}
	r.Values = d.bytes()
	n := d.arrayOf(5) // a failure is an array of at least 5 bytes
	if r.Attempt < 0 || r.Nanos < 0 {
		return &Result{Task: r.Task}, corrupt("result: negative attempt or time", nil)
	}
	if n > 0 {
		r.Fails = make([]Failure, n)
	}
	for i := range r.Fails {
		f := &r.Fails[i]
		fields := d.arrayLen()
		if fields != 4 && fields != 5 {
			return &Result{Task: r.Task}, d.fail("result", "want a failure of 4 or 5 fields")
		}
		f.Index, f.Kind, f.Msg, f.Stack = d.int(), Kind(d.int()), d.str(), d.str()
		if fields == 5 {
			f.Through = d.int()
		}
		if d.err == nil && (f.Index < -1 || f.Kind == 0 || f.Kind >= maxKind || fields == 5 && (f.Index < 0 || f.Through <= f.Index)) {
			return &Result{Task: r.Task}, corrupt("result: failure out of range", nil)
		}
	}
	if fields > resultFields {
		r.Recorded = d.bool()
	}
	if fields > resultFields+1 {
		r.Worker = d.str()
	}
	if fields > resultFields+2 {
		r.Backup = d.bool()
	}
	for range fields - resultFields - 3 {
		d.skip()
	}
	if err := d.end("result"); err != nil {
		return &Result{Task: r.Task}, err
	}
	return r, nil
}
