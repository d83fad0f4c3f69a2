package idemgrpc_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idem"
	paymentsv1 "github.com/idemkit/idem/api/payments/v1"
	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/idemrpc"
)

// details are the google.rpc details of an error.
type details struct {
	code   codes.Code
	reason string
	domain string
	retry  time.Duration
	fields []string
}

func detailsOf(t *testing.T, err error) details {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok {
		t.Fatalf("error %v is no status", err)
	}
	d := details{code: st.Code()}
	for _, x := range st.Details() {
		switch x := x.(type) {
		case *errdetails.ErrorInfo:
			d.reason, d.domain = x.Reason, x.Domain
		case *errdetails.RetryInfo:
			d.retry = x.RetryDelay.AsDuration()
		case *errdetails.BadRequest:
			for _, v := range x.FieldViolations {
				d.fields = append(d.fields, v.Field)
			}
		}
	}
	return d
}

func forEachBackend(t *testing.T, f func(t *testing.T, b backend)) {
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			f(t, b)
		})
	}
}

func TestReplaysTheStoredResponse(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, mode := range []idem.Mode{idem.ModeAtomic, idem.ModeTwoPhase} {
			e := setup(t, b, idem.Config{Mode: mode}, nil)
			key := "replay-" + mode.String()
			first := e.call(t, "alice", payment(4200), key)
			if first.err != nil || first.replayed() {
				t.Fatalf("%s: first call: %v replayed=%v", mode, first.err, first.replayed())
			}
			again := e.call(t, "alice", payment(4200), key)
			if again.err != nil || !again.replayed() || !equalMsg(again.resp, first.resp) {
				t.Fatalf("%s: retry: %v replayed=%v %v, want the replay of %v", mode, again.err, again.replayed(), again.resp, first.resp)
			}
			if n, rows := e.svc.runs.Load(), e.db.Rows(t); n != 1 || rows != 1 {
				t.Errorf("%s: %d runs and %d rows, want 1 and 1", mode, n, rows)
			}
		}
	})
}

func TestErrorStatusesFollowTheOutcomePolicy(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := setup(t, b, idem.Config{}, nil)
		req := payment(100)
		req.Customer = "exists" // ALREADY_EXISTS: stored, replayed
		first := e.call(t, "alice", req, "stored-error")
		again := e.call(t, "alice", req, "stored-error")
		if status.Code(first.err) != codes.AlreadyExists || status.Code(again.err) != codes.AlreadyExists || !again.replayed() || first.replayed() {
			t.Fatalf("ALREADY_EXISTS twice: %v, then %v replayed=%v; want the replay of the status", first.err, again.err, again.replayed())
		}
		if status.Convert(first.err).Message() != status.Convert(again.err).Message() {
			t.Errorf("replayed message %q, want %q", status.Convert(again.err).Message(), status.Convert(first.err).Message())
		}
		req.Customer = "invalid" // INVALID_ARGUMENT: not processed, released
		if a := e.call(t, "alice", req, "released"); status.Code(a.err) != codes.InvalidArgument {
			t.Fatalf("invalid: %v", a.err)
		}
		req.Customer = "cus_1" // the corrected retry with the same key runs
		if a := e.call(t, "alice", req, "released"); a.err != nil || a.replayed() {
			t.Fatalf("corrected retry: %v replayed=%v, want a run", a.err, a.replayed())
		}
	})
}

func TestKeyInFlightGetsAbortedWithRetryInfo(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := setup(t, b, idem.Config{Mode: idem.ModeTwoPhase}, nil)
		open := e.svc.gate("busy")
		first := make(chan answer, 1)
		go func() { first <- e.call(t, "alice", payment(4200), "busy") }()
		recvWithin(t, e.svc.inside, "the first call in its handler")
		second := e.call(t, "alice", payment(4200), "busy")
		d := detailsOf(t, second.err)
		if d.code != codes.Aborted || d.reason != "IDEMPOTENCY_KEY_IN_FLIGHT" || d.domain != idemrpc.ErrorDomain {
			t.Fatalf("duplicate in flight: %v %+v, want ABORTED IDEMPOTENCY_KEY_IN_FLIGHT", second.err, d)
		}
		if d.retry < time.Second || d.retry > idem.LockTimeoutDefault {
			t.Errorf("RetryInfo %s, want 1 s to the lock timeout", d.retry)
		}
		if p := second.trailer.Get("grpc-retry-pushback-ms"); len(p) != 1 || p[0] != strconv.FormatInt(d.retry.Milliseconds(), 10) {
			t.Errorf("grpc-retry-pushback-ms = %q, want the RetryInfo's %d", p, d.retry.Milliseconds())
		}
		open()
		if f := recvWithin(t, first, "the first call's answer"); f.err != nil {
			t.Fatal(f.err)
		}
		if a := e.call(t, "alice", payment(4200), "busy"); a.err != nil || !a.replayed() {
			t.Errorf("after the first finished: %v replayed=%v", a.err, a.replayed())
		}
	})
}

func TestMismatchNamesTheFields(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := setup(t, b, idem.Config{}, nil)
		if a := e.call(t, "alice", payment(4200), "k"); a.err != nil {
			t.Fatal(a.err)
		}
		other := payment(9900)
		other.Currency = "eur"
		a := e.call(t, "alice", other, "k")
		d := detailsOf(t, a.err)
		slices.Sort(d.fields)
		if d.code != codes.FailedPrecondition || d.reason != "IDEMPOTENCY_KEY_REUSED" || !slices.Equal(d.fields, []string{"amount", "currency"}) {
			t.Fatalf("same key, other request: %v %+v, want FAILED_PRECONDITION IDEMPOTENCY_KEY_REUSED naming amount and currency", a.err, d)
		}
		if strings.Contains(a.err.Error(), "9900") || strings.Contains(a.err.Error(), "4200") {
			t.Errorf("the answer shows values: %v", a.err)
		}
		if n := e.svc.runs.Load(); n != 1 {
			t.Errorf("%d runs, want 1", n)
		}
	})
}

