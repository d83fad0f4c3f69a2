package idemconnect_test

import (
	"context"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/idemkit/idem"
	paymentsv1 "github.com/idemkit/idem/api/payments/v1"
	"github.com/idemkit/idem/api/payments/v1/paymentsv1connect"
	"github.com/idemkit/idem/idemconnect"
	"github.com/idemkit/idem/idemrpc"
)

func TestClientSendsOneKeyPerLogicalCall(t *testing.T) {
	t.Parallel()
	e := setup(t, backends[0], idem.Config{})
	ic, err := idemconnect.NewClientInterceptor(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := paymentsv1connect.NewPaymentServiceClient(http.DefaultClient, e.url, connect.WithInterceptors(ic))
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	ctx = idemrpc.WithCall(ctx)
	send := func() *connect.Response[paymentsv1.Payment] {
		req := connect.NewRequest(payment(300))
		req.Header().Set("Authorization", "Bearer alice")
		res, err := c.CreatePayment(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	first, again := send(), send()
	if !proto.Equal(first.Msg, again.Msg) || again.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the application's retry: %v %v, want the replay of %v", again.Msg, again.Header(), first.Msg)
	}
	if n := e.svc.runs.Load(); n != 1 {
		t.Errorf("%d runs, want 1", n)
	}
}

// TestClientWaitsRetryInfoWhileInFlight sends a call whose key is in
// flight: the interceptor gets ABORTED with RetryInfo, waits, and retries
// with the same key until it gets the first call's answer.
func TestClientWaitsRetryInfoWhileInFlight(t *testing.T) {
	t.Parallel()
	e := setup(t, backends[0], idem.Config{}) // atomic: RetryInfo 1 s
	ic, err := idemconnect.NewClientInterceptor(&idemconnect.ClientOpts{MaxAttempts: 20})
	if err != nil {
		t.Fatal(err)
	}
	c := paymentsv1connect.NewPaymentServiceClient(http.DefaultClient, e.url, connect.WithInterceptors(ic))
	open := e.svc.gate("order-7")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	ctx = idemrpc.WithKey(ctx, "order-7")
	send := func(out chan<- *paymentsv1.Payment) {
		req := connect.NewRequest(payment(700))
		req.Header().Set("Authorization", "Bearer alice")
		res, err := c.CreatePayment(ctx, req)
		if err != nil {
			t.Error(err)
			out <- nil
			return
		}
		out <- res.Msg
	}
	firstc, secondc := make(chan *paymentsv1.Payment, 1), make(chan *paymentsv1.Payment, 1)
	go send(firstc)
	recvWithin(t, e.svc.inside, "the first call in its handler")
	go send(secondc)
	for code := recvWithin(t, e.codes, "an answer"); code != connect.CodeAborted; code = recvWithin(t, e.codes, "an answer") {
		t.Logf("answer %s before ABORTED", code)
	}
	open()
	first, second := recvWithin(t, firstc, "the first call's answer"), recvWithin(t, secondc, "the second call's answer")
	if first == nil || !proto.Equal(first, second) {
		t.Fatalf("first %v, second %v, want the same payment", first, second)
	}
	if n := e.svc.runs.Load(); n != 1 {
		t.Errorf("%d runs, want 1", n)
	}
}
