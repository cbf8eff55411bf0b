package codec

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestTaskRoundTrip(t *testing.T) {
	frame, err := EncodeElements([]int{1, 2, 3}, 0)
	if err != nil {
		t.Fatal(err)
	}
	in := &Task{Func: "square", Sig: "func(int) int", Count: 3, Input: frame}
	b, err := EncodeTask(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeTask(b, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip: got %+v, want %+v", out, in)
	}
}

// The trace context is optional: an untraced task is the 14-field array of
// every version-2 task; a traced one adds fields 15 and 16, a bound of
// RetryAfter waits 17; fields a later
// release may add past them are skipped; fewer than 14 are refused.
func TestTaskTraceFieldsOptional(t *testing.T) {
	frame, _ := EncodeElements([]int{1}, 0)
	plain := &Task{Func: "f", Sig: "func(int) int", Count: 1, Input: frame, Seed: 7, Start: 3}
	b, err := EncodeTask(plain)
	if err != nil || b[0] != 0x90|14 {
		t.Fatalf("an untraced task starts %x (%v), want a 14-field array", b[:1], err)
	}
	traced := *plain
	traced.Trace = map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "k=v"}
	traced.Sent = 1764000000123456
	tb, err := EncodeTask(&traced)
	if err != nil || !bytes.HasPrefix(tb, []byte{0xdc, 0, 16}) {
		t.Fatalf("a traced task starts %x (%v), want a 16-field array", tb[:3], err)
	}
	got, err := DecodeTask(tb, 0)
	if err != nil || !reflect.DeepEqual(got, &traced) {
		t.Fatalf("traced round trip: %+v (%v), want %+v", got, err, &traced)
	}
	// The RetryAfter bound is field 17, with 15 and 16 (empty if untraced).
	waits := *plain
	waits.Waits = 4
	wb, err := EncodeTask(&waits)
	if err != nil || !bytes.HasPrefix(wb, []byte{0xdc, 0, 17}) {
		t.Fatalf("a task with Waits starts %x (%v), want a 17-field array", wb[:3], err)
	}
	if got, err := DecodeTask(wb, 0); err != nil || got.Waits != 4 || len(got.Trace) != 0 || got.Sent != 0 {
		t.Fatalf("Waits round trip: %+v (%v)", got, err)
	}
	// A batch's only task carries its record as field 18, with 15 to 17.
	solo := *plain
	solo.Record = `{"record":{"id":"m:1"}}`
	sb, err := EncodeTask(&solo)
	if err != nil || !bytes.HasPrefix(sb, []byte{0xdc, 0, 18}) {
		t.Fatalf("a task with a Record starts %x (%v), want an 18-field array", sb[:3], err)
	}
	if got, err := DecodeTask(sb, 0); err != nil || !reflect.DeepEqual(got, &solo) {
		t.Fatalf("Record round trip: %+v (%v), want %+v", got, err, &solo)
	}
	// A later release's task: a 21-field array, its field 20 naming a
	// field this one does not know, and a field 21.
	traced.Waits = 2
	traced.Record = "r"
	tb, _ = EncodeTask(&traced)
	later := append([]byte{0xdc, 0, 21}, tb[3:]...)
	later = append(later, 0xc4, 0) // an empty shuffle (19)
	later = append(later, 0x81, 0xa4, 'n', 'e', 'x', 't', 0x2a, 0xa1, 'x')
	got, err = DecodeTask(later, 0)
	if err != nil || got.Trace["tracestate"] != "k=v" || got.Sent != traced.Sent || got.Waits != 2 || got.Record != "r" || !got.Call.IsZero() {
		t.Fatalf("a task with fields it does not know: %+v (%v), want them skipped", got, err)
	}
	// Field 20 is a map, by name; anything else is refused.
	notMap := append([]byte{0xdc, 0, 20}, tb[3:]...)
	notMap = append(notMap, 0xc4, 0, 0x2a)
	if _, err := DecodeTask(notMap, 0); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a field 20 that is not a map: %v, want ErrCorrupt", err)
	}
	short := append([]byte{0x90 | 13}, b[1:]...)
	if _, err := DecodeTask(short, 0); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a 13-field task: %v, want ErrCorrupt", err)
	}
}

