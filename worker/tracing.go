package worker

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/tracing"
)

// Tracing: a task whose envelope carries its batch's trace context runs in
// a span of its own, a child of the batch's span ("process <queue>"),
// after a "receive <queue>" span from its take to the start of its run (its
// time in the worker's prefetch), which says the take happened even if the
// run never ends (its worker killed). A task that carries nothing costs
// nothing here.

// startSpan starts the spans of traced task t (decoded as task) and returns
// ctx with the run's.
func (w *Worker) startSpan(ctx context.Context, t wire.Taken, task *codec.Task) (context.Context, trace.Span) {
	tracer := w.tracer
	parent := tracing.Extract(ctx, task.Trace)
	attrs := []attribute.KeyValue{tracing.System,
		tracing.MessagingDestination.String(w.opts.Queue),
		tracing.MessagingMessageID.String(t.ID),
		tracing.MessagingClientID.String(w.opts.ID),
		tracing.Worker.String(w.opts.ID),
		tracing.Function.String(task.Func),
		tracing.Elements.Int(task.Count),
		tracing.Attempt.Int(t.Attempt + 1), // the take's count is 0 at the first
	}
	if b := id.BatchOf(t.ID); b != "" {
		attrs = append(attrs, tracing.Batch.String(b))
	}
	taken := t.At
	if taken.IsZero() {
		taken = time.Now()
	}
	if task.Sent > 0 {
		// By two clocks, the manager's and this machine's: skew shows here.
		wait := taken.Sub(time.UnixMicro(task.Sent))
		attrs = append(attrs, tracing.QueueWait.Float64(float64(wait.Microseconds())/1000))
	}
	_, recv := tracer.Start(parent, "receive "+w.opts.Queue, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithTimestamp(taken), trace.WithAttributes(append(attrs,
			tracing.MessagingOperationType.String("receive"), tracing.MessagingOperationName.String("take"))...))
	recv.End()
	ctx, span := tracer.Start(parent, "process "+w.opts.Queue, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(append(attrs,
			tracing.MessagingOperationType.String("process"), tracing.MessagingOperationName.String("run"))...))
	if t.HeldBack > 0 {
		span.AddEvent("limit wait", trace.WithTimestamp(taken.Add(-t.HeldBack)), trace.WithAttributes(
			tracing.LimitWait.Float64(float64(t.HeldBack.Microseconds())/1000),
			tracing.Reason.String("its function's fleet-wide limit (rate or concurrency) held it back at the head of its queue")))
	}
	if t.Attempt > 0 {
		span.AddEvent("requeued", trace.WithAttributes(tracing.Attempt.Int(t.Attempt+1),
			tracing.Reason.String("an earlier attempt was lost: its worker died or stalled past its lease")))
	}
	return ctx, span
}

// retryEvent returns count (Policy.OnRetry) that also adds a "retry" event
// to span.
func retryEvent(span trace.Span, count func(int, int, *codec.Failure)) func(int, int, *codec.Failure) {
	return func(i, attempt int, f *codec.Failure) {
		count(i, attempt, f)
		span.AddEvent("retry", trace.WithAttributes(tracing.Index.Int(i), tracing.Attempt.Int(attempt),
			tracing.Kind.String(f.Kind.String()), tracing.Reason.String(f.Msg)))
	}
}

// waitEvent returns wait (Policy.OnWait) that also adds a "retry after"
// event to span.
func waitEvent(span trace.Span, wait func(int, time.Duration) time.Duration) func(int, time.Duration) time.Duration {
	return func(i int, d time.Duration) time.Duration {
		d = wait(i, d)
		span.AddEvent("retry after", trace.WithAttributes(tracing.Index.Int(i),
			tracing.LimitWait.Float64(float64(d.Microseconds())/1000),
			tracing.Reason.String("the function returned redmap.RetryAfter: its service asked for a pause")))
		return d
	}
}

// endSpan ends a task's span: an error status naming the first failure and
// its kind if any element (or the whole task) failed.
func endSpan(span trace.Span, count int, fails []codec.Failure) {
	if len(fails) > 0 && span.IsRecording() {
		f := fails[0]
		failed := 0
		for _, g := range fails {
			failed += g.Last() - g.Index + 1
		}
		if f.Index == -1 {
			failed = count
		}
		span.SetAttributes(tracing.Failed.Int(failed), tracing.Kind.String(f.Kind.String()))
		span.SetStatus(codes.Error, f.Kind.String()+": "+f.Msg)
	}
	span.End()
}
