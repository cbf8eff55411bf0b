package manager

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/redmap/redmap/internal/config"
	"github.com/redmap/redmap/internal/keys"
)

// Defaults for the zero fields of Options.
const (
	DefaultPrefix       = config.DefaultPrefix
	DefaultKeyTTL       = time.Minute
	DefaultDurableTTL   = 24 * time.Hour
	DefaultPoll         = time.Second
	DefaultMaxInputSize = 16 << 20
	DefaultMaxFrame     = config.DefaultMaxFrame
	DefaultRedisTimeout = 30 * time.Second
	// DefaultNoWorkerTimeout is how long a batch waits for a live worker of
	// its function when Options.NoWorkerTimeout is zero.
	DefaultNoWorkerTimeout = time.Minute
	// DefaultHistory and DefaultHistoryAge bound the queue's history of
	// ended batches when Options.History and HistoryAge are zero: the last
	// 1,000 batches, none older than 24 hours.
	DefaultHistory    = keys.DefaultHistory
	DefaultHistoryAge = keys.DefaultHistoryAge
)

// Options configure a Manager. The zero value of each field means its default.
type Options struct {
	// Queue is the queue to submit to. Required; must not contain '{', '}' or '#'.
	Queue string
	// Prefix of every Redis key. Default DefaultPrefix.
	Prefix string
	// KeyTTL is how long the manager's task set and result list outlive it if
	// it dies; it renews them every KeyTTL/3 while it lives. Default DefaultKeyTTL.
	KeyTTL time.Duration
	// DurableTTL is how long a durable batch (Durable) stays in Redis after
	// the last time a manager held it: its queued tasks, the results its
	// workers delivered and its constant. Default DefaultDurableTTL.
	DurableTTL time.Duration
	// Poll is how often the manager reconciles (reaps dead workers, checks for
	// lost data) while results flow. When none come, it blocks for at least a
	// second between checks (go-redis's shortest blocking timeout). Default
	// DefaultPoll.
	Poll time.Duration
	// MaxInputSize caps the encoded size of one input element, in bytes; Submit
	// refuses a larger one with ErrTooLarge. Default DefaultMaxInputSize.
	MaxInputSize int
	// MaxFrame caps the size of a result read from Redis, in bytes. Default
	// DefaultMaxFrame.
	MaxFrame int
	// RedisTimeout is how long Redis may stay unreachable before the elements
	// still outstanding fail with ErrUnavailable. Default DefaultRedisTimeout.
	RedisTimeout time.Duration
	// NoWorkerTimeout is how long a batch of the public queue may wait while
	// no live worker of the queue has registered its function: the manager
	// checks every Poll, warns through Logger (and in Batch.Progress and
	// redmap batches) at once, and once the wait has lasted NoWorkerTimeout,
	// fails the batch's elements still waiting with ErrNoWorker. Negative:
	// warn, but wait for ever. Default DefaultNoWorkerTimeout.
	NoWorkerTimeout time.Duration
	// PartSize is the size of the parts constant data is stored in, in
	// bytes. Default cache.DefaultPartSize (1 MiB).
	PartSize int
	// Shards spreads the manager's tasks over that many shards of the
	// queue, each a queue of its own in Redis under its own hash tag
	// ("<queue>", "<queue>#1", ...; on a Cluster, names whose slots are on
	// different masters, as many as there are), so that one batch uses as
	// many masters' cores. Consecutive chunks go to consecutive
	// shards; each shard has its own task set, result list and collector,
	// and every guarantee holds per shard. Workers read the count from
	// Redis and serve every shard (worker.Options need not change). On one
	// Redis server shards gain nothing. Default 1, at most MaxShards.
	Shards int
	// History is how many ended batches the queue's history keeps (redmap
	// batches -all, the dashboard): each batch's final record (function,
	// counts, failures by cause, outcome) is written there before Wait,
	// Map or Close return, in one script call with those of other batches
	// that ended meanwhile (one round trip added to a batch's end). The
	// excess over History is trimmed once it reaches 1%. The queue keeps
	// the bounds of the manager that wrote last. Negative: this manager writes no record. Default
	// DefaultHistory.
	History int
	// HistoryAge is the age past which a batch leaves the history. Default
	// DefaultHistoryAge.
	HistoryAge time.Duration
	// Logger receives the manager's logs. Default: slog.Default() as it is
	// when New is called, at LevelWarn and above only, so that what needs
	// a person reaches stderr with no setup: a batch that waits for a
	// worker and why, workers lost and their tasks requeued, Redis calls
	// retried, a refused type. To silence the manager, set
	// Logger: slog.New(slog.DiscardHandler).
	Logger *slog.Logger
	// TracerProvider traces batches with OpenTelemetry: each batch gets a
	// span, and its tasks carry the span's trace context to the workers,
	// whose task spans join the trace (README "Tracing"). A batch is traced
	// only when the caller's context carries a span or the provider
	// samples a new trace. Default: the global provider (otel.SetTracerProvider),
	// a no-op unless the program installed one.
	TracerProvider trace.TracerProvider
}

