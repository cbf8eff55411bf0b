package connect

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"
)

// RouteLogs sends go-redis's own log lines (the dial failures it
// retries, pool warnings), which it otherwise prints on stderr through the
// standard log package, to log at debug level. go-redis has one logger per
// process, so a program calls this, once; redmap's library code never does
// it on the program's behalf. worker.Main and the redmap CLI call it.
func RouteLogs(log *slog.Logger) { redis.SetLogger(redisLog{log}) }

type redisLog struct{ log *slog.Logger }

// Printf logs one line of go-redis's at debug level.
func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, fmt.Sprintf(format, v...), "source", "go-redis")
}