// What a call says of its batch travels by name as field 20, after 15 to
// 19 (empty if unset): a reader of the previous release, which reads 19
// fields by position and skips each one after them, finds them all where
// it reads them, and field 20 a single value it can skip. A field 20 that
// names a field this release does not know is read without it; a label
// no manager may send is refused.
func TestTaskCallByName(t *testing.T) {
	frame, _ := EncodeElements([]int{1}, 0)
	plain := &Task{Func: "f", Sig: "func(int) int", Count: 1, Input: frame, Seed: 7, Start: 3, Waits: 2, Record: "r", Shuffle: []byte{1}}
	pb, err := EncodeTask(plain)
	if err != nil || !bytes.HasPrefix(pb, []byte{0xdc, 0, 19}) {
		t.Fatalf("a task with a shuffle starts %x (%v), want a 19-field array", pb[:3], err)
	}
	called := *plain
	called.Call = CallInfo{Label: "nightly import"}
	cb, err := EncodeTask(&called)
	if err != nil || !bytes.HasPrefix(cb, []byte{0xdc, 0, 20}) {
		t.Fatalf("a task with a label starts %x (%v), want a 20-field array", cb[:3], err)
	}
	if !bytes.Equal(cb[3:len(pb)], pb[3:]) {
		t.Fatalf("fields 1 to 19 differ with a label:\n%x\n%x", cb[3:len(pb)], pb[3:])
	}
	if n, err := checkOne(cb[len(pb):]); err != nil || n != len(cb)-len(pb) {
		t.Fatalf("field 20 is not one value (%d of %d bytes, %v)", n, len(cb)-len(pb), err)
	}
	if got, err := DecodeTask(cb, 0); err != nil || !reflect.DeepEqual(got, &called) {
		t.Fatalf("round trip: %+v (%v), want %+v", got, err, &called)
	}
	if s := called.Call.String(); s != `label="nightly import"` {
		t.Fatalf("String: %s", s)
	}
	later := append(append([]byte{}, pb...), 0x82, 0xa5, 'l', 'a', 'b', 'e', 'l', 0xa1, 'x', 0xa4, 'n', 'e', 'x', 't', 0x2a)
	later[2] = 20
	if got, err := DecodeTask(later, 0); err != nil || got.Call.Label != "x" {
		t.Fatalf("a later release's field 20: %+v (%v), want its label and the rest skipped", got, err)
	}
	bad := *plain
	bad.Call.Label = "two\nlines"
	bb, _ := EncodeTask(&bad)
	if _, err := DecodeTask(bb, 0); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "Label") {
		t.Fatalf("a label with a newline: %v, want ErrCorrupt naming Label", err)
	}
}

