package backoff

import (
	"context"
	"testing"
	"time"
)

func TestNextDoublesCapsAndJitters(t *testing.T) {
	var b Backoff
	want := []time.Duration{50, 100, 200, 400, 800, 1600, 2000, 2000}
	distinct := map[time.Duration]bool{}
	for i, w := range want {
		w *= time.Millisecond
		got := b.Next()
		if got < w*8/10 || got > w*12/10 {
			t.Fatalf("delay %d: %v, want within 20%% of %v", i, got, w)
		}
		distinct[got] = true
	}
	if len(distinct) < 4 {
		t.Fatalf("delays %v: no jitter", distinct)
	}
	b.Reset()
	if got := b.Next(); got > 60*time.Millisecond {
		t.Fatalf("after Reset: %v, want about 50ms", got)
	}
}

func TestWaitStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b := Backoff{Min: time.Hour, Max: time.Hour}
	if b.Wait(ctx) {
		t.Fatal("Wait returned true on an ended context")
	}
}
