package manager

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap"
)

// A call that timed out while Redis answers (a PING does, or the call only
// waited out the client's pool) is not an outage: the shard's outage clock
// does not start, its stall does, and the stall, not the outage, ends the
// batch after RedisTimeout if no call completes. A timeout while PING fails
// too is an outage.
func TestSlowCallIsNotAnOutage(t *testing.T) {
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	for _, tc := range []struct {
		name string
		err  error // what every read and wait returns
		ping error // what PING returns
		slow bool  // whether it is a stall rather than an outage
	}{
		{"timeout, PING answers", timeout, nil, true},
		{"pool timeout", redis.ErrPoolTimeout, errFakeDown, true},
		{"timeout, PING fails", timeout, errFakeDown, false},
		{"refused connection", errFakeDown, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newTestQueue(t, 1)
			s := q.first()
			m := q.manager(t, Options{Poll: 5 * time.Millisecond, RedisTimeout: 100 * time.Millisecond})
			b, err := Submit(unitCtx(t), m, square, count(3), ChunkSize(1))
			if err != nil {
				t.Fatal(err)
			}
			s.fail("ping", tc.ping)
			s.fail("readresults", tc.err)
			s.fail("waitresults", tc.err)
			s.wake(m.ID())
			_, err = b.Wait(unitCtx(t))
			var be *redmap.BatchError
			if !errors.As(err, &be) || len(be.Failed) != 3 {
				t.Fatalf("err = %v, want each of the 3 elements failed", err)
			}
			cause := be.Failed[0]
			if !errors.Is(cause, redmap.ErrUnavailable) || errors.Is(cause, errSlow) != tc.slow {
				t.Fatalf("element 0: %v; want ErrUnavailable, saying Redis answered: %v", cause, tc.slow)
			}
			o := &m.router.first().outage
			if gone := o.length() > 0; gone == tc.slow {
				t.Fatalf("outage clock running: %v, stalled for %v; want the outage clock running: %v", gone, o.stall(), !tc.slow)
			}
		})
	}
}
