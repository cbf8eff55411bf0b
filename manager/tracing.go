package manager

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/id"
	"github.com/redmap/redmap/internal/tracing"
)

// Tracing: a batch's span is the parent of every task span its workers
// start (README "Tracing", docs/tracing.md). It begins at submit, from the
// caller's context, and ends when the batch's record is written, with the
// record's counts and outcome.

// operation names the call a batch came from, for its span.
func operation(reduce, stream bool) string {
	switch {
	case reduce && stream:
		return "MapReduceSeq"
	case reduce:
		return "MapReduce"
	case stream:
		return "SubmitSeq"
	}
	return "Map"
}

// startSpan starts b's span as a child of ctx's, and returns the trace
// context b's tasks carry: nil when the batch is not traced (no provider
// installed, or not sampled and no span to follow), so they carry nothing.
func (b *Batch[Out]) startSpan(ctx context.Context, queue string) map[string]string {
	ctx, b.span = b.env.tracer.Start(ctx, "send "+queue, trace.WithSpanKind(trace.SpanKindProducer))
	if !b.span.IsRecording() {
		// Untraced: no attributes to build. The caller's span context, if
		// a provider elsewhere made one, still travels.
		return tracing.Inject(ctx)
	}
	b.span.SetAttributes(tracing.System,
		tracing.MessagingOperationType.String("send"),
		tracing.MessagingOperationName.String(operation(b.outs.red != nil, b.stream)),
		tracing.MessagingDestination.String(queue),
		tracing.MessagingClientID.String(b.env.mid),
		tracing.Function.String(b.fn),
		tracing.Batch.String(b.id),
		tracing.Priority.Int(b.priority))
	if b.worker != "" {
		b.span.SetAttributes(tracing.Private.String(b.worker))
	}
	if b.call.Pipeline != "" {
		b.span.SetAttributes(tracing.Pipeline.String(b.call.Pipeline), tracing.Stage.String(b.call.Stage))
	}
	return tracing.Inject(ctx)
}

// startPipelineSpan starts the span of a pipeline's run on m, a child of
// ctx's, the parent of every batch span of the run: one trace of the whole
// pipeline. end ends it with the run's error, once it has a name.
func (m *Manager) startPipelineSpan(ctx context.Context) (_ context.Context, name func(string), end func(error)) {
	ctx, span := m.tracer.Start(ctx, "pipeline "+m.opts.Queue, trace.WithSpanKind(trace.SpanKindInternal))
	if !span.IsRecording() {
		return ctx, func(string) {}, func(error) { span.End() }
	}
	span.SetAttributes(tracing.System, tracing.MessagingDestination.String(m.opts.Queue), tracing.MessagingClientID.String(m.id))
	return ctx, func(n string) { span.SetAttributes(tracing.Pipeline.String(n)) }, func(err error) {
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

// endSpan ends b's span with its final record r.
func (b *Batch[Out]) endSpan(r wire.BatchRecord) {
	if !b.span.IsRecording() {
		b.span.End()
		return
	}
	b.mu.Lock()
	tasks := len(b.feed.chunks)
	b.mu.Unlock()
	b.span.SetAttributes(tracing.Elements.Int(r.Total), tracing.Tasks.Int(tasks),
		tracing.MessagingBatchCount.Int(tasks),
		tracing.Done.Int(r.Done), tracing.Failed.Int(r.Failed), tracing.Outcome.String(r.Outcome))
	switch {
	case r.Reason != "":
		b.span.SetStatus(codes.Error, r.Reason)
	case r.Failed > 0:
		b.span.SetStatus(codes.Error, fmt.Sprintf("%d of %d elements failed", r.Failed, r.Total))
	}
	b.span.End()
}

// event adds an event to b's span.
func (b *Batch[Out]) event(name string, attrs ...attribute.KeyValue) {
	b.span.AddEvent(name, trace.WithAttributes(attrs...))
}

// staleResult notes on its batch's span that a result of task tid was
// discarded: its task had its result already, or was given up. Only a
// public task's id names its batch (its lane); a batch that ended has no
// span to note it on.
func (m *Manager) staleResult(tid string, attempt int) {
	if b, ok := m.batches.get(id.BatchOf(tid)); ok {
		b.event("stale result discarded", tracing.MessagingMessageID.String(tid), tracing.Attempt.Int(attempt))
	}
}
