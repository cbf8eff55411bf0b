package keys

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxName caps the length of a queue, worker or function name, in bytes.
const MaxName = 200

// CheckQueue says what is wrong with queue as a queue's name, or nil: the
// one check of a queue name for the library (manager.Options and
// worker.Options), the CLI and the dashboard alike. A name is 1 to MaxName
// bytes of printable UTF-8 (spaces allowed, no tab or newline) without '{'
// or '}' (they delimit its Cluster hash tag) or '#' (it names the shards of a queue). Glob characters (* ? [ ])
// are allowed: every pattern built from a name escapes them (Glob).
func CheckQueue(queue string) error {
	if err := checkName("queue name", queue); err != nil {
		return err
	}
	switch {
	case strings.ContainsAny(queue, "{}"):
		return fmt.Errorf("queue name %q contains '{' or '}', which delimit its Cluster hash tag", queue)
	case strings.Contains(queue, ShardSep):
		return fmt.Errorf("queue name %q contains '#', which names the shards of a queue", queue)
	case strings.Contains(queue, PartitionSep):
		return fmt.Errorf("queue name %q contains '%%', which names the partitions of a map/reduce by key", queue)
	}
	return nil
}

// CheckWorker says what is wrong with id as a worker's id, or nil: 1 to 64
// letters, digits, '_', '.' or '-'.
func CheckWorker(id string) error {
	if !validWorker.MatchString(id) {
		return fmt.Errorf("worker id %q: want 1 to 64 letters, digits, '_', '.' or '-'", id)
	}
	return nil
}

var validWorker = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// CheckFunc says what is wrong with name as a function's registered name,
// or nil: 1 to MaxName bytes of printable UTF-8 (no tab: it separates the
// fields of a failure group).
func CheckFunc(name string) error { return checkName("function name", name) }

// CheckDurable checks a durable batch's name (manager.Durable) as CheckFunc
// does a function's: printable UTF-8, not empty, at most MaxName bytes.
func CheckDurable(name string) error { return checkName("durable batch name", name) }

func checkName(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%s is empty", what)
	case len(s) > MaxName:
		return fmt.Errorf("%s %.40q… is %d bytes, above the limit of %d", what, s, len(s), MaxName)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s %q is not valid UTF-8", what, s)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("%s %q contains a character that does not print (%U)", what, s, r)
		}
	}
	return nil
}

// Glob escapes s for a Redis glob pattern (SCAN MATCH, KEYS): '*', '?',
// '[', ']' and '\' match only themselves.
func Glob(s string) string {
	if !strings.ContainsAny(s, `*?[]\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// QueuesPattern matches a key of every queue under prefix (and the index
// of queues, QueueIndex).
func QueuesPattern(prefix string) string { return Glob(prefix) + ":{*}:*" }
