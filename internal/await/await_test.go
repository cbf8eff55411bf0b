package await

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// Until looks again at each Notify, and returns once the condition holds;
// Calls counts each call, returns the error set for it, and notifies.
func TestUntilWakesOnCalls(t *testing.T) {
	var b Broadcast
	c := Calls{Activity: &b}
	boom := errors.New("boom")
	c.SetFail("take", boom)
	var looks atomic.Int32
	go func() {
		for range 3 {
			_ = c.Call("take")
		}
	}()
	Until(t, &b, time.Minute, "three takes", func() bool { looks.Add(1); return c.Of("take") == 3 })
	if err := c.Call("take"); !errors.Is(err, boom) {
		t.Fatalf("Call: %v, want the error set", err)
	}
	c.SetFail("take", nil)
	if err := c.Call("take"); err != nil || c.Of("take") != 5 {
		t.Fatalf("Call after SetFail(nil): %v, %d calls", err, c.Of("take"))
	}
	if looks.Load() > 4 {
		t.Fatalf("Until looked %d times for 3 calls: it polls, rather than waiting", looks.Load())
	}
}
