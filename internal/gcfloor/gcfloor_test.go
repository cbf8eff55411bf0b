package gcfloor

import (
	"os"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, headroom uint64
		floor, want    int
	}{
		{4 * mib, 32 * mib, 100, 800},
		{0, 32 * mib, 100, 3200},       // no collection yet: as if 1 MiB were live
		{1 << 10, 64 * mib, 100, 6400}, // under 1 MiB counts as 1 MiB
		{1 << 30, 32 * mib, 100, 100},  // a large heap keeps the floor
		{3 * mib, 32 * mib, 100, 1067}, // rounded up: at least the headroom
		{mib, 1 << 40, 100, maxPercent},
		{16 * mib, 32 * mib, 300, 300},
	} {
		if got := Percent(c.live, c.headroom, c.floor); got != c.want {
			t.Errorf("Percent(%d, %d, %d) = %d, want %d", c.live, c.headroom, c.floor, got, c.want)
		}
	}
}

// gogc is the collector's percent now.
func gogc() int { p, _ := read(); return p }

// await runs collections until cond holds, for up to 10 s: the tuning runs
// in a finalizer, after the cycle.
func await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s (GOGC now %d)", what, gogc())
		}
		runtime.GC()
		runtime.Gosched()
	}
}

func TestHoldRaisesAndRestores(t *testing.T) {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		t.Skip("GOGC or GOMEMLIMIT set: the package leaves the collector alone")
	}
	before := gogc()
	release := Hold(256 << 20)
	// This test's live heap is a few MiB: 256 MiB of headroom asks for
	// far more than the default.
	await(t, "percent raised", func() bool { return gogc() > 1000 })
	retained := make([]byte, 64<<20) // more live heap: a lower percent
	for i := range retained {
		retained[i] = 1
	}
	high := gogc()
	await(t, "percent lowered for a larger live heap", func() bool { return gogc() < high })
	runtime.KeepAlive(retained)
	release()
	release() // twice: once counts
	if got := gogc(); got != before {
		t.Fatalf("after release GOGC = %d, want %d as before", got, before)
	}
}

func TestProgramsOwnPercentWins(t *testing.T) {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		t.Skip("GOGC or GOMEMLIMIT set: the package leaves the collector alone")
	}
	before := gogc()
	release := Hold(256 << 20)
	defer release()
	await(t, "percent raised", func() bool { return gogc() > 1000 })
	debug.SetGCPercent(150)
	defer debug.SetGCPercent(before)
	// Give the tuner cycles to notice, then to (wrongly) retune.
	await(t, "tuning stopped", func() bool { mu.Lock(); defer mu.Unlock(); return set == 0 })
	for range 3 {
		runtime.GC()
	}
	if got := gogc(); got != 150 {
		t.Fatalf("GOGC = %d after the program set 150: the tuner overrode it", got)
	}
	release()
	if got := gogc(); got != 150 {
		t.Fatalf("GOGC = %d after release: want the program's 150 kept", got)
	}
}

func TestEnvironmentWins(t *testing.T) {
	t.Setenv("GOGC", "100")
	before := gogc()
	release := Hold(256 << 20)
	defer release()
	runtime.GC()
	mu.Lock()
	tuning := set != 0
	mu.Unlock()
	if tuning || gogc() != before {
		t.Fatalf("GOGC set in the environment, yet the tuner runs (percent %d)", gogc())
	}
}
