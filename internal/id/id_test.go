package id

import "testing"

func TestTaskID(t *testing.T) {
	mid := New()
	if len(mid) != 32 {
		t.Fatalf("id %q is not 128 bits in hex", mid)
	}
	if got := Manager(Task(mid, 12345)); got != mid {
		t.Fatalf("Manager = %q, want %q", got, mid)
	}
	if New() == mid {
		t.Fatal("two ids alike")
	}
}

func TestSeq(t *testing.T) {
	mid := New()
	for _, seq := range []uint64{0, 1, 35, 36, 1 << 40} {
		if got, ok := Seq(Task(mid, seq)); !ok || got != seq {
			t.Errorf("Seq(Task(%d)) = %d, %v", seq, got, ok)
		}
		if got, ok := Seq(TaskAt(mid, seq, 5, 3)); !ok || got != seq {
			t.Errorf("Seq(TaskAt(%d, priority 5)) = %d, %v", seq, got, ok)
		}
	}
	for _, bad := range []string{"", "nodash", mid + "-", mid + "-!!"} {
		if _, ok := Seq(bad); ok {
			t.Errorf("Seq(%q) found a sequence number", bad)
		}
	}
}
