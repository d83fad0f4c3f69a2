package idemotel_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemotel"
	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/pgtest"
)

// childEnv names the database of the child service that
// TestResumeAfterKillContinuesTrace starts from this test binary.
const childEnv = "IDEMOTEL_TEST_CHILD_DB"

// paymentPhases is a payment in two phases: the first creates it; the
// second, which the child blocks in until it is killed, answers.
func paymentPhases(block bool) idem.Phases {
	return idem.Phases{
		idemstore.RecoveryStarted: func(ctx context.Context, w http.ResponseWriter, st idem.State) (string, error) {
			st["payment_id"] = "pay_7"
			return "payment_created", nil
		},
		"payment_created": func(ctx context.Context, w http.ResponseWriter, st idem.State) (string, error) {
			if block {
				<-ctx.Done() // the process is killed here
				return "", ctx.Err()
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"id":%q,"status":"succeeded"}`, st["payment_id"])
			return idemstore.RecoveryFinished, nil
		},
	}
}

// runChild serves the payment, two-phase on PostgreSQL, traced by a real
// SDK whose spans go nowhere (the process is killed before it could send
// them), and prints its address.
func runChild() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv(childEnv))
	if err != nil {
		panic(err)
	}
	store, err := idempg.New(pool, &idempg.Config{Logger: quiet})
	if err != nil {
		panic(err)
	}
	tracer, err := idemotel.New(&idemotel.Config{TracerProvider: sdktrace.NewTracerProvider()})
	if err != nil {
		panic(err)
	}
	mw, err := idem.New(store, &idem.Config{
		ClientID: func(*http.Request) (string, bool) { return "alice", true },
		Mode:     idem.ModeTwoPhase, Logger: quiet, Tracer: tracer,
	})
	if err != nil {
		panic(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	fmt.Println(ln.Addr())
	ops := paymentPhases(true)
	h := idemotel.Extract(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ops.Run(r.Context(), w)
	})))
	panic(http.Serve(ln, h))
}

// TestResumeAfterKillContinuesTrace sends a payment, in a trace of this
// process's, to a child service that is SIGKILLed after the payment's
// first phase; the resumer, here, finishes it in the same trace, linked
// to the killed request's span; the client's retry then gets the replay,
// linked to the resumer's span.
func TestResumeAfterKillContinuesTrace(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store, err := idempg.New(pool, &idempg.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childEnv+"="+url)
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { child.Process.Kill(); child.Wait() })
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("child's address: %v", err)
	}

	rec := newRecorder(t)
	cctx, client := rec.tp.Tracer("client").Start(ctx, "client: POST /v1/payments")
	req, _ := http.NewRequestWithContext(cctx, http.MethodPost, "http://"+strings.TrimSpace(addr)+"/v1/payments", strings.NewReader(payment))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(idem.HeaderKey, `"pay-after-kill"`)
	req.Header.Set("Traceparent", idemotel.TraceContext(client.SpanContext()))
	answered := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("answered %d", resp.StatusCode)
		}
		answered <- err
	}()

	var point, stored *string
	deadline := time.Now().Add(60 * time.Second)
	for {
		pool.QueryRow(ctx, `SELECT recovery_point, trace_context FROM idempotency_keys WHERE idempotency_key = 'pay-after-kill'`).Scan(&point, &stored)
		if point != nil && *point == "payment_created" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the payment never reached payment_created")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := child.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	child.Wait()
	if err := <-answered; err == nil || strings.HasPrefix(err.Error(), "answered") {
		t.Fatalf("the killed request: %v; want no answer", err)
	}
	client.End()
	killed := idemotel.SpanContextOf(*stored)
	if killed.TraceID() != client.SpanContext().TraceID() {
		t.Fatalf("stored trace context %s is not in the client's trace %s", *stored, client.SpanContext().TraceID())
	}
	t.Logf("stored with the key by the killed request: %s", *stored)

	lockTimeout := idem.LockTimeoutDefault
	later := func() time.Time { return time.Now().Add(lockTimeout + time.Minute) }
	resumer, err := idem.NewResumer(store, &idem.Config{
		Mode: idem.ModeTwoPhase, Logger: quiet, Tracer: rec.tracer(t), Now: later,
		Resume: idem.ResumeOpts{Operations: map[string]idem.Phases{"POST /v1/payments": paymentPhases(false)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	res, err := resumer.RunOnce(ctx)
	if err != nil || res.Completed != 1 {
		t.Fatalf("resumer pass: %+v, %v; want one key completed", res, err)
	}
	spans := rec.take()
	logTree(t, "resume after SIGKILL (the killed process's spans died with it; its request span is the remote parent)", spans)
	resume := one(t, spans, string(idem.StepResume))
	if resume.SpanContext.TraceID() != killed.TraceID() || resume.Parent.SpanID() != killed.SpanID() || !resume.Parent.IsRemote() {
		t.Errorf("resume span: trace %s parent %s; want the killed request's trace %s and span %s", resume.SpanContext.TraceID(), resume.Parent.SpanID(), killed.TraceID(), killed.SpanID())
	}
	checkLink(t, resume, killed, "ran_key")
	if attr(resume, "idem.lease_token") != "2" || attr(resume, "http.response.status_code") != "201" || attr(resume, "idem.operation") != "POST /v1/payments" {
		t.Errorf("resume span attributes = %v; want token 2 (a takeover), status 201", resume.Attributes)
	}

	// The client comes back with its key: the replay links to the resumer's
	// run, in the original trace.
	mw, err := idem.New(store, &idem.Config{
		ClientID: func(*http.Request) (string, bool) { return "alice", true },
		Mode:     idem.ModeTwoPhase, Logger: quiet, Tracer: rec.tracer(t), ExposeOriginalTrace: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	w := post(mw.Wrap(http.NotFoundHandler()), `"pay-after-kill"`, payment)
	if w.Code != http.StatusCreated || w.Header().Get(idem.HeaderReplayed) != "true" || !strings.Contains(w.Body.String(), "pay_7") {
		t.Fatalf("client's retry: %d %s", w.Code, w.Body)
	}
	if got := w.Header().Get(idem.HeaderOriginalTrace); got != killed.TraceID().String() {
		t.Errorf("%s = %q, want the original trace %s", idem.HeaderOriginalTrace, got, killed.TraceID())
	}
	spans = rec.take()
	logTree(t, "the client's retry after the resume", spans)
	checkLink(t, one(t, spans, string(idem.StepReplay)), resume.SpanContext, "ran_key")
}
