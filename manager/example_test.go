package manager_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/redistest"
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

func ExampleMap() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Addr()})
	defer rdb.Close()

	// The worker side, usually another program on another machine.
	w, _ := worker.New(rdb, worker.Options{Queue: "example"})
	_ = w.Handle(Half)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go w.Run(wctx)

	// The manager side.
	m, _ := manager.New(rdb, manager.Options{Queue: "example"})
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
