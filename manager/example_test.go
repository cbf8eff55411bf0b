package manager_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/redmap/redmap/connect"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// Half is shared by the manager and the worker; it refuses odd numbers.
var Half = redmap.Func("half", func(_ context.Context, x int) (int, error) {
	if x%2 != 0 {
		return 0, fmt.Errorf("%d is odd", x)
	}
	return x / 2, nil
})

// Map returns every output in input order, and a BatchError naming each
// element that failed.
func ExampleMap() {
	ctx := context.Background()
	rdb, err := connect.URL(os.Getenv("REDIS_URL"))
	if err != nil {
		panic(err)
	}
	defer rdb.Close()

	// The worker side, usually another program on another machine.
	w, _ := worker.New(rdb, worker.Options{Queue: "example-map"})
	_ = w.Register(Half)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go w.Run(wctx)

	// The manager side.
	m, _ := manager.New(rdb, manager.Options{Queue: "example-map"})
	defer m.Close()

	ys, err := manager.Map(ctx, m, Half, []int{10, 4, 7, 8})
	fmt.Println(ys)
	var be *redmap.BatchError
	if errors.As(err, &be) {
		for _, f := range be.Failed {
			fmt.Printf("element %d: %v\n", f.Index, f.Err)
		}
	}
	// Output:
	// [5 2 0 4]
	// element 2: 7 is odd
}

// Submit returns at once; the batch's results come in completion order, and
// Wait gives them in input order.
func ExampleSubmit() {
	ctx := context.Background()
	rdb, err := connect.URL(os.Getenv("REDIS_URL"))
	if err != nil {
		panic(err)
	}
	defer rdb.Close()
	w, _ := worker.New(rdb, worker.Options{Queue: "example-submit"})
	_ = w.Register(Half)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go w.Run(wctx)
	m, _ := manager.New(rdb, manager.Options{Queue: "example-submit"})
	defer m.Close()

	batch, err := manager.Submit(ctx, m, Half, []int{2, 4, 6, 8}, manager.ChunkSize(1))
	if err != nil {
		panic(err)
	}
	sum := 0
	for r := range batch.Results() {
		sum += r.Value
	}
	ys, _ := batch.Wait(ctx)
	fmt.Println(sum, ys, batch.Progress().Done)
	// Output: 10 [1 2 3 4] 4
}
