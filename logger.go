package redmap

import (
	"context"
	"log/slog"

	"github.com/redmap/redmap/internal/engine"
)

// Logger returns the logger of the worker running the element ctx belongs
// to (worker.Options.Logger, with the worker's id and queue), for a function
// to log through. Log with its ...Context methods and ctx, and a line of a
// traced task carries the task span's trace_id and span_id. Outside a redmap
// element, Logger returns slog.Default().
func Logger(ctx context.Context) *slog.Logger { return engine.Logger(ctx) }
