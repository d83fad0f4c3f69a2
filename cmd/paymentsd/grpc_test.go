package main

import (
	"context"
	"net/http"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	paymentsv1 "github.com/idemkit/idem/api/payments/v1"
	"github.com/idemkit/idem/api/payments/v1/paymentsv1connect"
)

var grpcRE = regexp.MustCompile(`gRPC \(payments\.v1\.PaymentService\) on (\S+)`)

// TestRunServesGRPCAndConnect runs paymentsd with -grpc-addr: a payment
// created over gRPC is replayed to a gRPC retry and to a Connect retry on
// the HTTP address, and Run stops gracefully.
func TestRunServesGRPCAndConnect(t *testing.T) {
	t.Parallel()
	db := "sqlite:" + filepath.Join(t.TempDir(), "p.db")
	p := runInProcess(t, "-addr", "127.0.0.1:0", "-admin-addr", "off", "-grpc-addr", "127.0.0.1:0", "-db", db, "-tokens", "sk_a=alice")
	base := waitListening(t, p.stdout.lines, "paymentsd")
	addr := waitLine(t, p.stdout.lines, grpcRE, "paymentsd's gRPC listener")

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := paymentsv1.NewPaymentServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer sk_a", "idempotency-key", `"grpc-tour-1"`)
	req := &paymentsv1.CreatePaymentRequest{Amount: 4200, Currency: "usd", Customer: "cus_123"}
	first, err := c.CreatePayment(ctx, req)
	if err != nil || first.GetStatus() != "succeeded" {
		t.Fatalf("CreatePayment: %v %v", first, err)
	}
	var md metadata.MD
	again, err := c.CreatePayment(ctx, req, grpc.Header(&md))
	if err != nil || !proto.Equal(first, again) || len(md.Get("idempotent-replayed")) != 1 {
		t.Fatalf("gRPC retry: %v %v %v, want the replay of %v", again, err, md, first)
	}
	cc := paymentsv1connect.NewPaymentServiceClient(http.DefaultClient, base)
	creq := connect.NewRequest(req)
	creq.Header().Set("Authorization", "Bearer sk_a")
	creq.Header().Set("Idempotency-Key", `"grpc-tour-1"`)
	cres, err := cc.CreatePayment(context.Background(), creq)
	if err != nil || !proto.Equal(cres.Msg, first) || cres.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("Connect retry: %v %v, want the replay of %v", cres, err, first)
	}
	noKey := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer sk_a")
	if _, err := c.CreatePayment(noKey, req); status.Code(err) != codes.InvalidArgument {
		t.Errorf("no key: %v, want INVALID_ARGUMENT", err)
	}
	if err := p.stop(t); err != nil {
		t.Fatalf("Run returned %v after cancel, want nil", err)
	}
}
