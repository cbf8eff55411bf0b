package inspect

import "testing"

// The recent rate counts from the first bucket with elements, so a queue
// that just began shows its rate; an idle one shows 0.
func TestRecentRate(t *testing.T) {
	tp := make([]int64, 180)
	if r := recentRate(tp, 0); r != 0 {
		t.Fatalf("idle: %v", r)
	}
	tp[179] = 500 // 500 elements in the current bucket, 2.5 s into it
	if r := recentRate(tp, 2499); r != 200 {
		t.Fatalf("just begun: %v, want 200/s", r)
	}
	for i := range tp {
		tp[i] = 50 // 10/s for 15 minutes
	}
	if r := recentRate(tp, 4999); r != 10 {
		t.Fatalf("steady: %v, want 10/s", r)
	}
	// A burst of 4 s after 10 quiet minutes counts over the whole minute:
	// 60,000 elements are 1,000/s over it, not 12,000/s over its bucket.
	clear(tp)
	tp[0] = 1
	tp[179] = 60_000
	if r := recentRate(tp, 4999); r != 1000 {
		t.Fatalf("a burst after a quiet spell: %v, want 1000/s", r)
	}
	// Over exactly 60 s, whenever in its bucket the minute ends: 6,000
	// elements 20 s ago, 1 s into the current bucket, are 100/s (the
	// minute's first 11 whole buckets and the current second made 56 s:
	// 107/s). The bucket the minute began in counts for its share.
	clear(tp)
	tp[0], tp[175] = 1, 6_000
	if r := recentRate(tp, 999); r != 100 {
		t.Fatalf("a burst 20 s ago, 1 s into the bucket: %v, want 100/s", r)
	}
	tp[167] = 600 // the bucket the minute began in: 4 of its 5 s are in it
	if r := recentRate(tp, 999); r != 108 {
		t.Fatalf("with 600 in the bucket the minute began in: %v, want 108/s", r)
	}
}
