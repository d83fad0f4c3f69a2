package idemotel_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemotel"
	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/keyspec"
	"github.com/idemkit/idem/internal/pgtest"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		runChild()
		return
	}
	pgtest.Main(m)
}

var quiet = slog.New(slog.DiscardHandler)

// backend is a store the scenarios run on.
type backend struct {
	name string
	open func(t *testing.T) idemstore.Store
}

func backends() []backend {
	return []backend{
		{"PostgreSQL", func(t *testing.T) idemstore.Store {
			store, err := idempg.New(pgtest.NewPool(t), &idempg.Config{Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			if err := store.Migrate(context.Background()); err != nil {
				t.Fatal(err)
			}
			return store
		}},
		{"SQLite", func(t *testing.T) idemstore.Store {
			store, err := idemsqlite.Open(filepath.Join(t.TempDir(), "idem.db"), &idemsqlite.Config{Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { store.Close() })
			if err := store.Migrate(context.Background()); err != nil {
				t.Fatal(err)
			}
			return store
		}},
	}
}

// recorder is a tracer provider whose spans go to an in-memory exporter as
// each ends.
type recorder struct {
	exp *tracetest.InMemoryExporter
	tp  *sdktrace.TracerProvider
}

func newRecorder(t *testing.T) *recorder {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return &recorder{exp: exp, tp: tp}
}

// take returns the spans ended since the last call, and forgets them.
func (r *recorder) take() tracetest.SpanStubs {
	s := r.exp.GetSpans()
	r.exp.Reset()
	return s
}

func (r *recorder) tracer(t *testing.T) *idemotel.Tracer {
	tr, err := idemotel.New(&idemotel.Config{TracerProvider: r.tp})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

const (
	payment = `{"amount":4200,"currency":"eur"}`
	rawKey  = `"order-4711-secret"`
)

// post sends a payment with a key and returns the answer.
func post(h http.Handler, key, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set(idem.HeaderKey, key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestSpans runs a new key, its replay, a 422, and a 409 on PostgreSQL
// and SQLite, and checks the spans, their attributes and the replay's and
// 409's links to the trace that ran (or holds) the key.
func TestSpans(t *testing.T) {
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			t.Run("atomic", func(t *testing.T) { checkNewKeyReplayMismatch(t, be, idem.ModeAtomic) })
			t.Run("two-phase", func(t *testing.T) { checkNewKeyReplayMismatch(t, be, idem.ModeTwoPhase) })
			t.Run("InFlight", func(t *testing.T) { checkInFlight(t, be) })
		})
	}
}

func checkNewKeyReplayMismatch(t *testing.T, be backend, mode idem.Mode) {
	rec := newRecorder(t)
	store := be.open(t)
	mw, err := idem.New(store, &idem.Config{
		ClientID: func(*http.Request) (string, bool) { return "alice", true },
		Mode:     mode, Logger: quiet, Tracer: rec.tracer(t), ExposeOriginalTrace: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	handlerTrace := make(chan trace.SpanContext, 1)
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		handlerTrace <- trace.SpanContextFromContext(r.Context())
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"pay_1"}`)
	}))

	// A new key: the request's span, with its claim, run and completion.
	if w := post(h, rawKey, payment); w.Code != http.StatusCreated || w.Header().Get(idem.HeaderOriginalTrace) != "" {
		t.Fatalf("first request: %d, %s %q", w.Code, idem.HeaderOriginalTrace, w.Header().Get(idem.HeaderOriginalTrace))
	}
	first := rec.take()
	logTree(t, "new key ("+mode.String()+")", first)
	req := one(t, first, string(idem.StepRequest))
	claim, run, done := one(t, first, string(idem.StepClaim)), one(t, first, string(idem.StepRun)), one(t, first, string(idem.StepComplete))
	for _, s := range []tracetest.SpanStub{claim, run, done} {
		if s.Parent.SpanID() != req.SpanContext.SpanID() || s.SpanContext.TraceID() != req.SpanContext.TraceID() {
			t.Errorf("%s is not a child of %s", s.Name, req.Name)
		}
	}
	if sc := <-handlerTrace; sc.SpanID() != run.SpanContext.SpanID() {
		t.Errorf("the handler's context carries span %s, want the run's %s", sc.SpanID(), run.SpanContext.SpanID())
	}
	digest := keyspec.Digest(strings.Trim(rawKey, `"`))
	wantAttrs := map[string]string{
		"idem.operation": "POST /v1/payments", "idem.mode": mode.String(), "idem.key_digest": digest,
		"idem.outcome": "executed",
	}
	for k, v := range wantAttrs {
		if got := attr(req, k); got != v {
			t.Errorf("%s: %s = %q, want %q", req.Name, k, got, v)
		}
	}
	if attr(run, "idem.attempt") != "0" || attr(run, "idem.lease_token") != "1" || attr(run, "http.response.status_code") != "201" {
		t.Errorf("run attributes = %v; want attempt 0, token 1, status 201", run.Attributes)
	}
	checkNoSecrets(t, first)

	// The replay: linked to the request that ran the key, whose trace id
	// the header carries.
	w := post(h, rawKey, payment)
	if w.Code != http.StatusCreated || w.Header().Get(idem.HeaderReplayed) != "true" {
		t.Fatalf("replay: %d %s", w.Code, w.Body)
	}
	if got, want := w.Header().Get(idem.HeaderOriginalTrace), req.SpanContext.TraceID().String(); got != want {
		t.Errorf("%s = %q, want the first request's trace %s", idem.HeaderOriginalTrace, got, want)
	}
	second := rec.take()
	logTree(t, "replay ("+mode.String()+")", second)
	replay := one(t, second, string(idem.StepReplay))
	checkLink(t, replay, req.SpanContext, "ran_key")
	if r2 := one(t, second, string(idem.StepRequest)); attr(r2, "idem.outcome") != "replayed" || r2.SpanContext.TraceID() == req.SpanContext.TraceID() {
		t.Errorf("replay's request span: outcome %q, trace %s; want replayed, in a trace of its own", attr(r2, "idem.outcome"), r2.SpanContext.TraceID())
	}
	if len(find(second, string(idem.StepRun))) != 0 {
		t.Errorf("the replay ran the handler:\n%s", spanTree(second))
	}
	checkNoSecrets(t, second)
	if *svgOut != "" && mode == idem.ModeAtomic && be.name == "PostgreSQL" {
		writePicture(t, *svgOut, []string{"POST /v1/payments, a new key", "the same request again: the replay"}, []tracetest.SpanStubs{first, second})
	}

	// A 422: linked to the first request; no trace id header.
	w = post(h, rawKey, `{"amount":9900,"currency":"eur"}`)
	if w.Code != http.StatusUnprocessableEntity || w.Header().Get(idem.HeaderOriginalTrace) != "" {
		t.Fatalf("mismatch: %d %q", w.Code, w.Header().Get(idem.HeaderOriginalTrace))
	}
	third := rec.take()
	logTree(t, "422 ("+mode.String()+")", third)
	checkLink(t, one(t, third, string(idem.StepMismatch)), req.SpanContext, "ran_key")
	checkNoSecrets(t, third)
}

// checkInFlight holds a key in a two-phase handler and sends it again:
// the 409's span links to the holder's trace.
func checkInFlight(t *testing.T, be backend) {
	rec := newRecorder(t)
	store := be.open(t)
	mw, err := idem.New(store, &idem.Config{
		ClientID: func(*http.Request) (string, bool) { return "alice", true },
		Mode:     idem.ModeTwoPhase, Logger: quiet, Tracer: rec.tracer(t), ExposeOriginalTrace: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	inside, release := make(chan trace.SpanContext, 1), make(chan struct{})
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inside <- trace.SpanContextFromContext(r.Context())
		<-release
		w.WriteHeader(http.StatusCreated)
	}))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		post(h, rawKey, payment)
	}()
	holder := <-inside
	w := post(h, rawKey, payment)
	close(release)
	wg.Wait()
	if w.Code != http.StatusConflict {
		t.Fatalf("second request: %d, want 409", w.Code)
	}
	if got := w.Header().Get(idem.HeaderOriginalTrace); got != holder.TraceID().String() {
		t.Errorf("%s = %q, want the holder's trace %s", idem.HeaderOriginalTrace, got, holder.TraceID())
	}
	spans := rec.take()
	logTree(t, "409 (two-phase)", spans)
	var holderReq tracetest.SpanStub
	for _, s := range find(spans, string(idem.StepRequest)) {
		if s.SpanContext.TraceID() == holder.TraceID() {
			holderReq = s
		}
	}
	inflight := one(t, spans, string(idem.StepInFlight))
	checkLink(t, inflight, holderReq.SpanContext, "holds_key")
	if attr(inflight, "idem.outcome") != "in_flight" || attr(inflight, "http.response.status_code") != "409" {
		t.Errorf("409 span attributes = %v", inflight.Attributes)
	}
}

// checkLink checks that s has one link, to want, of kind.
func checkLink(t *testing.T, s tracetest.SpanStub, want trace.SpanContext, kind string) {
	t.Helper()
	if len(s.Links) != 1 {
		t.Fatalf("%s has %d links, want 1", s.Name, len(s.Links))
	}
	l := s.Links[0]
	if l.SpanContext.TraceID() != want.TraceID() || l.SpanContext.SpanID() != want.SpanID() {
		t.Errorf("%s links to %s/%s, want %s/%s", s.Name, l.SpanContext.TraceID(), l.SpanContext.SpanID(), want.TraceID(), want.SpanID())
	}
	if len(l.Attributes) != 1 || l.Attributes[0].Value.String() != kind {
		t.Errorf("%s's link attributes = %v, want idem.link=%s", s.Name, l.Attributes, kind)
	}
}

// checkNoSecrets fails when any attribute carries the raw key or a part
// of a body.
func checkNoSecrets(t *testing.T, spans tracetest.SpanStubs) {
	t.Helper()
	for _, s := range spans {
		for _, a := range s.Attributes {
			v := a.Value.String()
			if strings.Contains(v, "order-4711") || strings.Contains(v, "4200") || strings.Contains(v, "pay_1") {
				t.Errorf("%s: attribute %s=%q carries a key or a body", s.Name, a.Key, v)
			}
		}
	}
}

// TestPurgeSpan checks the span of a purge pass and its count.
func TestPurgeSpan(t *testing.T) {
	rec := newRecorder(t)
	store := backends()[1].open(t).(*idemsqlite.Store)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cfg := &idem.Config{
		ClientID: func(*http.Request) (string, bool) { return "alice", true },
		Logger:   quiet, Tracer: rec.tracer(t), Now: func() time.Time { return now },
	}
	mw, err := idem.New(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
	for _, k := range []string{`"a"`, `"b"`} {
		post(h, k, payment)
	}
	rec.take()
	now = now.Add(idem.RetentionDefault + time.Minute)
	cfg.Purge.Interval = time.Hour
	p, err := idem.NewPurger(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	deadline := time.Now().Add(30 * time.Second)
	for len(find(rec.exp.GetSpans(), string(idem.StepPurge))) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	spans := rec.take()
	logTree(t, "purge", spans)
	if s := one(t, spans, string(idem.StepPurge)); attr(s, "idem.purged_keys") != "2" {
		t.Errorf("purge span attributes = %v, want idem.purged_keys=2", s.Attributes)
	}
}

// TestOriginalTraceHeaderOffByDefault checks that a replay carries no
// trace id unless the Config asks for it.
func TestOriginalTraceHeaderOffByDefault(t *testing.T) {
	rec := newRecorder(t)
	mw, err := idem.New(backends()[1].open(t), &idem.Config{
		ClientID: func(*http.Request) (string, bool) { return "alice", true },
		Logger:   quiet, Tracer: rec.tracer(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
	post(h, rawKey, payment)
	w := post(h, rawKey, payment)
	if w.Header().Get(idem.HeaderReplayed) != "true" || w.Header().Get(idem.HeaderOriginalTrace) != "" {
		t.Errorf("replay: replayed %q, %s %q; want a replay without the trace id", w.Header().Get(idem.HeaderReplayed), idem.HeaderOriginalTrace, w.Header().Get(idem.HeaderOriginalTrace))
	}
	if replay := one(t, rec.take(), string(idem.StepReplay)); len(replay.Links) != 1 {
		t.Errorf("replay span has %d links; want its link all the same", len(replay.Links))
	}
}
