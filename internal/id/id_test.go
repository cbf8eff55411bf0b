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

func TestLane(t *testing.T) {
	mid := New()
	for _, c := range []struct {
		tid        string
		seq        uint64
		lane       string
		priority   int
		hasManager bool
	}{
		{TaskIn(mid, 77, 5, 40, 3, 3), 77, "5", 3, true},
		{TaskIn(mid, 1<<40, 36, 1, 5, 3), 1 << 40, "10", 5, true},
		{TaskAt(mid, 9, 1, 3), 9, "", 1, true},
		{Task(mid, 9), 9, "", 3, true},
	} {
		if got := Lane(c.tid); got != c.lane {
			t.Errorf("Lane(%q) = %q, want %q", c.tid, got, c.lane)
		}
		if got, ok := Seq(c.tid); !ok || got != c.seq {
			t.Errorf("Seq(%q) = %d, %v, want %d", c.tid, got, ok, c.seq)
		}
		if got := Priority(c.tid, 3); got != c.priority {
			t.Errorf("Priority(%q) = %d, want %d", c.tid, got, c.priority)
		}
		if got := Manager(c.tid); got != mid {
			t.Errorf("Manager(%q) = %q", c.tid, got)
		}
	}
}

func TestUnsized(t *testing.T) {
	mid := New()
	for _, c := range []struct{ tid, want string }{
		{TaskIn(mid, 77, 5, 40, 3, 3), mid + "-25.5"},
		{TaskIn(mid, 77, 5, 41, 1, 3), mid + "-25.5~1"},
		{TaskAt(mid, 9, 1, 3), mid + "-9~1"},
		{Task(mid, 9), mid + "-9"},
	} {
		if got := Unsized(c.tid); got != c.want {
			t.Errorf("Unsized(%q) = %q, want %q", c.tid, got, c.want)
		}
	}
}
