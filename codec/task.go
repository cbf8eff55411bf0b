package codec

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

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

	// Trace is the trace context of the batch's span, as a W3C
	// propagator writes it (traceparent, tracestate), and Sent when the
	// task was made, in Unix microseconds by the manager's clock. Both are
	// empty unless the batch is traced; then they travel as optional
	// fields 15 and 16 (see EncodeTask).
	Trace map[string]string
	Sent  int64
	// Waits bounds the RetryAfter waits of each element (see
	// redmap.RetryAfter); 0 means the worker's default. It travels as
	// optional field 17 (with 15 and 16, empty if the batch is untraced).
	Waits int
	// Record is set on a batch's only task (a lone Map): the batch's
	// history record as far as its manager knows it, for the worker to
	// complete from the result and its finish to write with it, so that
	// the manager need not write it before Map returns. Its form is
	// internal to redmap. It travels as optional field 18.
	Record string
	// Shuffle is set on the tasks of a map/reduce by key
	// (manager.ReduceByKey): which phase, and where its partitions live.
	// Its form is internal to redmap. It travels as optional field 19.
	Shuffle []byte

	// Call is what the call says of its batch by name: optional field 20,
	// the last. A field added to the envelope goes there, not after it.
	Call CallInfo
}

// CallInfo is what a call says of its batch to its workers and to
// operators, by field name: each task's envelope carries it (a MessagePack
// map keyed by the msgpack tags, sent only when a field is set), and so do
// the batch's published progress and its history record (a JSON object
// keyed by the json tags, which the scripts copy whole). Operators' tools
// show every field set (String), and every line the function logs on a
// worker through redmap.Logger carries them (LogArgs). A reader skips the
// keys it does not know, so a new per-call option is a field here and its
// option function (manager/options_call.go): workers and tools of an
// earlier release ignore it, and nothing in between names it.
type CallInfo struct {
	// Label names the batch for people: the job it is part of
	// (manager.Label).
	Label string `msgpack:"label,omitempty" json:"label,omitempty"`
	// Pipeline names the pipeline (manager.From) the batch is a phase of:
	// its durable name, or its job id; Stage says which of its steps the
	// batch's tasks run ("1-3 map": steps 1 to 3, the third a by-key
	// step's map side; "3-5 reduce": its reduce side, then steps 4, 5).
	Pipeline string `msgpack:"pipeline,omitempty" json:"pipeline,omitempty"`
	Stage    string `msgpack:"stage,omitempty" json:"stage,omitempty"`
	// Rerun says the batch runs elements of its Stage again, which a
	// batch before it ran (a by-key step's producers, after Redis lost
	// what they stored): a pipeline's stage counts it among its reruns,
	// not in its total.
	Rerun bool `msgpack:"rerun,omitempty" json:"rerun,omitempty"`
}

// IsZero reports whether no field of c is set: its tasks then carry no
// field 20, and its records no "call".
func (c CallInfo) IsZero() bool { return reflect.ValueOf(c).IsZero() }

// MaxCallText is the most bytes a text field of a CallInfo may hold.
const MaxCallText = 256

// Problem says what is wrong with the first field of c that a manager may
// not send: a text over MaxCallText bytes, not UTF-8, or with a control
// character; "" if there is none. A manager refuses such a call (saying
// so), and a worker such a task (DecodeTask: ErrCorrupt).
func (c CallInfo) Problem() string {
	var why string
	c.each(func(name, _ string, v reflect.Value) {
		if s, ok := v.Interface().(string); ok && why == "" {
			switch {
			case len(s) > MaxCallText:
				why = fmt.Sprintf("%s is %d bytes, over %d", name, len(s), MaxCallText)
			case !utf8.ValidString(s) || strings.IndexFunc(s, unicode.IsControl) >= 0:
				why = fmt.Sprintf("%s %q is not printable UTF-8", name, s)
			}
		}
	})
	return why
}

// String is c as operators read it: each field set as name=value, by its
// msgpack name, in the order of the fields, a text quoted if it has a space
// or a quote; "" if none is set.
func (c CallInfo) String() string {
	var parts []string
	c.each(func(_, name string, v reflect.Value) {
		s := fmt.Sprint(v.Interface())
		if strings.ContainsAny(s, " \t\"=") {
			s = strconv.Quote(s)
		}
		parts = append(parts, name+"="+s)
	})
	return strings.Join(parts, " ")
}

