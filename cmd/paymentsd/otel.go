package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/idemkit/idem/idemotel"
	"github.com/idemkit/idem/internal/cmdrun"
)

// otelFlags adds the tracing flag.
func otelFlags(fs *flag.FlagSet, env *cmdrun.Env, o *options) {
	fs.StringVar(&o.otel, "otel", env.String("PAYMENTSD_OTEL", ""), "send OpenTelemetry traces of every request, resume and purge, by OTLP over HTTP, to this collector: host:port (plain HTTP, as 127.0.0.1:4318) or an http:// or https:// URL; replays, 409s and resumes link to the trace of the request that ran the key (docs/tracing.md). Empty, the default, traces nothing (env PAYMENTSD_OTEL)")
}

// otelShutdownTimeout bounds the export of the last spans at shutdown.
const otelShutdownTimeout = 5 * time.Second

// startTracing returns idem's tracer, exporting to the collector at
// addr, and the function that flushes and stops it.
func startTracing(ctx context.Context, addr string, logger *slog.Logger) (*idemotel.Tracer, func(), error) {
	opt := otlptracehttp.WithEndpoint(addr)
	insecure := true
	switch {
	case strings.HasPrefix(addr, "http://"), strings.HasPrefix(addr, "https://"):
		opt, insecure = otlptracehttp.WithEndpointURL(addr), false
	case strings.Contains(addr, "/"):
		return nil, nil, fmt.Errorf("-otel %q: want host:port or an http:// or https:// URL", addr)
	}
	opts := []otlptracehttp.Option{opt}
	if insecure {
		opts = append(opts, otlptracehttp.WithInsecure())
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("-otel: %w", err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", "paymentsd"))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	tracer, err := idemotel.New(&idemotel.Config{TracerProvider: tp})
	if err != nil {
		return nil, nil, errors.Join(err, tp.Shutdown(ctx))
	}
	stop := func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), otelShutdownTimeout)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			logger.Warn("paymentsd: the last traces were not sent to the collector", "err", err)
		}
	}
	return tracer, stop, nil
}

// traced returns h, behind idemotel.Extract when tracing is on: a
// caller's traceparent makes idem's spans part of its trace.
func traced(on bool, h http.Handler) http.Handler {
	if !on {
		return h
	}
	return idemotel.Extract(h)
}
