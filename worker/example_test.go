package worker_test

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/redmap/redmap/connect"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// Upper is registered on the worker by name; a manager calls it by the same
// definition.
var Upper = redmap.Func("upper", func(_ context.Context, s string) (string, error) {
	return strings.ToUpper(s), nil
})

// A worker serves the functions it registered until its context ends, then
// finishes what it runs and returns. (A worker program can be one call:
// worker.Main(os.Args[1:], Upper).)
func ExampleWorker_Run() {
	rdb, err := connect.URL(os.Getenv("REDIS_URL"))
	if err != nil {
		panic(err)
	}
	defer rdb.Close()

	w, err := worker.New(rdb, worker.Options{Queue: "example-worker", Concurrency: 4})
	if err != nil {
		panic(err)
	}
	if err := w.Register(Upper); err != nil {
		panic(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()

	m, _ := manager.New(rdb, manager.Options{Queue: "example-worker"})
	defer m.Close()
	ys, err := manager.Map(context.Background(), m, Upper, []string{"ada", "grace"})
	fmt.Println(ys, err)

	stop()
	fmt.Println("worker stopped:", <-ran)
	// Output:
	// [ADA GRACE] <nil>
	// worker stopped: <nil>
}
