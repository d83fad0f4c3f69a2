package idemconnect_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	paymentsv1 "github.com/idemkit/idem/api/payments/v1"
	"github.com/idemkit/idem/api/payments/v1/paymentsv1connect"
	"github.com/idemkit/idem/idemconnect"
	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var quiet = slog.New(slog.DiscardHandler)

const testTimeout = 30 * time.Second

// backend is a real store with a business table that handlers write to in
// the key's transaction.
type backend struct {
	name string
	open func(t *testing.T) *db
}

// db is an open backend.
type db struct {
	store  idemstore.Store
	insert func(ctx context.Context, key string) (int64, error) // in the request's transaction
	rows   func(t *testing.T) int                               // business rows, committed
	down   func()                                               // makes the store fail every call
}

var backends = []backend{
	{"SQLite", func(t *testing.T) *db {
		store, err := idemsqlite.Open(filepath.Join(t.TempDir(), "idem.db"), &idemsqlite.Config{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		if err := store.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := store.DB().Exec(`CREATE TABLE business (id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		return &db{
			store: store,
			insert: func(ctx context.Context, key string) (int64, error) {
				tx, err := idemsqlite.TxFromContext(ctx)
				if err != nil {
					return 0, err
				}
				var id int64
				err = tx.QueryRowContext(ctx, `INSERT INTO business (key) VALUES (?) RETURNING id`, key).Scan(&id)
				return id, err
			},
			rows: func(t *testing.T) int {
				var n int
				if err := store.ReadDB().QueryRow(`SELECT count(*) FROM business`).Scan(&n); err != nil && !errors.Is(err, sql.ErrConnDone) {
					t.Fatal(err)
				}
				return n
			},
			down: func() { store.Close() },
		}
	}},
	{"PostgreSQL", func(t *testing.T) *db {
		pool := pgtest.NewPool(t)
		store, err := idempg.New(pool, &idempg.Config{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := store.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `CREATE TABLE business (id bigserial PRIMARY KEY, key text NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		return &db{
			store: store,
			insert: func(ctx context.Context, key string) (int64, error) {
				tx, err := idempg.TxFromContext(ctx)
				if err != nil {
					return 0, err
				}
				var id int64
				err = tx.QueryRow(ctx, `INSERT INTO business (key) VALUES ($1) RETURNING id`, key).Scan(&id)
				return id, err
			},
			rows: func(t *testing.T) int {
				var n int
				if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM business`).Scan(&n); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
					t.Fatal(err)
				}
				return n
			},
			down: pool.Close,
		}
	}},
}

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
	id, err := s.db.insert(ctx, scope.Key)
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
	d := b.open(t)
	cfg.ClientID = func(r *http.Request) (string, bool) {
		c, ok := r.Context().Value(clientKey{}).(string)
		return c, ok && c != ""
	}
	cfg.Logger = quiet
	mw, err := idem.New(d.store, &cfg)
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
