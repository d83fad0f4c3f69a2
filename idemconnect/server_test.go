package idemconnect_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemrpc"
)

type details struct {
	code   connect.Code
	reason string
	domain string
	retry  time.Duration
	fields []string
	meta   func(string) string
}

func detailsOf(t *testing.T, err error) details {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) {
		t.Fatalf("error %v is no connect error", err)
	}
	d := details{code: ce.Code(), meta: ce.Meta().Get}
	for _, x := range ce.Details() {
		v, err := x.Value()
		if err != nil {
			t.Fatal(err)
		}
		switch x := v.(type) {
		case *errdetails.ErrorInfo:
			d.reason, d.domain = x.Reason, x.Domain
		case *errdetails.RetryInfo:
			d.retry = x.RetryDelay.AsDuration()
		case *errdetails.BadRequest:
			for _, f := range x.FieldViolations {
				d.fields = append(d.fields, f.Field)
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
			e := setup(t, b, idem.Config{Mode: mode})
			key := "replay-" + mode.String()
			first := e.call(t, "alice", payment(4200), key)
			again := e.call(t, "alice", payment(4200), key)
			if first.err != nil || first.replayed() || again.err != nil || !again.replayed() || !proto.Equal(first.msg(), again.msg()) {
				t.Fatalf("%s: %v %v, then %v %v replayed=%v", mode, first.err, first.msg(), again.err, again.msg(), again.replayed())
			}
			req := payment(1)
			req.Customer = "exists" // an error status, stored and replayed
			e1, e2 := e.call(t, "alice", req, key+"-err"), e.call(t, "alice", req, key+"-err")
			if connect.CodeOf(e1.err) != connect.CodeAlreadyExists || connect.CodeOf(e2.err) != connect.CodeAlreadyExists || !e2.replayed() {
				t.Errorf("%s: ALREADY_EXISTS %v, then %v replayed=%v", mode, e1.err, e2.err, e2.replayed())
			}
			if n, rows := e.svc.runs.Load(), e.db.Rows(t); n != 1 || rows != 1 {
				t.Errorf("%s: %d runs and %d rows, want 1 and 1", mode, n, rows)
			}
		}
	})
}

func TestKeyInFlightGetsAbortedWithRetryInfo(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := setup(t, b, idem.Config{Mode: idem.ModeTwoPhase})
		open := e.svc.gate("busy")
		first := make(chan answer, 1)
		go func() { first <- e.call(t, "alice", payment(4200), "busy") }()
		recvWithin(t, e.svc.inside, "the first call in its handler")
		second := e.call(t, "alice", payment(4200), "busy")
		d := detailsOf(t, second.err)
		if d.code != connect.CodeAborted || d.reason != "IDEMPOTENCY_KEY_IN_FLIGHT" || d.domain != idemrpc.ErrorDomain || d.retry < time.Second {
			t.Fatalf("duplicate in flight: %v %+v, want ABORTED IDEMPOTENCY_KEY_IN_FLIGHT with RetryInfo", second.err, d)
		}
		if p := d.meta("grpc-retry-pushback-ms"); p == "" {
			t.Errorf("no grpc-retry-pushback-ms")
		}
		open()
		if f := recvWithin(t, first, "the first call's answer"); f.err != nil {
			t.Fatal(f.err)
		}
	})
}

func TestMismatchNamesTheFields(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := setup(t, b, idem.Config{})
		if a := e.call(t, "alice", payment(4200), "k"); a.err != nil {
			t.Fatal(a.err)
		}
		other := payment(4200)
		other.Customer = "cus_2"
		a := e.call(t, "alice", other, "k")
		d := detailsOf(t, a.err)
		if d.code != connect.CodeFailedPrecondition || d.reason != "IDEMPOTENCY_KEY_REUSED" || !slices.Equal(d.fields, []string{"customer"}) {
			t.Fatalf("same key, other request: %v %+v, want FAILED_PRECONDITION naming customer", a.err, d)
		}
	})
}

func TestMissingKeyIsInvalidArgument(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := setup(t, b, idem.Config{})
		for keys, reason := range map[string]string{"": "IDEMPOTENCY_KEY_MISSING", strings.Repeat("k", 256): "IDEMPOTENCY_KEY_MALFORMED"} {
			var a answer
			if keys == "" {
				a = e.call(t, "alice", payment(4200))
			} else {
				a = e.call(t, "alice", payment(4200), keys)
			}
			if d := detailsOf(t, a.err); d.code != connect.CodeInvalidArgument || d.reason != reason {
				t.Errorf("%v %+v, want INVALID_ARGUMENT %s", a.err, d, reason)
			}
		}
		if n := e.svc.runs.Load(); n != 0 {
			t.Errorf("%d runs, want none", n)
		}
	})
}

func TestStoreDownIsUnavailable(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := setup(t, b, idem.Config{})
		e.db.Down()
		a := e.call(t, "alice", payment(4200), "down")
		if d := detailsOf(t, a.err); d.code != connect.CodeUnavailable || d.reason != "STORE_UNAVAILABLE" || d.retry <= 0 {
			t.Fatalf("store down: %v %+v", a.err, d)
		}
		if n := e.svc.runs.Load(); n != 0 {
			t.Errorf("%d runs, want none", n)
		}
	})
}

func TestKeysAreScopedByClient(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := setup(t, b, idem.Config{})
		alice := e.call(t, "alice", payment(100), "shared")
		bob := e.call(t, "bob", payment(200), "shared")
		if alice.err != nil || bob.err != nil || bob.replayed() || proto.Equal(alice.msg(), bob.msg()) {
			t.Fatalf("alice %v %v, bob %v %v: want two payments", alice.err, alice.msg(), bob.err, bob.msg())
		}
		if a := e.call(t, "bob", payment(200), "shared"); !a.replayed() || !proto.Equal(a.msg(), bob.msg()) {
			t.Errorf("bob's retry: %v %v, want his replay", a.err, a.msg())
		}
		if a := e.call(t, "", payment(100), "shared"); connect.CodeOf(a.err) != connect.CodeUnauthenticated {
			t.Errorf("no client: %v", a.err)
		}
	})
}