func TestResultRoundTrip(t *testing.T) {
	enc := NewOutputEncoder(3)
	for _, v := range []string{"a", "b"} {
		if err := enc.Add(&v); err != nil {
			t.Fatal(err)
		}
	}
	enc.AddNil()
	in := &Result{Task: "m-1", Attempt: 2, Nanos: 12345, Values: enc.Bytes(), Fails: []Failure{{Index: 2, Kind: KindPanic, Msg: "boom", Stack: "main.f()"}}}
	b, err := EncodeResult(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeResult(b, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip: got %+v, want %+v", out, in)
	}
	if b[0] != 0x90|6 {
		t.Fatalf("a result starts %x, want a 6-field array", b[:1])
	}
	// Recorded travels as a seventh field, only when set; a later
	// release's fields past it are skipped.
	in.Recorded = true
	rb, err := EncodeResult(in)
	if err != nil || rb[0] != 0x90|7 {
		t.Fatalf("a recorded result starts %x (%v), want a 7-field array", rb[:1], err)
	}
	if got, err := DecodeResult(rb, 0); err != nil || !reflect.DeepEqual(got, in) {
		t.Fatalf("recorded round trip: %+v (%v), want %+v", got, err, in)
	}
	// Worker travels as an eighth field, after Recorded (false or not).
	in.Recorded, in.Worker = false, "w-7"
	wb, err := EncodeResult(in)
	if err != nil || wb[0] != 0x90|8 {
		t.Fatalf("a result with its worker starts %x (%v), want an 8-field array", wb[:1], err)
	}
	if got, err := DecodeResult(wb, 0); err != nil || !reflect.DeepEqual(got, in) {
		t.Fatalf("worker round trip: %+v (%v), want %+v", got, err, in)
	}
	// Backup travels as a ninth field, after Worker.
	in.Backup = true
	bb, err := EncodeResult(in)
	if err != nil || bb[0] != 0x90|9 {
		t.Fatalf("a backup's result starts %x (%v), want a 9-field array", bb[:1], err)
	}
	if got, err := DecodeResult(bb, 0); err != nil || !reflect.DeepEqual(got, in) {
		t.Fatalf("backup round trip: %+v (%v), want %+v", got, err, in)
	}
	in.Backup = false
	later := append(append([]byte{0x90 | 10}, rb[1:]...), 0xa1, 'x', 0xc3, 0x01)
	if got, err := DecodeResult(later, 0); err != nil || !got.Recorded || got.Task != "m-1" || got.Worker != "x" || !got.Backup {
		t.Fatalf("a result with fields past 9: %+v (%v), want them skipped", got, err)
	}
	if _, err := DecodeResult(append([]byte{0x90 | 5}, b[1:]...), 0); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a 5-field result: %v, want ErrCorrupt", err)
	}
	vals := make([]string, 3)
	if err := DecodeElements(out.Values, vals); err != nil {
		t.Fatal(err)
	}
	if want := []string{"a", "b", ""}; !reflect.DeepEqual(vals, want) {
		t.Fatalf("values: got %q, want %q", vals, want)
	}
}

func TestElementsStruct(t *testing.T) {
	type doc struct {
		ID   int
		Tags []string
	}
	in := []doc{{1, []string{"x"}}, {2, nil}}
	frame, err := EncodeElements(in, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]doc, 2)
	if err := DecodeElements(frame, out); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("got %+v, want %+v", out, in)
	}
}

func TestElementTooLarge(t *testing.T) {
	xs := []string{"small", strings.Repeat("x", 100), "small"}
	_, err := EncodeElements(xs, 50)
	var ee *ElementError
	if !errors.As(err, &ee) || ee.Index != 1 || !errors.Is(err, ErrTooLarge) {
		t.Fatalf("got %v, want element 1 too large", err)
	}
}

func TestOutputEncoderSkipsUnencodable(t *testing.T) {
	enc := NewOutputEncoder(3)
	one, ch := 1, make(chan int)
	if err := enc.Add(&one); err != nil {
		t.Fatal(err)
	}
	if err := enc.Add(&ch); err == nil {
		t.Fatal("encoding a channel: want an error")
	}
	enc.AddNil()
	if err := enc.Add(&one); err != nil {
		t.Fatal(err)
	}
	out := make([]int, 3)
	if err := DecodeElements(enc.Bytes(), out); err != nil {
		t.Fatal(err)
	}
	if want := []int{1, 0, 1}; !reflect.DeepEqual(out, want) {
		t.Fatalf("got %v, want %v", out, want)
	}
}

func TestDecodersRefuse(t *testing.T) {
	task, _ := EncodeTask(&Task{Func: "f", Sig: "s", Count: 1, Input: []byte{0x91, 0x01}})
	res, _ := EncodeResult(&Result{Task: "m-1", Values: []byte{0x91, 0x01}})
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"task garbage", second(DecodeTask([]byte("garbage"), 0)), ErrCorrupt},
		{"task empty", second(DecodeTask(nil, 0)), ErrCorrupt},
		{"task truncated", second(DecodeTask(task[:len(task)-1], 0)), ErrCorrupt},
		{"task trailing", second(DecodeTask(append(bytes.Clone(task), 0), 0)), ErrCorrupt},
		{"task over cap", second(DecodeTask(task, len(task)-1)), ErrTooLarge},
		{"result garbage", second(DecodeResult([]byte{0xc1}, 0)), ErrCorrupt},
		{"result truncated", second(DecodeResult(res[:len(res)-2], 0)), ErrCorrupt},
		{"result over cap", second(DecodeResult(res, len(res)-1)), ErrTooLarge},
		{"elements count", DecodeElements([]byte{0x92, 1, 2}, make([]int, 3)), ErrCorrupt},
		// An array header claiming 2^32-1 elements in a 5-byte frame.
		{"elements forged length", DecodeElements([]byte{0xdd, 0xff, 0xff, 0xff, 0xff}, make([]int, 1)), ErrCorrupt},
	}
	for _, c := range cases {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, c.err, c.want)
		}
	}
}

