package redmap_test

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

// Square is defined once, in a package both the manager program and the
// worker program import; the name is how a task finds it.
var Square = redmap.Func("square", func(_ context.Context, x int) (int, error) {
	if x < 0 {
		return 0, redmap.Retryable(errors.New("negative: worth another try"))
	}
	return x * x, nil
})

// A handle is registered by a worker and called through a manager.
func ExampleFunc() {
	rdb, err := connect.URL(os.Getenv("REDIS_URL"))
	if err != nil {
		panic(err)
	}
	defer rdb.Close()

	w, _ := worker.New(rdb, worker.Options{Queue: "example-func"})
	_ = w.Register(Square)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go w.Run(ctx)

	m, _ := manager.New(rdb, manager.Options{Queue: "example-func"})
	defer m.Close()
	ys, err := manager.Map(context.Background(), m, Square, []int{1, 2, 3})
	fmt.Println(ys, err)
	// Output: [1 4 9] <nil>
}
