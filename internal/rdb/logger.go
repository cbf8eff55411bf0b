package rdb

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"
)

// RouteClientLogs sends go-redis's own log lines (dial failures it retries,
// pool warnings) to log at debug level, instead of to stderr through the
// standard log package. go-redis has one logger per process, so only
// programs call this (worker.Main, the CLI, the tests), never the library on
// a user's behalf.
func RouteClientLogs(log *slog.Logger) { redis.SetLogger(clientLog{log}) }

type clientLog struct{ log *slog.Logger }

func (l clientLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, fmt.Sprintf(format, v...), "source", "go-redis")
}
