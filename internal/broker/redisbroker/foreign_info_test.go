package redisbroker

import (
	"context"
	"testing"
	"time"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/keys"
)

// Foreign data over a worker's info hash, or over the queue's workers set,
// stops neither the served check of managers nor the worker's heartbeat,
// which sets the key aside and writes it again.
func TestHeartbeatAndServedPastForeignData(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	wid := "w1"
	beat := func() {
		t.Helper()
		if _, err := f.r.Heartbeat(ctx, &broker.HeartbeatParams{Worker: wid, Lease: time.Minute, Info: &wire.WorkerInfo{Host: "h", PID: 1, Serves: []string{"f\tsig"}}}); err != nil {
			t.Fatalf("heartbeat: %v", err)
		}
	}
	beat()
	for _, key := range []string{keys.WorkerInfo("rm", f.queue, wid), keys.Workers("rm", f.queue)} {
		if err := f.c.Set(ctx, key, "foreign", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := f.r.Served(ctx, &broker.ServedParams{Calls: []string{"f\tsig"}}); err != nil {
			t.Fatalf("served with foreign data over %s: %v", key, err)
		}
		beat()
		got, err := f.r.Served(ctx, &broker.ServedParams{Calls: []string{"f\tsig"}})
		if err != nil || len(got) != 1 || got[0].Code != wire.ServedBy {
			t.Fatalf("served after the heartbeat past foreign data over %s: %+v, %v; want served", key, got, err)
		}
	}
}

// Foreign data over a worker's bell stops neither its wait nor its take:
// the bell is set aside and the tasks come; over a durable batch's claim or
// the queue's list of durable batches, a claim is taken all the same.
func TestBellAndClaimPastForeignData(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	bell := keys.Bell("rm", f.queue, "w1")
	if err := f.c.Set(ctx, bell, "foreign", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.r.WaitBell(ctx, &broker.WaitBellParams{Worker: "w1", Timeout: time.Second}); err != nil {
		t.Fatalf("WaitBell on a foreign bell: %v", err)
	}
	ids := f.submit(t, "", 2)
	if err := f.c.Set(ctx, bell, "foreign", 0).Err(); err != nil {
		t.Fatal(err)
	}
	taken, _, err := takeOf(f.r.WaitTake(ctx, &broker.TakeParams{Worker: "w1", Max: 4, Room: 4, Lease: time.Minute, Wait: time.Second, Serves: serves}))
	if err != nil || len(taken) != 2 || taken[0].ID != ids[0] {
		t.Fatalf("WaitTake on a foreign bell: %+v, %v; want the 2 tasks %v", taken, err, ids)
	}
	owner := id.Durable("spoiled")
	claimKey, durables := keys.Claim("rm", f.queue, owner), keys.Durables("rm", f.queue)
	for _, key := range []string{claimKey, durables} {
		var err error
		if key == claimKey {
			err = f.c.HSet(ctx, key, "x", "y").Err() // a hash where a string is read
		} else {
			err = f.c.Set(ctx, key, "foreign", 0).Err()
		}
		if err != nil {
			t.Fatal(err)
		}
		h := wire.Holder{Manager: id.New(), Host: "a", PID: 1, Since: 100}
		got, err := f.r.Claim(ctx, &wire.Claim{Owner: owner, Name: "spoiled", Holder: h, Lease: time.Minute, TTL: time.Hour})
		if err != nil || !got.Held {
			t.Fatalf("a claim with foreign data over %s: %+v, %v; want it held", key, got, err)
		}
		f.c.Del(ctx, claimKey, keys.Fence("rm", f.queue, owner))
	}
}
