package idemotel_test

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemotel"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/idemtest"
)

// The cost of tracing: the middleware on the memory store with no Tracer
// ("off") and with idemotel on a real SDK that samples every span and
// exports them, in batches as a service does, to an exporter that drops
// them ("on"), side by side in one
// run. Besides ns/op, each reports cpu-ns/op, the CPU time of the whole
// process (garbage collection included) per request, which a machine
// shared with other work inflates less than the elapsed time.
//
//	go test -run '^$' -bench Tracing -benchmem -count 5 .
func BenchmarkTracing(b *testing.B) {
	for _, step := range []string{"new-key", "replay"} {
		for _, on := range []bool{false, true} {
			name := step + "/off"
			if on {
				name = step + "/on"
			}
			b.Run(name, func(b *testing.B) { benchTracing(b, step == "replay", on) })
		}
	}
}

// dropExporter is a span exporter that drops every span.
type dropExporter struct{}

func (dropExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (dropExporter) Shutdown(context.Context) error                             { return nil }

func benchTracing(b *testing.B, replay, on bool) {
	store := idemtest.NewMemoryStore()
	client := "client-0"
	cfg := &idem.Config{
		ClientID: func(*http.Request) (string, bool) { return client, true },
		Logger:   quiet,
	}
	if on {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(dropExporter{}), sdktrace.WithSampler(sdktrace.AlwaysSample()))
		b.Cleanup(func() { tp.Shutdown(context.Background()) })
		tr, err := idemotel.New(&idemotel.Config{TracerProvider: tp})
		if err != nil {
			b.Fatal(err)
		}
		cfg.Tracer = tr
	}
	mw, err := idem.New(store, cfg)
	if err != nil {
		b.Fatal(err)
	}
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"pay_0042","status":"succeeded","amount":12500,"currency":"EUR"}`)
	}))
	const batch = 64 // keys before a purge, as the root package's benchmark keeps the store small
	keys := make([]string, batch)
	for i := range keys {
		keys[i] = `"key-` + strconv.Itoa(i) + `"`
	}
	if replay {
		if w := post(h, keys[0], payment); w.Code != http.StatusCreated {
			b.Fatal(w.Code)
		}
	}
	purge := idemstore.PurgeParams{Before: time.Now().Add(time.Hour)}
	b.ReportAllocs()
	b.ResetTimer()
	start, _ := processCPU()
	for i := range b.N {
		key := keys[0]
		if !replay {
			if i > 0 && i%batch == 0 {
				if _, err := store.Purge(context.Background(), purge); err != nil {
					b.Fatal(err)
				}
				client = "client-" + strconv.Itoa(i)
			}
			key = keys[i%batch]
		}
		w := post(h, key, payment)
		if w.Code != http.StatusCreated || (w.Header().Get(idem.HeaderReplayed) == "true") != replay {
			b.Fatalf("%d %s", w.Code, strings.TrimSpace(w.Body.String()))
		}
	}
	if end, ok := processCPU(); ok {
		b.ReportMetric(float64(end-start)/float64(b.N), "cpu-ns/op")
	}
}
