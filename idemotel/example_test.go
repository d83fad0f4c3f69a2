package idemotel_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemotel"
	"github.com/idemkit/idem/idemtest"
)

// A payment and its retry: the retry's idem.replay span links to the
// request that ran the key.
func Example() {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	tracer, err := idemotel.New(&idemotel.Config{TracerProvider: tp})
	if err != nil {
		panic(err)
	}
	mw, err := idem.New(idemtest.NewMemoryStore(), &idem.Config{
		ClientID: func(*http.Request) (string, bool) { return "alice", true },
		Tracer:   tracer, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	for range 2 {
		r := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(`{"amount":4200}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set(idem.HeaderKey, `"order-7"`)
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	var first, replay tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		fmt.Println(s.Name)
		switch {
		case s.Name == "idem.request" && !first.SpanContext.IsValid():
			first = s
		case s.Name == "idem.replay":
			replay = s
		}
	}
	fmt.Println("replay links to the first request:", replay.Links[0].SpanContext.SpanID() == first.SpanContext.SpanID())
	// Output:
	// idem.claim
	// idem.run
	// idem.complete
	// idem.request
	// idem.claim
	// idem.replay
	// idem.request
	// replay links to the first request: true
}
