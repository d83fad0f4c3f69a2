package idemgrpc_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/idemkit/idem"
	paymentsv1 "github.com/idemkit/idem/api/payments/v1"
	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/idemrpc"
)

// client returns a PaymentService client with the idem client interceptor.
func (e *env) keyedClient(t *testing.T, opts *idemgrpc.ClientOpts) paymentsv1.PaymentServiceClient {
	t.Helper()
	ic, err := idemgrpc.UnaryClientInterceptor(opts)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithUnaryInterceptor(ic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return paymentsv1.NewPaymentServiceClient(conn)
}

func aliceCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer alice")
}

func TestClientSendsOneKeyPerLogicalCall(t *testing.T) {
	t.Parallel()
	e := setup(t, backends[0], idem.Config{}, nil)
	c := e.keyedClient(t, nil)
	// Without a call context, each call is a new operation.
	for range 2 {
		if _, err := c.CreatePayment(aliceCtx(t), payment(100)); err != nil {
			t.Fatal(err)
		}
	}
	// With one, the application's retries send the first call's key.
	ctx := idemrpc.WithCall(aliceCtx(t))
	var md metadata.MD
	first, err := c.CreatePayment(ctx, payment(200))
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.CreatePayment(ctx, payment(200), grpc.Header(&md))
	if err != nil || !equalMsg(first, again) || len(md.Get("idempotent-replayed")) != 1 {
		t.Fatalf("the application's retry: %v %v %v, want the replay of %v", err, again, md, first)
	}
	if n := e.svc.runs.Load(); n != 3 {
		t.Errorf("%d runs, want 3", n)
	}
	// GetPayment is NO_SIDE_EFFECTS: no key, and the server needs none.
	if _, err := c.GetPayment(aliceCtx(t), &paymentsv1.GetPaymentRequest{Id: "x"}); grpcstatus.Code(err) != codes.Unimplemented {
		t.Errorf("GetPayment: %v", err)
	}
}

// TestClientWaitsRetryInfoWhileInFlight sends a call whose key is in
// flight: the interceptor gets ABORTED with RetryInfo, waits, and retries
// with the same key until it gets the first call's answer.
func TestClientWaitsRetryInfoWhileInFlight(t *testing.T) {
	t.Parallel()
	e := setup(t, backends[0], idem.Config{}, nil) // atomic: RetryInfo 1 s
	c := e.keyedClient(t, &idemgrpc.ClientOpts{MaxAttempts: 20})
	open := e.svc.gate("order-7")
	ctx := idemrpc.WithKey(aliceCtx(t), "order-7")
	firstc := make(chan *paymentsv1.Payment, 1)
	go func() {
		p, err := c.CreatePayment(ctx, payment(700))
		if err != nil {
			t.Error(err)
		}
		firstc <- p
	}()
	recvWithin(t, e.svc.inside, "the first call in its handler")
	secondc := make(chan *paymentsv1.Payment, 1)
	go func() {
		p, err := c.CreatePayment(ctx, payment(700))
		if err != nil {
			t.Error(err)
		}
		secondc <- p
	}()
	for code := recvWithin(t, e.codes, "an answer"); code != codes.Aborted; code = recvWithin(t, e.codes, "an answer") {
		t.Logf("answer %s before ABORTED", code)
	}
	open()
	first, second := recvWithin(t, firstc, "the first call's answer"), recvWithin(t, secondc, "the second call's answer")
	if first == nil || !equalMsg(first, second) {
		t.Fatalf("first %v, second %v, want the same payment", first, second)
	}
	if n := e.svc.runs.Load(); n != 1 {
		t.Errorf("%d runs, want 1", n)
	}
}