func TestMissingOrMalformedKeyIsInvalidArgument(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := setup(t, b, idem.Config{}, nil)
		for _, tt := range []struct {
			name   string
			keys   []string
			reason string
		}{
			{"Missing", nil, "IDEMPOTENCY_KEY_MISSING"},
			{"TooLong", []string{strings.Repeat("k", idem.MaxKeyLength+1)}, "IDEMPOTENCY_KEY_MALFORMED"},
			{"Twice", []string{"a", "b"}, "IDEMPOTENCY_KEY_MALFORMED"},
		} {
			a := e.call(t, "alice", payment(4200), tt.keys...)
			if d := detailsOf(t, a.err); d.code != codes.InvalidArgument || d.reason != tt.reason {
				t.Errorf("%s: %v %+v, want INVALID_ARGUMENT %s", tt.name, a.err, d, tt.reason)
			}
			if msg := status.Convert(a.err).Message(); tt.keys == nil && !strings.Contains(msg, "in the idempotency-key metadata") {
				t.Errorf("%s: message %q does not say where the key goes", tt.name, msg)
			}
		}
		if n := e.svc.runs.Load(); n != 0 {
			t.Errorf("%d runs, want none", n)
		}
		// GetPayment is NO_SIDE_EFFECTS: no key needed; the handler
		// answers (UNIMPLEMENTED here).
		ctx := metadataCtx(t, "alice")
		if _, err := e.client.GetPayment(ctx, &paymentsv1.GetPaymentRequest{Id: "x"}); status.Code(err) != codes.Unimplemented {
			t.Errorf("GetPayment without a key: %v, want the handler's UNIMPLEMENTED", err)
		}
	})
}

func TestStoreDownIsUnavailable(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := setup(t, b, idem.Config{}, nil)
		e.db.Down()
		a := e.call(t, "alice", payment(4200), "down")
		d := detailsOf(t, a.err)
		if d.code != codes.Unavailable || d.reason != "STORE_UNAVAILABLE" || d.retry <= 0 {
			t.Fatalf("store down: %v %+v, want UNAVAILABLE STORE_UNAVAILABLE with RetryInfo", a.err, d)
		}
		if n := e.svc.runs.Load(); n != 0 {
			t.Errorf("%d runs, want none", n)
		}
	})
}

func TestKeysAreScopedByClient(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := setup(t, b, idem.Config{}, nil)
		alice := e.call(t, "alice", payment(100), "shared")
		bob := e.call(t, "bob", payment(200), "shared") // another body: no 422 across clients
		if alice.err != nil || bob.err != nil || bob.replayed() {
			t.Fatalf("alice %v, bob %v replayed=%v; want two runs", alice.err, bob.err, bob.replayed())
		}
		for _, c := range []struct {
			client string
			want   answer
			amount int64
		}{{"alice", alice, 100}, {"bob", bob, 200}} {
			a := e.call(t, c.client, payment(c.amount), "shared")
			if a.err != nil || !a.replayed() || !equalMsg(a.resp, c.want.resp) {
				t.Errorf("%s's retry: %v %v, want the replay of %v", c.client, a.err, a.resp, c.want.resp)
			}
		}
		if n := e.svc.runs.Load(); n != 2 {
			t.Errorf("%d runs, want 2", n)
		}
		if a := e.call(t, "", payment(100), "shared"); status.Code(a.err) != codes.Unauthenticated {
			t.Errorf("no client: %v", a.err)
		}
	})
}

func TestKeyInRequestField(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := setup(t, b, idem.Config{}, &idemgrpc.Config{Methods: map[string]idemgrpc.MethodOpts{
			paymentsv1.PaymentService_CreatePayment_FullMethodName: {KeyField: "request_id"},
		}})
		req := payment(4200)
		req.RequestId = "8e03978e-40d5-43e8-bc93-6894a57f9324 (any printable)"
		first := e.call(t, "alice", req)
		// The same key in metadata too, as an sf-string: metadata has the
		// header's syntax, where a space needs quotes.
		again := e.call(t, "alice", req, `"`+req.RequestId+`"`)
		if first.err != nil || again.err != nil || !again.replayed() || !equalMsg(first.resp, again.resp) {
			t.Fatalf("request_id: %v, then %v replayed=%v", first.err, again.err, again.replayed())
		}
		if a := e.call(t, "alice", req, "other"); status.Code(a.err) != codes.InvalidArgument {
			t.Errorf("request_id and another metadata key: %v, want INVALID_ARGUMENT", a.err)
		}
		if n := e.svc.runs.Load(); n != 1 {
			t.Errorf("%d runs, want 1", n)
		}
	})
	if _, err := idemgrpc.NewServer(&idem.Middleware{}, &idemgrpc.Config{Methods: map[string]idemgrpc.MethodOpts{
		paymentsv1.PaymentService_CreatePayment_FullMethodName: {KeyField: "amount"},
	}}); err == nil {
		t.Error("an int64 key field was accepted")
	}
}

func metadataCtx(t *testing.T, client string) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+client)
}
