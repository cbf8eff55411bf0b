package manager_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/redmap/redmap"
)

// traced doubles x in about 5 ms, logging through the worker's logger; it
// fails on a negative x, and on 1000 in a worker started with REDMAP_BLOCK
// it blocks until its worker is killed.
var traced = redmap.Func("traced", func(ctx context.Context, x int) (int, error) {
	redmap.Logger(ctx).InfoContext(ctx, "doubling", "x", x)
	time.Sleep(5 * time.Millisecond)
	if x < 0 {
		return 0, fmt.Errorf("negative input %d", x)
	}
	if x == 1000 && os.Getenv("REDMAP_BLOCK") != "" {
		fmt.Println("blocking")
		select {}
	}
	return 2 * x, nil
})

// traceToFile returns a tracer provider writing each span to path as it
// ends, one JSON object per span (stdouttrace).
func traceToFile(path string) (*sdktrace.TracerProvider, func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, err
	}
	exp, err := stdouttrace.New(stdouttrace.WithWriter(f))
	if err != nil {
		return nil, nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	return tp, func() { _ = tp.Shutdown(context.Background()); f.Close() }, nil
}
