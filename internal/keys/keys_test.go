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
	if q, i := SplitShard("q#3.17"); q != "q" || i != 3 {
		t.Errorf("SplitShard(q#3.17) = %q, %d, want q, 3", q, i)
	}
	if ShardName("q", 3, 17) != "q#3.17" || ShardName("q", 0, 5) != "q" {
		t.Error("ShardName")
	}
	if q, i := SplitShard("q#x"); q != "q#x" || i != 0 {
		t.Errorf("SplitShard(q#x) = %q, %d: not a shard's name", q, i)
	}
	if Base("p", Shard("q", 1)) == Base("p", "q") {
		t.Error("shards 0 and 1 share a key base")
	}
}

// The examples of the Redis Cluster specification.
func TestSlot(t *testing.T) {
	for key, want := range map[string]int{
		"123456789":            0x31C3, // CRC16 of the spec's check string
		"{user1000}.following": Slot("user1000"),
		"foo{{bar}}zap":        Slot("{bar"),
		"":                     0,
	} {
		if got := Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
	if Slot("foo{}{bar}") == Slot("bar") {
		t.Error("an empty first tag must not fall through to the second")
	}
}
