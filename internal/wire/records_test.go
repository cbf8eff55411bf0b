package wire

import "testing"

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
// error trackers group: retries, numbers, ids, quoted strings and paths.
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
	} {
		if got := Fingerprint(c.msg); got != c.want {
			t.Errorf("Fingerprint(%q) = %q, want %q", c.msg, got, c.want)
		}
	}
}
