// Package tracing is what the manager and the worker share to trace a batch
// with OpenTelemetry: the tracer, the attribute keys, and the trace context a
// task carries across the queue. It uses the OpenTelemetry API only; a
// program that installs no tracer provider gets its no-op, and a task of an
// untraced batch carries nothing.
package tracing

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Scope is the instrumentation scope of redmap's spans.
const Scope = "github.com/redmap/redmap"

// Tracer returns redmap's tracer from tp, or from the global provider if tp
// is nil (read when called, so a provider installed after the manager or
// worker was made is used).
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(Scope)
}

// NoSpan is the span of what is not traced: an untraced task, a batch
// not (yet) traced.
var NoSpan trace.Span = noop.Span{}

// w3c writes and reads the W3C traceparent and tracestate headers, whatever
// propagator the program installed globally: the envelope's format is fixed.
var w3c = propagation.TraceContext{}

// Inject returns the trace context of ctx's span as the envelope carries it,
// or nil if ctx has no valid span (tracing off: the task carries nothing).
func Inject(ctx context.Context) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	c := propagation.MapCarrier{}
	w3c.Inject(ctx, c)
	return c
}

// Extract returns ctx with the remote span context the envelope carried.
func Extract(ctx context.Context, carried map[string]string) context.Context {
	return w3c.Extract(ctx, propagation.MapCarrier(carried))
}

// Attribute keys. The messaging ones follow OpenTelemetry's semantic
// conventions for messaging (v1.26 and later); redmap's own are namespaced
// "redmap.".
const (
	MessagingSystem        = attribute.Key("messaging.system")
	MessagingOperationType = attribute.Key("messaging.operation.type")
	MessagingOperationName = attribute.Key("messaging.operation.name")
	MessagingDestination   = attribute.Key("messaging.destination.name")
	MessagingBatchCount    = attribute.Key("messaging.batch.message_count")
	MessagingMessageID     = attribute.Key("messaging.message.id")
	MessagingClientID      = attribute.Key("messaging.client.id")

	Function  = attribute.Key("redmap.function")
	Batch     = attribute.Key("redmap.batch.id")
	Elements  = attribute.Key("redmap.elements")
	Tasks     = attribute.Key("redmap.tasks")
	Priority  = attribute.Key("redmap.priority")
	Private   = attribute.Key("redmap.worker.private")
	Outcome   = attribute.Key("redmap.outcome")
	Done      = attribute.Key("redmap.done")
	Failed    = attribute.Key("redmap.failed")
	Attempt   = attribute.Key("redmap.attempt")
	Worker    = attribute.Key("redmap.worker.id")
	QueueWait = attribute.Key("redmap.queue_wait_ms")
	LimitWait = attribute.Key("redmap.limit_wait_ms")
	Pipeline  = attribute.Key("redmap.pipeline")
	Stage     = attribute.Key("redmap.pipeline.stage")
	Kind      = attribute.Key("redmap.error.kind")
	Index     = attribute.Key("redmap.element.index")
	Reason    = attribute.Key("redmap.reason")
)

// System is messaging.system's value: redmap is not one the conventions
// name, so it names itself, as they allow.
var System = MessagingSystem.String("redmap")

// LogHandler wraps h so that a record logged with a context that carries a
// span (slog's ...Context methods, as the worker logs while a task runs)
// gets the span's trace_id and span_id, to find the log line from a span and
// back.
func LogHandler(h slog.Handler) slog.Handler { return logHandler{h} }

type logHandler struct{ slog.Handler }

// Handle adds the ids of ctx's span, if it has one, and passes r on.
func (l logHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone()
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return l.Handler.Handle(ctx, r)
}

// WithAttrs keeps the wrapping.
func (l logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return logHandler{l.Handler.WithAttrs(as)}
}

// WithGroup keeps the wrapping.
func (l logHandler) WithGroup(name string) slog.Handler {
	return logHandler{l.Handler.WithGroup(name)}
}