// MaxShards caps Options.Shards.
const MaxShards = keys.MaxShards

func (o Options) withDefaults() (Options, error) {
	shared := config.Shared{Queue: o.Queue, Prefix: o.Prefix, MaxFrame: o.MaxFrame}
	if err := shared.Resolve("manager"); err != nil {
		return o, err
	}
	o.Prefix, o.MaxFrame = shared.Prefix, shared.MaxFrame
	switch {
	case o.KeyTTL < 0:
		return o, fmt.Errorf("manager: Options.KeyTTL %v is negative", o.KeyTTL)
	case o.KeyTTL > 0 && o.KeyTTL < 3*time.Second:
		return o, fmt.Errorf("manager: Options.KeyTTL %v is under 3s", o.KeyTTL)
	case o.DurableTTL < 0:
		return o, fmt.Errorf("manager: Options.DurableTTL %v is negative", o.DurableTTL)
	case o.DurableTTL > 0 && o.DurableTTL < 3*time.Second:
		return o, fmt.Errorf("manager: Options.DurableTTL %v is under 3s", o.DurableTTL)
	case o.Poll < 0:
		return o, fmt.Errorf("manager: Options.Poll %v is negative", o.Poll)
	case o.MaxInputSize < 0:
		return o, fmt.Errorf("manager: Options.MaxInputSize %d is negative", o.MaxInputSize)
	case o.PartSize < 0:
		return o, fmt.Errorf("manager: Options.PartSize %d is negative", o.PartSize)
	case o.RedisTimeout < 0:
		return o, fmt.Errorf("manager: Options.RedisTimeout %v is negative", o.RedisTimeout)
	case o.HistoryAge < 0:
		return o, fmt.Errorf("manager: Options.HistoryAge %v is negative", o.HistoryAge)
	case o.Shards < 0 || o.Shards > MaxShards:
		return o, fmt.Errorf("manager: Options.Shards %d is outside 0 to %d", o.Shards, MaxShards)
	}
	config.Or(&o.Shards, 1)
	config.Or(&o.KeyTTL, DefaultKeyTTL)
	config.Or(&o.DurableTTL, DefaultDurableTTL)
	config.Or(&o.Poll, DefaultPoll)
	config.Or(&o.MaxInputSize, DefaultMaxInputSize)
	config.Or(&o.RedisTimeout, DefaultRedisTimeout)
	config.Or(&o.NoWorkerTimeout, DefaultNoWorkerTimeout)
	config.Or(&o.History, DefaultHistory)
	config.Or(&o.HistoryAge, DefaultHistoryAge)
	config.Or(&o.Logger, slog.New(warnings{slog.Default().Handler()}))
	return o, nil
}

// warnings is a slog.Handler that passes on to h the records at LevelWarn
// and above: the default Logger, which speaks only when a person should act.
type warnings struct{ h slog.Handler }

// Enabled reports whether h takes l, and l is LevelWarn or above.
func (w warnings) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && w.h.Enabled(ctx, l)
}

// Handle passes r on to h.
func (w warnings) Handle(ctx context.Context, r slog.Record) error { return w.h.Handle(ctx, r) }

// WithAttrs is h's, filtered the same way.
func (w warnings) WithAttrs(as []slog.Attr) slog.Handler { return warnings{w.h.WithAttrs(as)} }

// WithGroup is h's, filtered the same way.
func (w warnings) WithGroup(name string) slog.Handler { return warnings{w.h.WithGroup(name)} }
