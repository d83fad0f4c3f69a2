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