func TestDecodeResultKeepsTaskID(t *testing.T) {
	res, _ := EncodeResult(&Result{Task: "m-7", Values: []byte{0x91, 0x01}})
	r, err := DecodeResult(res[:len(res)-1], 0)
	if err == nil || r == nil || r.Task != "m-7" {
		t.Fatalf("got %+v, %v; want the task id and an error", r, err)
	}
}

func second[T any](_ T, err error) error { return err }

// msgpack panics when asked to fill an interface with methods; the codec
// turns that into an error.
func TestDecodeIntoInterfaceWithMethodsIsAnError(t *testing.T) {
	frame, err := EncodeElements([]int{1, 2}, 0)
	if err != nil {
		t.Fatal(err)
	}
	err = DecodeElements(frame, make([]fmt.Stringer, 2))
	var ee *ElementError
	if !errors.As(err, &ee) || ee.Index != 0 {
		t.Fatalf("got %v, want an error for element 0", err)
	}
}

// The fast paths write what the general path writes, and decode it back.
func TestFastPathsMatchGeneralPath(t *testing.T) {
	check := func(name string, fast []byte, general func() []byte) {
		t.Helper()
		if !bytes.Equal(fast, general()) {
			t.Errorf("%s: fast path wrote %x, general path %x", name, fast, general())
		}
	}
	general := func(xs []any) []byte {
		frame, err := EncodeElements(xs, 0)
		if err != nil {
			t.Fatal(err)
		}
		return frame
	}
	ints := []int{0, 1, -1, 127, 128, -33, 1 << 40, -1 << 40}
	f, _ := EncodeElements(ints, 1<<10)
	check("int", f, func() []byte {
		xs := make([]any, len(ints))
		for i, x := range ints {
			xs[i] = x
		}
		return general(xs)
	})
	strs := []string{"", "a", strings.Repeat("x", 300)}
	f, _ = EncodeElements(strs, 1<<10)
	check("string", f, func() []byte { return general([]any{strs[0], strs[1], strs[2]}) })
	floats := []float64{0, 1.5, -2.25}
	f, _ = EncodeElements(floats, 0)
	check("float64", f, func() []byte { return general([]any{floats[0], floats[1], floats[2]}) })

	back := make([]string, 3)
	if err := DecodeElements(f2(EncodeElements(strs, 0)), back); err != nil || back[2] != strs[2] {
		t.Fatalf("strings back: %v", err)
	}
	// The cap still applies on the fast path's types.
	if _, err := EncodeElements(strs, 100); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("string over the cap: %v", err)
	}
}

func f2(b []byte, _ error) []byte { return b }

// Equal values encode to equal bytes, maps at any depth included, and decode
// back to the same value.
func TestEncodeValueDeterministic(t *testing.T) {
	type doc struct {
		Counts map[string]int
		Nested []map[int]string
		Any    map[string]any
	}
	v := doc{Counts: map[string]int{}, Nested: []map[int]string{{}, nil}, Any: map[string]any{"x": map[string]int{"b": 2, "a": 1}, "y": []any{1, "z"}}}
	for i := range 500 {
		v.Counts[fmt.Sprint("word", i)] = i
		v.Nested[0][i] = fmt.Sprint(i)
	}
	first, err := EncodeValue(&v)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		again, err := EncodeValue(&v)
		if err != nil || !bytes.Equal(again, first) {
			t.Fatalf("encoding the same value twice gave different bytes (%v)", err)
		}
	}
	got, err := DecodeValue[doc](first)
	if err != nil || len(got.Counts) != 500 || got.Counts["word7"] != 7 || got.Nested[0][42] != "42" || got.Nested[1] != nil {
		t.Fatalf("decoded %v, %v", got.Counts["word7"], err)
	}
}
