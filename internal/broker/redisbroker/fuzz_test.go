package redisbroker

import (
	"runtime"
	"strings"
	"testing"

	"github.com/redmap/redmap/internal/broker/wire"
)

// FuzzDecodeRecords: any bytes as an operator's record (a failure group, a
// history record, a batch's progress, a worker's info, a result list's
// entry) decode or give an error, never panic, and allocate within a stated
// multiple of their length: 64n plus 16 KiB.
func FuzzDecodeRecords(f *testing.F) {
	f.Add(wire.EncodeGroup(wire.FailureGroup{Func: "f", Kind: "panic", Count: 2, Sample: "boom", Workers: "w1"}))
	f.Add(`{"id":"b","outcome":"manager lost","total":3,"failed_by":{"lost":1}}`)
	f.Add(`{"func":"f","total":10,"done":4,"eta":1000000}`)
	f.Add("lost m-1:2 w1")
	f.Add(strings.Repeat("[", 20000))
	f.Add(`{"count":1e999}`)
	f.Fuzz(func(t *testing.T, s string) {
		for name, decode := range map[string]func(){
			"group":    func() { _, _ = wire.DecodeGroup(s) },
			"record":   func() { _, _ = wire.DecodeRecord(s) },
			"progress": func() { _, _ = wire.DecodeProgress(s) },
			"info": func() {
				_, _ = wire.DecodeWorkerInfo(map[string]string{"host": s, "pid": s, "started": s, "functions": s, "concurrency": s})
			},
			"entry": func() { _, _ = wire.DecodeEntry(s, 0) },
		} {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			decode()
			runtime.ReadMemStats(&after)
			if n := after.TotalAlloc - before.TotalAlloc; n > 64*uint64(len(s))+16<<10 {
				t.Fatalf("%s: %d bytes allocated decoding a %d-byte record", name, n, len(s))
			}
		}
	})
}
