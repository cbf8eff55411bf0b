package main

import (
	"os"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// tracedEnv, set in the bench process by -traced, is inherited by its
// worker processes: each installs the same tracer provider.
const tracedEnv = "REDMAP_BENCH_TRACED"

// traceEverything installs, if -traced asked for it (here or in the parent
// bench process), a global tracer provider that samples every batch and
// exports its spans in batches to an exporter that drops them: the cost of
// tracing on, without a collector's.
func traceEverything(on bool) {
	if on {
		os.Setenv(tracedEnv, "1")
	}
	if os.Getenv(tracedEnv) == "" {
		return
	}
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter())))
}
