package keys

import "testing"

func TestShard(t *testing.T) {
	for _, tc := range []struct {
		queue string
		i     int
		name  string
	}{{"q", 0, "q"}, {"q", 1, "q#1"}, {"squares", 12, "squares#12"}} {
		if got := Shard(tc.queue, tc.i); got != tc.name {
			t.Errorf("Shard(%q, %d) = %q, want %q", tc.queue, tc.i, got, tc.name)
		}
		if q, i := SplitShard(tc.name); q != tc.queue || i != tc.i {
			t.Errorf("SplitShard(%q) = %q, %d, want %q, %d", tc.name, q, i, tc.queue, tc.i)
		}
	}
	if q, i := SplitShard("q#x"); q != "q#x" || i != 0 {
		t.Errorf("SplitShard(q#x) = %q, %d: not a shard's name", q, i)
	}
	if Base("p", Shard("q", 1)) == Base("p", "q") {
		t.Error("shards 0 and 1 share a key base")
	}
}
