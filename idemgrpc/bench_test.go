package idemgrpc_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/idemkit/idem"
	paymentsv1 "github.com/idemkit/idem/api/payments/v1"
	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/pgtest"
)

// clientIDOf reads the client that auth put in the context.
func clientIDOf(r *http.Request) (string, bool) {
	c, ok := r.Context().Value(clientKey{}).(string)
	return c, ok && c != ""
}

// BenchmarkInterceptor is the interceptor's own cost per call, without a
// network or a database: the memory store, the interceptor called as
// grpc-go calls it, and a handler that answers a payment. Compare
// new-key and replay with bare, the handler alone; root package's
// BenchmarkMiddleware is the HTTP middleware's.
//
//	go test -run '^$' -bench Interceptor -benchmem -count 5 ./idemgrpc
func BenchmarkInterceptor(b *testing.B) {
	mw, err := idem.New(idemtest.NewMemoryStore(), &idem.Config{ClientID: clientIDOf, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	s, err := idemgrpc.NewServer(mw, nil)
	if err != nil {
		b.Fatal(err)
	}
	info := &grpc.UnaryServerInfo{FullMethod: paymentsv1.PaymentService_CreatePayment_FullMethodName}
	handler := func(ctx context.Context, req any) (any, error) {
		r := req.(*paymentsv1.CreatePaymentRequest)
		return &paymentsv1.Payment{Id: "pay_1", Amount: r.Amount, Currency: r.Currency, Customer: r.Customer, Status: "succeeded"}, nil
	}
	req := &paymentsv1.CreatePaymentRequest{Amount: 12500, Currency: "eur", Customer: "cus_8e03978e40d5", Description: `Order 2026-0042, "express" delivery`}
	base := context.WithValue(context.Background(), clientKey{}, "alice")
	call := func(b *testing.B, key string) {
		ctx := metadata.NewIncomingContext(base, metadata.Pairs("idempotency-key", key))
		if _, err := s.Intercept(ctx, req, info, handler); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("bare", func(b *testing.B) {
		b.ReportAllocs()
		start, _ := processCPU()
		defer reportCPU(b, start)
		for b.Loop() {
			resp, err := handler(base, req)
			if err != nil {
				b.Fatal(err)
			}
			sink = resp
		}
	})
	b.Run("new-key", func(b *testing.B) {
		b.ReportAllocs()
		start, _ := processCPU()
		defer reportCPU(b, start)
		i := 0
		for b.Loop() {
			i++
			call(b, "k-"+strconv.Itoa(i))
		}
	})
	b.Run("replay", func(b *testing.B) {
		b.ReportAllocs()
		call(b, "replay")
		start, _ := processCPU()
		defer reportCPU(b, start)
		for b.Loop() {
			call(b, "replay")
		}
	})
}

// BenchmarkPostgres is one call after another over loopback, on
// PostgreSQL: a payment whose handler inserts a row, over gRPC and over
// HTTP, bare (the insert alone, autocommitted) and behind idem in atomic
// mode with a new key per call (the insert and the key commit together)
// or one key (every call after the first a replay). Compare each with the
// bare of its protocol.
//
//	go test -run '^$' -bench Postgres -count 3 ./idemgrpc
func BenchmarkPostgres(b *testing.B) {
	pool := pgtest.NewPool(b)
	ctx := context.Background()
	store, err := idempg.New(pool, &idempg.Config{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE business (id bigserial PRIMARY KEY, key text NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	mw, err := idem.New(store, &idem.Config{ClientID: clientIDOf, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	grpcBare, grpcIdem := benchGRPC(b, pool, nil), benchGRPC(b, pool, mw)
	httpBare, httpIdem := benchHTTP(b, pool, nil), benchHTTP(b, pool, mw)
	req := &paymentsv1.CreatePaymentRequest{Amount: 12500, Currency: "eur", Customer: "cus_8e03978e40d5"}
	body, _ := json.Marshal(map[string]any{"amount": 12500, "currency": "eur", "customer": "cus_8e03978e40d5"})
	grpcCall := func(b *testing.B, c paymentsv1.PaymentServiceClient, key string) {
		md := metadata.Pairs("authorization", "Bearer alice")
		if key != "" {
			md.Append("idempotency-key", key)
		}
		if _, err := c.CreatePayment(metadata.NewOutgoingContext(ctx, md), req); err != nil {
			b.Fatal(err)
		}
	}
	httpCall := func(b *testing.B, url, key string) {
		r, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		r.Header.Set("Authorization", "Bearer alice")
		r.Header.Set("Content-Type", "application/json")
		if key != "" {
			r.Header.Set("Idempotency-Key", key)
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	run := 0
	for _, v := range []struct {
		name string
		call func(b *testing.B, key string)
		keys string // "": none; "new": one per call; "one": the same
	}{
		{"grpc/bare", func(b *testing.B, k string) { grpcCall(b, grpcBare, k) }, ""},
		{"grpc/new-key", func(b *testing.B, k string) { grpcCall(b, grpcIdem, k) }, "new"},
		{"grpc/replay", func(b *testing.B, k string) { grpcCall(b, grpcIdem, k) }, "one"},
		{"http/bare", func(b *testing.B, k string) { httpCall(b, httpBare, k) }, ""},
		{"http/new-key", func(b *testing.B, k string) { httpCall(b, httpIdem, k) }, "new"},
		{"http/replay", func(b *testing.B, k string) { httpCall(b, httpIdem, k) }, "one"},
	} {
		b.Run(v.name, func(b *testing.B) {
			run++
			one := fmt.Sprintf("one-%s-%d", v.name, run)
			switch v.keys { // a first call, untimed: connections, the key to replay
			case "one":
				v.call(b, one)
			case "new":
				v.call(b, "warm-"+one)
			default:
				v.call(b, "")
			}
			start, _ := processCPU()
			defer reportCPU(b, start)
			i := 0
			for b.Loop() {
				i++
				switch v.keys {
				case "new":
					v.call(b, fmt.Sprintf("new-%s-%d-%d", v.name, run, i))
				case "one":
					v.call(b, one)
				default:
					v.call(b, "")
				}
			}
		})
	}
}

// insertRow inserts the handler's row: in the key's transaction behind
// idem, autocommitted on pool without it.
func insertRow(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var id int64
	if _, ok := idem.ScopeFromContext(ctx); ok {
		tx, err := idempg.TxFromContext(ctx)
		if err != nil {
			return 0, err
		}
		return id, tx.QueryRow(ctx, `INSERT INTO business (key) VALUES ('k') RETURNING id`).Scan(&id)
	}
	return id, pool.QueryRow(ctx, `INSERT INTO business (key) VALUES ('k') RETURNING id`).Scan(&id)
}

type benchService struct {
	paymentsv1.UnimplementedPaymentServiceServer
	pool *pgxpool.Pool
}

func (s benchService) CreatePayment(ctx context.Context, req *paymentsv1.CreatePaymentRequest) (*paymentsv1.Payment, error) {
	id, err := insertRow(ctx, s.pool)
	if err != nil {
		return nil, err
	}
	return &paymentsv1.Payment{Id: "pay_" + strconv.FormatInt(id, 10), Amount: req.Amount, Currency: req.Currency, Customer: req.Customer, Status: "succeeded"}, nil
}

// benchGRPC serves the payment over gRPC, behind mw unless it is nil.
func benchGRPC(b *testing.B, pool *pgxpool.Pool, mw *idem.Middleware) paymentsv1.PaymentServiceClient {
	ics := []grpc.UnaryServerInterceptor{auth}
	if mw != nil {
		s, err := idemgrpc.NewServer(mw, nil)
		if err != nil {
			b.Fatal(err)
		}
		ics = append(ics, s.UnaryInterceptor())
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(ics...))
	paymentsv1.RegisterPaymentServiceServer(srv, benchService{pool: pool})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(lis)
	b.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return paymentsv1.NewPaymentServiceClient(conn)
}

// benchHTTP serves the payment over HTTP, behind mw unless it is nil.
func benchHTTP(b *testing.B, pool *pgxpool.Pool, mw *idem.Middleware) string {
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Amount   int64  `json:"amount"`
			Currency string `json:"currency"`
			Customer string `json:"customer"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		id, err := insertRow(r.Context(), pool)
		if err != nil {
			http.Error(w, "insert failed", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(map[string]any{"id": "pay_" + strconv.FormatInt(id, 10), "amount": req.Amount, "currency": req.Currency, "customer": req.Customer, "status": "succeeded"})
	})
	if mw != nil {
		h = mw.Wrap(h)
	}
	authed := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), clientKey{}, "alice")))
	})
	srv := httptest.NewServer(authed)
	b.Cleanup(srv.Close)
	return srv.URL
}

var _ idemstore.Store = (*idempg.Store)(nil)

// sink keeps the bare handler's answer alive, so that it is made.
var sink any
