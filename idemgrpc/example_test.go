package idemgrpc_test

import (
	"context"
	"fmt"
	"net"
	"net/http"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idem"
	paymentsv1 "github.com/idemkit/idem/api/payments/v1"
	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/idemtest"
)

// examplePayments answers each payment with a new id.
type examplePayments struct {
	paymentsv1.UnimplementedPaymentServiceServer
	n int
}

func (s *examplePayments) CreatePayment(ctx context.Context, req *paymentsv1.CreatePaymentRequest) (*paymentsv1.Payment, error) {
	s.n++ // in a real service: a write in the key's transaction
	return &paymentsv1.Payment{Id: fmt.Sprintf("pay_%d", s.n), Amount: req.Amount, Status: "succeeded"}, nil
}

// A gRPC service behind idem: the auth interceptor puts the client in the
// context, idem's interceptor reads it through Config.ClientID, and a
// retry with the same key gets the stored answer.
func ExampleServer() {
	type clientKey struct{}
	auth := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get("authorization"); len(v) == 1 && v[0] == "Bearer sk_alice" {
			return handler(context.WithValue(ctx, clientKey{}, "alice"), req)
		}
		return nil, status.Error(codes.Unauthenticated, "unknown client")
	}
	mw, err := idem.New(idemtest.NewMemoryStore(), &idem.Config{
		ClientID: func(r *http.Request) (string, bool) {
			c, ok := r.Context().Value(clientKey{}).(string)
			return c, ok
		},
	})
	if err != nil {
		panic(err)
	}
	ic, err := idemgrpc.NewServer(mw, nil)
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(auth, ic.UnaryInterceptor()))
	paymentsv1.RegisterPaymentServiceServer(srv, &examplePayments{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	client := paymentsv1.NewPaymentServiceClient(conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(),
		"authorization", "Bearer sk_alice", "idempotency-key", "order-42")
	for _, amount := range []int64{4200, 4200, 4300} {
		var header metadata.MD
		p, err := client.CreatePayment(ctx, &paymentsv1.CreatePaymentRequest{Amount: amount, Currency: "usd", Customer: "cus_1"}, grpc.Header(&header))
		if err != nil {
			fmt.Println(status.Code(err), status.Convert(err).Message())
			continue
		}
		fmt.Println(p.Id, "replayed:", header.Get("idempotent-replayed"))
	}
	// Output:
	// pay_1 replayed: []
	// pay_1 replayed: [true]
	// FailedPrecondition This key was first used with a different request: /amount differs.
}
