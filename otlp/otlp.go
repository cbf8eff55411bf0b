// Package otlp installs an OpenTelemetry tracer provider that exports spans
// over OTLP/HTTP when the program's environment asks for it, as
// OpenTelemetry's standard variables say: OTEL_EXPORTER_OTLP_ENDPOINT (or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), with OTEL_EXPORTER_OTLP_HEADERS,
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES read as usual. worker.Main
// calls it; a manager program calls it at its start (the examples do).
//
// The library's other packages use the OpenTelemetry API only; this one is
// where an exporter is linked in.
package otlp

import (
	"context"
	"fmt"
	"os"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
)

// Enabled reports whether the environment names an OTLP endpoint for traces.
func Enabled() bool {
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Setup installs, if Enabled, a global tracer provider exporting over
// OTLP/HTTP in batches, and the W3C trace context propagator, with service
// as the service name unless OTEL_SERVICE_NAME says otherwise. It returns
// the function that flushes and shuts the provider down (call it before the
// program exits), and installs nothing, returning a no-op, if the
// environment names no endpoint.
func Setup(ctx context.Context, service string) (shutdown func(context.Context) error, err error) {
	if !Enabled() {
		return func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("otlp: exporter: %w", err)
	}
	// resource.Default reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES;
	// service replaces only its default name ("unknown_service:<program>").
	res := resource.Default()
	if os.Getenv("OTEL_SERVICE_NAME") == "" {
		if r, err := resource.Merge(res, resource.NewSchemaless(semconv.ServiceName(service))); err == nil {
			res = r
		}
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return tp.Shutdown, nil
}
