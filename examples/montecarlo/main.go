// Command montecarlo estimates pi by throwing random points at the unit
// square with manager.MapReduce: each element throws -throws points with its
// own random source (redmap.Rand, seeded from the batch's -seed and the
// element's index) and counts those inside the quarter circle; the workers
// add the counts of each chunk, the manager adds the partials. With the same
// seed the estimate is the same to the last digit, whatever the number of
// workers or the chunk size.
//
//	go run ./examples/montecarlo                     # one process, embedded Redis
//	go run ./examples/montecarlo worker              # a worker process (REDIS_URL)
//	go run ./examples/montecarlo manager [-seed S]   # the manager (REDIS_URL)
package main

import (
	"context"
	"flag"
	"fmt"
	"math"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/examples/internal/demo"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/otlp"
)

// Throw throws n points and returns how many fell inside the quarter circle.
var Throw = redmap.Func("montecarlo.throw", func(ctx context.Context, n int) (int, error) {
	r := redmap.Rand(ctx)
	in := 0
	for range n {
		x, y := r.Float64(), r.Float64()
		if x*x+y*y <= 1 {
			in++
		}
	}
	return in, nil
})

// Add adds two counts.
var Add = redmap.Reduce("montecarlo.add", func(_ context.Context, a, b int) (int, error) { return a + b, nil })

func main() {
	demo.Main("montecarlo", usage, []string{"local", "manager"}, run, Throw, Add)
}

const usage = "usage: montecarlo [local|manager] [-elements N] [-throws T] [-seed S] [-queue Q] | montecarlo worker [worker flags]"

func run(cmd string, args []string) error {
	flags := flag.NewFlagSet(cmd, flag.ContinueOnError)
	elements := flags.Int("elements", 1000, "elements (each with its own random stream)")
	throws := flags.Int("throws", 100_000, "points thrown per element")
	seed := flags.Uint64("seed", 1, "the batch's seed: the same seed, the same estimate")
	queue := flags.String("queue", "montecarlo", "queue to submit to")
	if err := flags.Parse(args); err != nil {
		return err
	}
	// Spans go to an OTLP endpoint if OTEL_EXPORTER_OTLP_ENDPOINT names
	// one (README "Tracing"); otherwise nothing is traced.
	stopTracing, err := otlp.Setup(context.Background(), "montecarlo")
	if err != nil {
		return err
	}
	defer stopTracing(context.Background())
	rdb, closeRedis, err := demo.Connect(cmd == "local")
	if err != nil {
		return err
	}
	defer closeRedis()
	if cmd == "local" {
		stopWorker, err := demo.Worker(rdb, *queue, Throw, Add)
		if err != nil {
			return err
		}
		defer stopWorker()
	}
	m, err := manager.New(rdb, manager.Options{Queue: *queue})
	if err != nil {
		return err
	}
	defer m.Close()
	xs := make([]int, *elements)
	for i := range xs {
		xs[i] = *throws
	}
	in, err := manager.MapReduce(context.Background(), m, Throw, Add, xs, manager.Seed(*seed))
	if err != nil {
		return err
	}
	total := *elements * *throws
	pi := 4 * float64(in) / float64(total)
	fmt.Printf("pi ~ %.6f (%d of %d points inside; error %.2e; seed %d)\n", pi, in, total, math.Abs(pi-math.Pi), *seed)
	return nil
}
