package idemgrpc_test

import (
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/idemkit/idem"
	paymentsv1 "github.com/idemkit/idem/api/payments/v1"
)

// retryABORTED is a service config whose retry policy (gRFC A6) retries
// ABORTED; the server's grpc-retry-pushback-ms sets each wait.
const retryABORTED = `{"methodConfig": [{
	"name": [{"service": "payments.v1.PaymentService", "method": "CreatePayment"}],
	"retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.01s", "maxBackoff": "0.01s", "backoffMultiplier": 1,
		"retryableStatusCodes": ["ABORTED"]}
}]}`

// TestGRPCRetryPolicyWaitsThePushback sends a call whose key is in flight
// through a client whose own retry policy retries ABORTED: the server
// answers ABORTED with grpc-retry-pushback-ms, gRPC waits that long (1 s in
// atomic mode, not the policy's 10 ms backoff), retries with the same
// metadata, and gets the first call's answer.
func TestGRPCRetryPolicyWaitsThePushback(t *testing.T) {
	t.Parallel()
	e := setup(t, backends[0], idem.Config{}, nil)
	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultServiceConfig(retryABORTED))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	retrying := paymentsv1.NewPaymentServiceClient(conn)
	open := e.svc.gate("pushback")
	first := make(chan answer, 1)
	go func() { first <- e.call(t, "alice", payment(500), "pushback") }()
	recvWithin(t, e.svc.inside, "the first call in its handler")
	second := make(chan *paymentsv1.Payment, 1)
	go func() {
		ctx := metadata.AppendToOutgoingContext(aliceCtx(t), "idempotency-key", "pushback")
		p, err := retrying.CreatePayment(ctx, payment(500))
		if err != nil {
			t.Error(err)
		}
		second <- p
	}()
	aborted := recvWithin(t, e.calls, "an answer")
	for ; aborted.code != codes.Aborted; aborted = recvWithin(t, e.calls, "an answer") {
		t.Logf("answer %s before ABORTED", aborted.code)
	}
	open()
	f, s := recvWithin(t, first, "the first call's answer"), recvWithin(t, second, "the retried call's answer")
	if f.err != nil || !equalMsg(f.resp, s) {
		t.Fatalf("first %v %v, retried %v: want the same payment", f.resp, f.err, s)
	}
	if n := e.svc.runs.Load(); n != 1 {
		t.Errorf("%d runs, want 1", n)
	}
	// gRPC sent its retry no sooner than the pushback after it got the
	// ABORTED, which the server answered before that: a lower bound,
	// whatever the machine's speed.
	for {
		c := recvWithin(t, e.calls, "the retry")
		if c.arrived.Before(aborted.answered) {
			continue // the first call
		}
		if gap := c.arrived.Sub(aborted.answered); gap < time.Second {
			t.Errorf("the retry came %s after the ABORTED, before the 1 s pushback", gap)
		}
		break
	}
}
