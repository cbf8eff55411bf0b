package keys

import (
	"strings"
	"testing"
)

func TestCheckNames(t *testing.T) {
	for _, c := range []struct {
		check func(string) error
		name  string
		ok    bool
	}{
		{CheckQueue, "jobs", true},
		{CheckQueue, "a*", true},
		{CheckQueue, "a[b]c", true},
		{CheckQueue, "", false},
		{CheckQueue, "a{b", false},
		{CheckQueue, "a#2", false},
		{CheckQueue, "a%job.3", false}, // a partition's hash tag
		{CheckQueue, "a\nb", false},
		{CheckQueue, "a\x00", false},
		{CheckQueue, "\xff", false},
		{CheckQueue, strings.Repeat("q", MaxName+1), false},
		{CheckWorker, "w-1", true},
		{CheckWorker, "host.1", true},
		{CheckWorker, "w:1", false},
		{CheckWorker, "w*", false},
		{CheckQueue, "a b", true},
		{CheckFunc, "score", true},
		{CheckFunc, "a\tb", false},
	} {
		if err := c.check(c.name); (err == nil) != c.ok {
			t.Errorf("%q: %v, want ok %v", c.name, err, c.ok)
		}
	}
}

func TestGlob(t *testing.T) {
	for in, want := range map[string]string{"abc": "abc", "a*": `a\*`, "a?c": `a\?c`, "a[b]c": `a\[b\]c`, `a\b`: `a\\b`} {
		if got := Glob(in); got != want {
			t.Errorf("Glob(%q) = %q, want %q", in, got, want)
		}
	}
	if got := QueuesPattern("a*"); got != `a\*:{*}:*` {
		t.Errorf("QueuesPattern: %q", got)
	}
}
