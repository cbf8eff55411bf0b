package redisbroker_test

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/redisbroker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/redistest"
)

var cpuField = regexp.MustCompile(`used_cpu_(?:sys|user):([0-9.]+)`)

// redisCPU is the CPU the server has used so far.
func redisCPU(b *testing.B, c *redis.Client) time.Duration {
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var s float64
	for _, m := range cpuField.FindAllStringSubmatch(info, -1) {
		v, _ := strconv.ParseFloat(m[1], 64)
		s += v
	}
	return time.Duration(s * float64(time.Second))
}

// BenchmarkTakeFinish measures what Redis spends on the two calls every task
// makes, alone on a quiet server: a take of k queued tasks (one lane, the
// default ring) and the finish of what it took, one worker, in Redis CPU
// per call (redis-µs/take, redis-µs/finish), beside a PING's (redis-µs/ping,
// the round trip's own part on this machine). b.N batches are submitted
// first, outside the figures. For the instructions of one call, run the
// server under callgrind (docs/performance.md).
func BenchmarkTakeFinish(b *testing.B) {
	for _, k := range []int{1, 8} {
		b.Run("tasks="+strconv.Itoa(k), func(b *testing.B) {
			ctx := context.Background()
			c := redistest.Shared(b).Client(b)
			r := redisbroker.New(c, "redmap", redistest.Queue(b))
			serves := []string{lane.Calls}
			// Phases, each measured whole: b.N batches of k tasks submitted,
			// then taken, then finished, then as many PINGs.
			var seq uint64
			var count int64
			for b.Loop() {
				var tasks []wire.Task
				for range k {
					seq++
					tasks = append(tasks, wire.Task{ID: id.TaskIn(mid, seq, 1, 1, 3, 3), Payload: []byte("payload")})
				}
				got, err := r.Submit(ctx, &broker.SubmitParams{Manager: mid, Lane: lane, Tasks: tasks, TTL: time.Hour, Expect: wire.Expect{Count: count, Epoch: "e1"}})
				if err != nil || !got.Intact {
					b.Fatalf("submit: %+v, %v", got, err)
				}
				count = got.Count
			}
			done := make([][]wire.Done, 0, b.N)
			c0 := redisCPU(b, c)
			for range b.N {
				t, err := r.Take(ctx, &broker.TakeParams{Worker: "w1", Max: k, Room: k, Lease: time.Minute, Holding: 1, Shards: 1, Serves: serves})
				if err != nil || len(t.Taken) != k {
					b.Fatalf("take: %+v, %v", t, err)
				}
				d := make([]wire.Done, 0, k)
				for _, x := range t.Taken {
					d = append(d, wire.Done{ID: x.ID, Result: []byte("r")})
				}
				done = append(done, d)
			}
			c1 := redisCPU(b, c)
			for _, d := range done {
				f, err := r.Finish(ctx, &broker.FinishParams{Worker: "w1", Done: d})
				if err != nil || f.Delivered != k {
					b.Fatalf("finish: %+v, %v", f, err)
				}
			}
			c2 := redisCPU(b, c)
			for range b.N {
				if err := c.Ping(ctx).Err(); err != nil {
					b.Fatal(err)
				}
			}
			c3 := redisCPU(b, c)
			took, finished, pinged := c1-c0, c2-c1, c3-c2
			n := float64(b.N)
			b.ReportMetric(float64(took.Microseconds())/n, "redis-µs/take")
			b.ReportMetric(float64(finished.Microseconds())/n, "redis-µs/finish")
			b.ReportMetric(float64(pinged.Microseconds())/n, "redis-µs/ping")
		})
	}
}
