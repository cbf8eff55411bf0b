package manager

import (
	"testing"
	"time"
)

// Progress's rate is the recent one: after a slow start, the ETA follows
// the pace of the last rateWindow, not the average since the start (issue
// 40: an ETA of 1m16s at 16% when 2m45s were left).
func TestRecentRate(t *testing.T) {
	t0 := time.Now()
	b := &Batch[int]{batchIdentity: batchIdentity{started: t0}}
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	if r := b.recentRate(at(100), 100); r != 1 { // a slow start: 1/s since it began
		t.Fatalf("rate %v after 100 s and 100 elements, want 1/s", r)
	}
	b.recentRate(at(105), 600)
	if r := b.recentRate(at(111), 1200); r != 100 { // 1,100 elements in the last 11 s
		t.Fatalf("rate %v, want the recent 100/s", r)
	}
	if r := b.recentRate(at(200), 1200); r != 0 { // stalled for longer than the window
		t.Fatalf("rate %v after a stall, want 0", r)
	}
	for i := range 100_000 { // asked in a tight loop: the samples stay few
		b.recentRate(at(200+float64(i)/1e6), 1200+i)
	}
	if len(b.samples) > 5 {
		t.Fatalf("%d samples kept after 100,000 calls within 0.1 s, want a few", len(b.samples))
	}
}