// LogArgs returns each field of c that is set as a key and a value, by its
// msgpack name, for slog's With: a worker's logger for the task's function
// (redmap.Logger) carries them.
func (c CallInfo) LogArgs() []any {
	var args []any
	c.each(func(_, name string, v reflect.Value) { args = append(args, name, v.Interface()) })
	return args
}

// each calls f with each field of c that is set: its Go name (the option
// that sets it is named so), its msgpack name and its value.
func (c CallInfo) each(f func(field, name string, v reflect.Value)) {
	v := reflect.ValueOf(c)
	for i := range v.NumField() {
		if fv := v.Field(i); !fv.IsZero() {
			sf := v.Type().Field(i)
			name, _, _ := strings.Cut(sf.Tag.Get("msgpack"), ",")
			f(sf.Name, name, fv)
		}
	}
}

// MaxTraceFields caps the entries of a task's trace context: a W3C
// propagator writes two (traceparent, tracestate), baggage a third.
const MaxTraceFields = 16

// taskFields is the length of a task's array without its optional fields;
// tracedFields with them.
const (
	taskFields    = 14
	tracedFields  = 16
	waitsFields   = 17
	recordFields  = 18
	shuffleFields = 19
	callFields    = 20
)

// EncodeTask returns the wire form of t: one MessagePack array.
func EncodeTask(t *Task) ([]byte, error) {
	w := newWriter(len(t.Func) + len(t.Sig) + len(t.Input) + len(t.Const) + 32)
	fields := taskFields
	switch {
	case !t.Call.IsZero():
		fields = callFields
	case len(t.Shuffle) > 0:
		fields = shuffleFields
	case t.Record != "":
		fields = recordFields
	case t.Waits != 0:
		fields = waitsFields
	case len(t.Trace) > 0:
		fields = tracedFields
	}
	traced := fields > taskFields
	w.arrayLen(fields)
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
	if traced {
		keys := slices.Sorted(maps.Keys(t.Trace))
		w.arrayLen(2 * len(keys))
		for _, k := range keys {
			w.str(k)
			w.str(t.Trace[k])
		}
		w.int(int(t.Sent))
	}
	if fields >= waitsFields {
		w.int(t.Waits)
	}
	if fields >= recordFields {
		w.str(t.Record)
	}
	if fields >= shuffleFields {
		w.bytes(t.Shuffle)
	}
	if fields >= callFields {
		w.do(w.enc.Encode(t.Call)) // a map, by the msgpack tags
	}
	return w.result()
}

// DecodeTask parses a task envelope of at most limit bytes (DefaultMaxFrame if
// limit <= 0). Fields past the 14 every version-2 task has are optional: it
// reads the trace context (15), the time sent (16), the RetryAfter bound
// (17), the history record (18), the shuffle (19) and the call's fields by
// name (20) if they are there, and skips any later ones and any name it does
// not know, so a manager of a later release may add more.
func DecodeTask(b []byte, limit int) (*Task, error) {
	if err := checkSize("task", b, limit); err != nil {
		return nil, err
	}
	d := newReader(b)
	defer d.release()
	fields := d.arrayLen()
	if fields < taskFields {
		return nil, d.fail("task", "want an array of at least 14 fields")
	}
	if d.int() != version {
		return nil, d.fail("task", "unknown version")
	}
	t := &Task{Func: d.str(), Sig: d.str(), Count: d.int(), Input: d.bytes(), Const: d.str(), ConstSize: int64(d.int()),
		Attempts: d.int(), Timeout: int64(d.int()), Retry: d.bool(),
		Reduce: d.str(), ReduceSig: d.str(), Seed: uint64(d.int()), Start: d.int()}
	if fields > taskFields {
		t.Trace = d.pairs(MaxTraceFields)
	}
	if fields > taskFields+1 {
		t.Sent = int64(d.int())
	}
	if fields > tracedFields {
		t.Waits = d.int()
	}
	if fields > waitsFields {
		t.Record = d.str()
	}
	if fields > recordFields {
		t.Shuffle = d.bytes()
	}
	if fields > shuffleFields && d.checkNext() {
		d.do(d.dec.Decode(&t.Call))
	}
	for range fields - callFields {
		d.skip()
	}
	if err := d.end("task"); err != nil {
		return nil, err
	}
	if fields > shuffleFields {
		if why := t.Call.Problem(); why != "" {
			return nil, corrupt("task: call: "+why, nil)
		}
	}
	if t.Count < 0 || t.Count > len(t.Input) || t.ConstSize < 0 || t.Attempts < 0 || t.Timeout < 0 || t.Start < 0 || t.Waits < 0 {
		return nil, corrupt("task: count or size out of range", nil)
	}
	return t, nil
}
