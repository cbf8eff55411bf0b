package main

import (
	"testing"
	"time"
)

// Every command writes a duration one way, the dashboard's (issue 40:
// workers printed FOR 2m32.3s beside HEARTBEAT 152.3s), and a rate with
// the precision it needs (0.7/s printed as 1).
func TestDurationAndRateFormats(t *testing.T) {
	for d, want := range map[time.Duration]string{
		300 * time.Millisecond:    "0.3s",
		4200 * time.Millisecond:   "4.2s",
		42 * time.Second:          "42s",
		152300 * time.Millisecond: "2m32s",
		65 * time.Minute:          "1h05m",
		-time.Second:              "-",
	} {
		if got := dur(d); got != want {
			t.Errorf("dur(%v) = %q, want %q", d, got, want)
		}
	}
	for r, want := range map[float64]string{0: "0", 0.7: "0.70", 3.25: "3.2", 12.6: "13", 2932886: "2932886"} {
		if got := rate(r); got != want {
			t.Errorf("rate(%v) = %q, want %q", r, got, want)
		}
	}
}
