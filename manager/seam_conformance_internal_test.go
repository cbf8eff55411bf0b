package manager

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/rdb"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/internal/wire"
)

// The task set's rules, as the parts' unit tests rely on them, checked
// against both sides of the seam: submit.lua and the recoverer's scripts on
// a real Redis, and the fake (fake_test.go) the unit tests run on. A submit
// counts its tasks and says whether the set was intact (the count it
// expected, its epoch); a cancel withdraws; Missing names what is gone; a
// set Redis lost is not intact, and a recovery installs a new epoch.
func TestTaskSetConformance(t *testing.T) {
	sides := map[string]func(t *testing.T) (shardRedis, func()){
		"fake": func(t *testing.T) (shardRedis, func()) {
			f := newFakeShard(0)
			return f, f.lose
		},
		"scripts": func(t *testing.T) (shardRedis, func()) {
			srv := redistest.Start(t) // its own: the test flushes it
			r := rdb.NewShard(srv.Client(t), "redmap", redistest.Queue(t), 0)
			return r, func() { srv.Client(t).FlushAll(context.Background()) }
		},
	}
	for side, open := range sides {
		t.Run(side, func(t *testing.T) {
			t.Parallel()
			s, lose := open(t)
			ctx := context.Background()
			const mid = "m1"
			lane := wire.Lane{Name: mid + ".1", Calls: "f\tsig"}
			tasks := func(from, n int) ([]wire.Task, []string) {
				var ts []wire.Task
				var ids []string
				for seq := from; seq < from+n; seq++ {
					tid := id.TaskIn(mid, uint64(seq), 1, 1, 3, 3)
					ts = append(ts, wire.Task{ID: tid, Payload: []byte("payload")})
					ids = append(ids, tid)
				}
				return ts, ids
			}
			submit := func(step string, ts []wire.Task, exp wire.Expect, wantCount int64, wantIntact bool) {
				t.Helper()
				count, intact, err := s.Submit(ctx, mid, "", lane, ts, time.Minute, exp)
				if err != nil || count != wantCount || intact != wantIntact {
					t.Fatalf("%s: count %d, intact %v, %v; want %d, %v", step, count, intact, err, wantCount, wantIntact)
				}
			}
			state := func(step string, wantCount int64, wantEpoch string) {
				t.Helper()
				count, epoch, err := s.Submitted(ctx, mid)
				if err != nil || count != wantCount || epoch != wantEpoch {
					t.Fatalf("%s: Submitted %d %q, %v; want %d %q", step, count, epoch, err, wantCount, wantEpoch)
				}
			}

			first, ids := tasks(1, 3)
			submit("first submit", first, wire.Expect{Epoch: "e1"}, 3, true)
			state("after the first", 3, "e1")
			more, moreIDs := tasks(4, 2)
			ids = append(ids, moreIDs...)
			submit("second submit", more, wire.Expect{Count: 3, Epoch: "e1"}, 5, true)
			if err := s.Cancel(ctx, mid, ids[1:2]); err != nil {
				t.Fatal(err)
			}
			missing, count, epoch, err := s.Missing(ctx, mid, ids)
			if err != nil || !slices.Equal(missing, ids[1:2]) || count != 5 || epoch != "e1" {
				t.Fatalf("Missing after a cancel: %v %d %q, %v; want [%s] 5 \"e1\"", missing, count, epoch, err, ids[1])
			}

			lose()
			again, _ := tasks(6, 1)
			submit("submit after Redis lost the set", again, wire.Expect{Count: 5, Epoch: "e1"}, 1, false)
			recovered, _ := tasks(7, 1)
			submit("a recovery's submit", recovered, wire.Expect{Count: 1, Epoch: "e1", NewEpoch: "e2"}, 2, true)
			state("after the recovery", 2, "e2")
			submit("a submit under the old epoch", again, wire.Expect{Count: 2, Epoch: "e1"}, 3, false)
		})
	}
}
