package idemconnect_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/idemkit/idem"
	paymentsv1 "github.com/idemkit/idem/api/payments/v1"
	"github.com/idemkit/idem/api/payments/v1/paymentsv1connect"
	"github.com/idemkit/idem/idemconnect"
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

// auth is the service's auth interceptor: "Authorization: Bearer <client>".
var auth = connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		v := req.Header().Get("Authorization")
		if !strings.HasPrefix(v, "Bearer ") || v == "Bearer " {
			return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("send Authorization: Bearer <client>"))
		}
		return next(context.WithValue(ctx, clientKey{}, strings.TrimPrefix(v, "Bearer ")), req)
	}
})

// service records a business row per payment in the key's transaction.
type service struct {
	paymentsv1connect.UnimplementedPaymentServiceHandler
	db     *db
	runs   atomic.Int64
	inside chan string
	gates  sync.Map    // key -> chan struct{}
	phases idem.Phases // set: CreatePayment runs them (two-phase mode)
}

func (s *service) CreatePayment(ctx context.Context, req *connect.Request[paymentsv1.CreatePaymentRequest]) (*connect.Response[paymentsv1.Payment], error) {
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
		if err := idemconnect.RunPhases(ctx, s.phases, out); err != nil {
			return nil, err
		}
		return connect.NewResponse(out), nil
	}
	if req.Msg.GetCustomer() == "exists" {
		return nil, connect.NewError(connect.CodeAlreadyExists, errors.New("customer has this payment already"))
	}
	id, err := s.db.Insert(ctx, scope.Key)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	s.runs.Add(1)
	m := req.Msg
	return connect.NewResponse(&paymentsv1.Payment{Id: fmt.Sprintf("pay_%d", id), Amount: m.GetAmount(), Currency: m.GetCurrency(), Customer: m.GetCustomer(), Status: "succeeded"}), nil
}

func (s *service) gate(key string) func() {
	ch := make(chan struct{})
	s.gates.Store(key, ch)
	return sync.OnceFunc(func() { close(ch) })
}

type env struct {
	db     *db
	svc    *service
	url    string
	client paymentsv1connect.PaymentServiceClient
	codes  chan connect.Code // the code of each answer the server sent; 0 for a response
}

func setup(t *testing.T, b backend, cfg idem.Config) *env {
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
	ic, err := idemconnect.NewServer(mw, &idemconnect.Config{Procedures: []idemconnect.Procedure{
		idemconnect.NewProcedure[paymentsv1.Payment](paymentsv1connect.PaymentServiceCreatePaymentProcedure, nil),
	}})
	if err != nil {
		t.Fatal(err)
	}
	svc := &service{db: d, inside: make(chan string, 100)}
	codes := make(chan connect.Code, 100)
	observe := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			res, err := next(ctx, req)
			code := connect.Code(0)
			if err != nil {
				code = connect.CodeOf(err)
			}
			select {
			case codes <- code:
			default:
			}
			return res, err
		}
	})
	mux := http.NewServeMux()
	mux.Handle(paymentsv1connect.NewPaymentServiceHandler(svc, connect.WithInterceptors(observe, auth, ic)))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &env{db: d, svc: svc, url: srv.URL, client: paymentsv1connect.NewPaymentServiceClient(srv.Client(), srv.URL), codes: codes}
}

type answer struct {
	resp *connect.Response[paymentsv1.Payment]
	err  error
}

func (a answer) replayed() bool {
	if a.resp != nil {
		return a.resp.Header().Get("Idempotent-Replayed") == "true"
	}
	var ce *connect.Error
	return errors.As(a.err, &ce) && ce.Meta().Get("Idempotent-Replayed") == "true"
}

func (a answer) msg() *paymentsv1.Payment {
	if a.resp == nil {
		return nil
	}
	return a.resp.Msg
}

func (e *env) call(t *testing.T, client string, m *paymentsv1.CreatePaymentRequest, keys ...string) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	req := connect.NewRequest(m)
	req.Header().Set("Authorization", "Bearer "+client)
	for _, k := range keys {
		req.Header().Add("Idempotency-Key", k)
	}
	var a answer
	a.resp, a.err = e.client.CreatePayment(ctx, req)
	return a
}

func payment(amount int64) *paymentsv1.CreatePaymentRequest {
	return &paymentsv1.CreatePaymentRequest{Amount: amount, Currency: "usd", Customer: "cus_1"}
}

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
