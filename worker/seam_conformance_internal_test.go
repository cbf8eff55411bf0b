package worker

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/keys"
	"github.com/redmap/redmap/internal/rdb"
	"github.com/redmap/redmap/internal/redistest"
	"github.com/redmap/redmap/internal/wire"
	"github.com/redmap/redmap/manager"
)

// A take's rules, as the parts' unit tests rely on them, checked against
// both sides of the seam: take.lua on a real Redis and the fake
// (fake_test.go) that the unit tests run on. A rule the fake breaks would
// make those tests prove nothing.
func TestTakeConformance(t *testing.T) {
	type take struct {
		max, holding int
		want         []int // indexes of the queued tasks the take returns, in order
		suspect      bool  // TakeEnd.Suspect
		drained      bool  // TakeEnd.Drained
	}
	cases := []struct {
		name     string
		attempts []int // the queued tasks, in order: their lost attempts (2: a suspect)
		takes    []take
	}{
		{"up to max, then drained", []int{0, 0, 0}, []take{
			{max: 2, want: []int{0, 1}},
			{max: 2, want: []int{2}, drained: true},
		}},
		{"a suspect waits for a worker holding nothing", []int{2}, []take{
			{max: 4, holding: 1, suspect: true},
			{max: 4, want: []int{0}},
		}},
		{"a suspect comes alone", []int{2, 0}, []take{
			{max: 4, want: []int{0}},
		}},
		{"a take stops at a suspect", []int{0, 2, 0}, []take{
			{max: 4, want: []int{0}, suspect: true},
		}},
		{"a task lost once is no suspect", []int{1, 0}, []take{
			{max: 4, want: []int{0, 1}, drained: true},
		}},
	}
	sides := map[string]func(t *testing.T, attempts []int) (shardRedis, []string, string, []string){
		"fake":     fakeTakeQueue,
		"take.lua": realTakeQueue,
	}
	for _, c := range cases {
		for side, queue := range sides {
			t.Run(c.name+"/"+side, func(t *testing.T) {
				s, ids, wid, serves := queue(t, c.attempts)
				for i, tk := range c.takes {
					taken, end, err := s.Take(context.Background(), &rdb.TakeParams{Worker: wid, Max: tk.max, Holding: tk.holding, Room: tk.max,
						Lease: time.Minute, Shards: 1, Serves: serves})
					if err != nil {
						t.Fatalf("take %d: %v", i, err)
					}
					var got []int
					for _, tt := range taken {
						got = append(got, slices.Index(ids, tt.ID))
					}
					if !slices.Equal(got, tk.want) || end.Suspect != tk.suspect || end.Drained != tk.drained {
						t.Errorf("take %d (max %d, holding %d): tasks %v, suspect %v, drained %v; want %v, %v, %v",
							i, tk.max, tk.holding, got, end.Suspect, end.Drained, tk.want, tk.suspect, tk.drained)
					}
				}
			})
		}
	}
}

// fakeTakeQueue queues tasks of the given attempts on a fake shard.
func fakeTakeQueue(_ *testing.T, attempts []int) (shardRedis, []string, string, []string) {
	f := newFakeShard(0, "q")
	var ids []string
	for i, a := range attempts {
		id := "m-" + strconv.Itoa(i+1)
		ids = append(ids, id)
		f.add(wire.Taken{ID: id, Attempt: a})
	}
	return f, ids, "w1", nil
}

// conformed is the function of realTakeQueue's tasks.
var conformed = redmap.Func("conformed", func(_ context.Context, x int) (int, error) { return x, nil })

// realTakeQueue submits tasks of the given attempts to a queue of a real Redis,
// one element each, through a manager, and sets their attempts as a reap
// would have.
func realTakeQueue(t *testing.T, attempts []int) (shardRedis, []string, string, []string) {
	c := redistest.Shared(t).Client(t)
	queue := redistest.Queue(t)
	ctx := context.Background()
	m, err := manager.New(c, manager.Options{Queue: queue, NoWorkerTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	b, err := manager.Submit(ctx, m, conformed, make([]int, len(attempts)), manager.ChunkSize(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Cancel)
	ids := c.LRange(ctx, keys.Lane("redmap", queue, m.ID()+".1"), 0, -1).Val() // the manager's first batch
	if len(ids) != len(attempts) {
		t.Fatalf("the lane holds %v, want %d tasks", ids, len(attempts))
	}
	for i, a := range attempts {
		if a > 0 {
			c.HSet(ctx, keys.Attempts("redmap", queue, m.ID()), ids[i], a)
		}
	}
	return rdb.New(c, "redmap", queue), ids, "w1", []string{fmt.Sprintf("%s\t%s", conformed.Name(), conformed.Signature())}
}
