package idemgrpc_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/idemkit/idem"
	paymentsv1 "github.com/idemkit/idem/api/payments/v1"
	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/internal/storetest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var quiet = slog.New(slog.DiscardHandler)

const testTimeout = 30 * time.Second

// backend is a real store with a business table that handlers write to in
// the key's transaction.
type (
	backend = storetest.Backend
	db      = storetest.DB
)

var backends = storetest.Backends

type clientKey struct{}

// auth is the service's auth interceptor: "authorization: Bearer <client>".
func auth(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get("authorization")
	if len(v) != 1 || !strings.HasPrefix(v[0], "Bearer ") {
		return nil, status.Error(codes.Unauthenticated, "send authorization: Bearer <client>")
	}
	return handler(context.WithValue(ctx, clientKey{}, strings.TrimPrefix(v[0], "Bearer ")), req)
}

// service is a PaymentService that records a business row per payment in
// the key's transaction.
type service struct {
	paymentsv1.UnimplementedPaymentServiceServer
	db     *db
	runs   atomic.Int64 // committed or not: runs of the handler that inserted
	inside chan string  // the key of each run, as it starts
	gates  sync.Map     // key -> chan struct{}: the run waits for it to close
	phases idem.Phases  // set: CreatePayment runs them (two-phase mode)
}

func (s *service) CreatePayment(ctx context.Context, req *paymentsv1.CreatePaymentRequest) (*paymentsv1.Payment, error) {
	scope, _ := idem.ScopeFromContext(ctx)
	select {
	case s.inside <- scope.Key:
	default:
	}
	if g, ok := s.gates.Load(scope.Key); ok {
		<-g.(chan struct{})
	}
	if s.phases != nil {
		out := &paymentsv1.Payment{}
		if err := idemgrpc.RunPhases(ctx, s.phases, out); err != nil {
			return nil, err
		}
		return out, nil
	}
	switch req.GetCustomer() {
	case "invalid":
		return nil, status.Error(codes.InvalidArgument, "customer is invalid")
	case "exists":
		return nil, status.Error(codes.AlreadyExists, "customer has this payment already")
	}
	id, err := s.db.Insert(ctx, scope.Key)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "insert: %v", err)
	}
	s.runs.Add(1)
	return &paymentsv1.Payment{Id: fmt.Sprintf("pay_%d", id), Amount: req.GetAmount(), Currency: req.GetCurrency(), Customer: req.GetCustomer(), Status: "succeeded"}, nil
}

// gate makes runs with key wait until the returned func is called.
func (s *service) gate(key string) func() {
	ch := make(chan struct{})
	s.gates.Store(key, ch)
	return sync.OnceFunc(func() { close(ch) })
}

// env is a gRPC server with the idem interceptor over a real store.
type env struct {
	db     *db
	svc    *service
	client paymentsv1.PaymentServiceClient
	conn   *grpc.ClientConn
	addr   string
	codes  chan codes.Code // the code of each answer the server sent
	calls  chan served     // each call the server answered
}

// served is a call the server answered.
type served struct {
	code              codes.Code
	arrived, answered time.Time
}

func setup(t *testing.T, b backend, cfg idem.Config, rpc *idemgrpc.Config) *env {
	t.Helper()
	d := b.Open(t)
	cfg.ClientID = func(r *http.Request) (string, bool) {
		c, ok := r.Context().Value(clientKey{}).(string)
		return c, ok && c != ""
	}
	cfg.Logger = quiet
	mw, err := idem.New(d.Store, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	ic, err := idemgrpc.NewServer(mw, rpc)
	if err != nil {
		t.Fatal(err)
	}
	svc := &service{db: d, inside: make(chan string, 100)}
	codesSent := make(chan codes.Code, 100)
	calls := make(chan served, 100)
	observe := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		arrived := time.Now()
		resp, err := handler(ctx, req)
		select {
		case codesSent <- status.Code(err):
		default:
		}
		select {
		case calls <- served{status.Code(err), arrived, time.Now()}:
		default:
		}
		return resp, err
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(observe, auth, ic.UnaryInterceptor()))
	paymentsv1.RegisterPaymentServiceServer(srv, svc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &env{db: d, svc: svc, client: paymentsv1.NewPaymentServiceClient(conn), conn: conn, addr: lis.Addr().String(), codes: codesSent, calls: calls}
}

// answer is what a client got.
type answer struct {
	resp    *paymentsv1.Payment
	err     error
	header  metadata.MD
	trailer metadata.MD
}

func (a answer) replayed() bool {
	return len(a.header.Get("idempotent-replayed")) == 1 && a.header.Get("idempotent-replayed")[0] == "true" ||
		len(a.trailer.Get("idempotent-replayed")) == 1 && a.trailer.Get("idempotent-replayed")[0] == "true"
}

// call sends CreatePayment as client with the given keys in metadata.
func (e *env) call(t *testing.T, client string, req *paymentsv1.CreatePaymentRequest, keys ...string) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	kv := []string{"authorization", "Bearer " + client}
	for _, k := range keys {
		kv = append(kv, "idempotency-key", k)
	}
	ctx = metadata.AppendToOutgoingContext(ctx, kv...)
	var a answer
	a.resp, a.err = e.client.CreatePayment(ctx, req, grpc.Header(&a.header), grpc.Trailer(&a.trailer))
	return a
}

func payment(amount int64) *paymentsv1.CreatePaymentRequest {
	return &paymentsv1.CreatePaymentRequest{Amount: amount, Currency: "usd", Customer: "cus_1"}
}

// recvWithin receives from ch, or fails the test after testTimeout.
func recvWithin[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(testTimeout):
		t.Fatalf("no %s within %s", what, testTimeout)
		panic("unreachable")
	}
}

// equalMsg reports whether two messages are equal.
func equalMsg(a, b proto.Message) bool { return proto.Equal(a, b) }
