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
