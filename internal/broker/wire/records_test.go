package wire

import (
	"maps"
	"testing"

	"github.com/redmap/redmap/codec"
)

// A malformed field is named, and the rest still decodes.
func TestDecodeWorkerInfoNamesMalformed(t *testing.T) {
	i, err := DecodeWorkerInfo(map[string]string{"host": "h", "pid": "x1", "error": "only this"})
	if err == nil || err.Error() != "worker info: malformed pid" {
		t.Fatalf("err %v, want one naming pid", err)
	}
	if i.Host != "h" || i.Error != "only this" {
		t.Fatalf("decoded %+v, want host and error kept", i)
	}
}

// Fingerprint masks what differs between messages of one kind, the way
// error trackers group: retries, numbers (an HTTP status's too), ids,
// quoted strings and paths.
func TestFingerprint(t *testing.T) {
	for _, c := range []struct{ msg, want string }{
		{"boom", "boom"},
		{"attempt 2: boom\nat line 3", "boom"},
		{"open /data/2024/17.csv: no such file or directory", "open <path>: no such file or directory"},
		{`parse "x=17": invalid syntax`, `parse "…": invalid syntax`},
		{"user 9f86d081884c7d65 not found after 3 tries (1.5s)", "user <id> not found after <n> tries (<n>s)"},
		{"task 3f2a9c1e-0b7d-4c1a-9e2f-5d6c7b8a9f0e: lost", "task <id>: lost"},
		{"bad pointer 0xc000123456", "bad pointer <id>"},
		{`C:\Users\x\a.txt locked`, "<path> locked"},
		{"read ./cache/x: denied", "read <path>: denied"},
		{"deadline exceeded", "deadline exceeded"},
		{"429 Too Many Requests from api.example.com (retry in 12s)", "<n> Too Many Requests from api.example.com (retry in <n>s)"},
		{"GET /v1/geo?id=17: status 503", "GET <path>: status <n>"},
		{"item 499 failed", "item <n> failed"},
		{"item 599 failed", "item <n> failed"},
		{"status 200 but 3999 bytes short, -404.5 off", "status <n> but <n> bytes short, <n> off"},
	} {
		if got := Fingerprint(c.msg); got != c.want {
			t.Errorf("Fingerprint(%q) = %q, want %q", c.msg, got, c.want)
		}
	}
}

// The record a solo task's worker writes counts every element done, the
// failed ones by kind (a run, a whole-task failure), and says failed if
// any did; a manager's record that ended alike is the same end, one
// that failed otherwise is not. A Solo field that is not a manager's is
// refused.
func TestCompleteSoloRecord(t *testing.T) {
	tmpl := BatchRecord{ID: "m:1", Manager: "m", Func: "f", Total: 10, Started: 5}
	done := Complete(tmpl, 10, nil, 9)
	if done.Done != 10 || done.Failed != 0 || done.Outcome != OutcomeDone || done.Ended != 9 || done.Func != "f" {
		t.Fatalf("a task with no failure: %+v", done)
	}
	fails := []codec.Failure{{Index: 1, Kind: codec.KindPanic}, {Index: 3, Through: 6, Kind: codec.KindError}}
	failed := Complete(tmpl, 10, fails, 9)
	if failed.Failed != 5 || failed.Outcome != OutcomeFailed || !maps.Equal(failed.FailedBy, map[string]int{"panic": 1, "error": 4}) {
		t.Fatalf("a task with a panic and a run of 4 errors: %+v", failed)
	}
	whole := Complete(tmpl, 10, []codec.Failure{{Index: -1, Kind: codec.KindUnknownFunc}}, 9)
	if whole.Failed != 10 || whole.FailedBy["unknown function"] != 10 {
		t.Fatalf("a task failed whole: %+v", whole)
	}
	mine := failed
	mine.Ended = 12
	if !SameEnd(failed, mine) {
		t.Fatal("records that differ only in when they ended are not the same end")
	}
	mine.FailedBy = map[string]int{"panic": 1, "decode": 4}
	if SameEnd(failed, mine) {
		t.Fatal("records of other causes are the same end")
	}
	if !SameEnd(done, BatchRecord{Total: 10, Done: 10, Outcome: OutcomeDone, FailedBy: map[string]int{}}) {
		t.Fatal("no failures, nil or empty, are not the same end")
	}
	good := EncodeSolo(Solo{Record: tmpl, Keep: 1000, AgeMs: 1})
	if s, err := DecodeSolo(good); err != nil || s.Record.ID != "m:1" || s.Keep != 1000 {
		t.Fatalf("a manager's solo record: %+v, %v", s, err)
	}
	for _, bad := range []string{"", "{", `{"record":{"id":"m:1","manager":"m","total":0},"keep":1,"age_ms":1}`,
		`{"record":{"id":"m:1","manager":"m","total":1},"keep":0,"age_ms":1}`,
		`{"record":{"id":"m:1","manager":"m","total":1,"outcome":"done"},"keep":1,"age_ms":1}`} {
		if _, err := DecodeSolo(bad); err == nil {
			t.Fatalf("solo record %q decoded", bad)
		}
	}
}

// A pipeline's record decodes as it was encoded; bytes that are not one,
// or one no manager writes, give an error, never a panic.
func TestPipelineRecordDecode(t *testing.T) {
	rec := &PipelineRecord{Sum: "ab", Head: true, Levels: []PipeLevel{{Ranges: []int{0, 20}, Rounds: 1, Running: []int{3},
		Parts: []PipePart{{Part: 1, Out: ReduceOutput{Pages: 2}}, {Part: 2, Failed: &PipeError{Kind: "lost", Msg: "m"}}}}}}
	b, err := EncodePipelineRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodePipelineRecord(b)
	if err != nil || got.Sum != "ab" || !got.Head || len(got.Levels) != 1 || got.Levels[0].Parts[1].Failed.Kind != "lost" {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	for _, bad := range [][]byte{nil, []byte("not a record"), b[:len(b)/2]} {
		if _, err := DecodePipelineRecord(bad); err == nil {
			t.Errorf("%q decoded", bad)
		}
	}
	rec.Levels[0].Ranges = []int{0}
	b, _ = EncodePipelineRecord(rec)
	if _, err := DecodePipelineRecord(b); err == nil {
		t.Error("a record with an odd list of ranges decoded")
	}
}
