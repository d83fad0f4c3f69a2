package payments_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	paymentsv1 "github.com/idemkit/idem/api/payments/v1"
	"github.com/idemkit/idem/api/payments/v1/paymentsv1connect"
	"github.com/idemkit/idem/cmd/internal/database"
	"github.com/idemkit/idem/cmd/internal/payments"
	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/idemrpc"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/bearer"
	"github.com/idemkit/idem/internal/pgtest"
)

// slowProcessor is the simulated processor, answering after a delay: a
// charge takes longer than the client's hedging delay, so hedged copies
// are always sent.
type slowProcessor struct {
	*payments.SimulatedProcessor
	delay time.Duration
}

func (p slowProcessor) Charge(ctx context.Context, key string, params payments.Params) (string, error) {
	select {
	case <-time.After(p.delay):
	case <-ctx.Done():
		return "", ctx.Err()
	}
	return p.SimulatedProcessor.Charge(ctx, key, params)
}

// rpcFixture is the payments service's RPC API, as paymentsd serves it,
// on a real database.
type rpcFixture struct {
	repo     payments.Repo
	proc     *payments.SimulatedProcessor
	started  atomic.Int64 // runs of the payment's first phase: handler runs
	calls    atomic.Int64 // CreatePayment calls that reached the server
	mu       sync.Mutex
	failures []string // CreatePayment answers after which the handler may run again
	grpcAddr string
	httpURL  string
}

func setupRPC(t *testing.T, kind string, delay time.Duration) *rpcFixture {
	t.Helper()
	url := "sqlite:" + filepath.Join(t.TempDir(), "payments.db")
	if kind == "postgres" {
		url = pgtest.NewDatabase(t)
	}
	ctx := context.Background()
	db, err := database.Open(ctx, url, &database.Config{Migrate: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	repo, err := payments.NewRepo(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	f := &rpcFixture{repo: repo, proc: payments.NewSimulatedProcessor()}
	svc, err := payments.NewService(payments.Config{
		Repo: repo, Store: db.Store(), Logger: quiet, Processor: slowProcessor{f.proc, delay},
		Tokens: must(bearer.Parse("sk_alice=alice,sk_bob=bob")),
		BeforePhase: func(ctx context.Context, point string) {
			if point == idemstore.RecoveryStarted {
				f.started.Add(1)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	rpc, err := svc.RPC()
	if err != nil {
		t.Fatal(err)
	}
	count := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if info.FullMethod != paymentsv1.PaymentService_CreatePayment_FullMethodName {
			return handler(ctx, req)
		}
		f.calls.Add(1)
		resp, err := handler(ctx, req)
		// A failure after the handler may have started: not a payment,
		// nor ABORTED for a key in flight, nor a copy that the client
		// cancelled once another had answered. A run whose lease was
		// taken over is answered ABORTED "took this key over".
		msg := status.Convert(err).Message()
		if c := status.Code(err); c != codes.OK && c != codes.Canceled && (c != codes.Aborted || strings.Contains(msg, "took this key over")) {
			f.mu.Lock()
			f.failures = append(f.failures, c.String()+": "+msg)
			f.mu.Unlock()
		}
		return resp, err
	}
	srv := rpc.NewGRPCServer(grpc.ChainUnaryInterceptor(count))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	f.grpcAddr = lis.Addr().String()
	mux := http.NewServeMux()
	mux.Handle(rpc.ConnectHandler())
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	f.httpURL = hs.URL
	return f
}

// client returns a PaymentService client; opts may set a service config.
func (f *rpcFixture) client(t *testing.T, opts ...grpc.DialOption) paymentsv1.PaymentServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(f.grpcAddr, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return paymentsv1.NewPaymentServiceClient(conn)
}

func callCtx(t *testing.T, token, key string) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	kv := []string{"authorization", "Bearer " + token}
	if key != "" {
		kv = append(kv, "idempotency-key", key)
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

func TestRPCCreatePayment(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := setupRPC(t, kind, 0)
			c := f.client(t)
			req := &paymentsv1.CreatePaymentRequest{Amount: 4200, Currency: "usd", Customer: "cus_1"}
			first, err := c.CreatePayment(callCtx(t, "sk_alice", "rpc-1"), req)
			if err != nil || first.GetStatus() != payments.StatusSucceeded {
				t.Fatalf("CreatePayment: %v %v", first, err)
			}
			var md metadata.MD
			again, err := c.CreatePayment(callCtx(t, "sk_alice", "rpc-1"), req, grpc.Header(&md))
			if err != nil || !proto.Equal(first, again) || len(md.Get("idempotent-replayed")) != 1 {
				t.Fatalf("retry: %v %v %v, want the replay of %v", again, err, md, first)
			}
			// The same key over Connect is the same call: the replay.
			cc := paymentsv1connect.NewPaymentServiceClient(http.DefaultClient, f.httpURL)
			creq := connect.NewRequest(req)
			creq.Header().Set("Authorization", "Bearer sk_alice")
			creq.Header().Set("Idempotency-Key", "rpc-1")
			cres, err := cc.CreatePayment(context.Background(), creq)
			if err != nil || !proto.Equal(cres.Msg, first) || cres.Header().Get("Idempotent-Replayed") != "true" {
				t.Fatalf("over Connect: %v %v, want the replay of %v", cres, err, first)
			}
			got, err := c.GetPayment(callCtx(t, "sk_alice", ""), &paymentsv1.GetPaymentRequest{Id: first.GetId()})
			if err != nil || !proto.Equal(got, first) {
				t.Errorf("GetPayment: %v %v, want %v", got, err, first)
			}
			if _, err := c.GetPayment(callCtx(t, "sk_bob", ""), &paymentsv1.GetPaymentRequest{Id: first.GetId()}); status.Code(err) != codes.NotFound {
				t.Errorf("bob's GetPayment of alice's payment: %v, want NOT_FOUND", err)
			}
			// The key in request_id (AIP-155).
			byField := &paymentsv1.CreatePaymentRequest{Amount: 100, Currency: "usd", Customer: "cus_1", RequestId: "req-7"}
			a, err1 := c.CreatePayment(callCtx(t, "sk_alice", ""), byField)
			b, err2 := c.CreatePayment(callCtx(t, "sk_alice", ""), byField)
			if err1 != nil || err2 != nil || !proto.Equal(a, b) {
				t.Errorf("request_id: %v %v, then %v %v", a, err1, b, err2)
			}
			// An invalid parameter names its field, and frees the key.
			bad := &paymentsv1.CreatePaymentRequest{Amount: 0, Currency: "usd", Customer: "cus_1"}
			_, err = c.CreatePayment(callCtx(t, "sk_alice", "rpc-bad"), bad)
			if st := status.Convert(err); st.Code() != codes.InvalidArgument || len(st.Details()) != 1 ||
				st.Details()[0].(*errdetails.BadRequest).GetFieldViolations()[0].GetField() != "amount" {
				t.Errorf("amount 0: %v %v, want INVALID_ARGUMENT naming amount", err, st.Details())
			}
			if _, err := c.CreatePayment(callCtx(t, "sk_alice", "rpc-bad"), req); err != nil {
				t.Errorf("corrected retry with the key: %v", err)
			}
			if _, err := c.CreatePayment(callCtx(t, "sk_nobody", "rpc-2"), req); status.Code(err) != codes.Unauthenticated {
				t.Errorf("unknown token: %v", err)
			}
			if n, c := f.started.Load(), f.proc.Charges(); n != 3 || c != 3 {
				t.Errorf("%d payments started and %d charges, want 3 and 3", n, c)
			}
		})
	}
}

// hedge is gRFC A6's hedging policy, as a client interceptor: grpc-go
// parses a service config's hedgingPolicy but does not implement it (it
// sends one attempt). It sends the call, then another copy every delay
// until copies were sent, and a copy at once when one fails with a
// non-fatal code (ABORTED: the key is in flight; UNAVAILABLE); the first
// answer that is a success or a fatal error is the call's. Every copy has
// the call's metadata, and so the key that idemgrpc's interceptor, above
// this one, attached.
func hedge(copies int, delay time.Duration) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel() // the copies still running: a committed call cancels them
		type result struct {
			reply proto.Message
			err   error
		}
		results := make(chan result, copies)
		sent, pending := 0, 0
		send := func() {
			sent++
			pending++
			m := reply.(proto.Message).ProtoReflect().New().Interface()
			go func() { results <- result{m, invoker(ctx, method, req, m, cc, opts...)} }()
		}
		send()
		timer := time.NewTimer(delay)
		defer timer.Stop()
		var last error
		for pending > 0 {
			select {
			case <-timer.C:
				if sent < copies {
					send()
					timer.Reset(delay)
				}
			case r := <-results:
				pending--
				if c := status.Code(r.err); c != codes.Aborted && c != codes.Unavailable {
					if r.err == nil {
						proto.Reset(reply.(proto.Message))
						proto.Merge(reply.(proto.Message), r.reply)
					}
					return r.err
				}
				last = r.err
				if sent < copies {
					send()
					timer.Reset(delay)
				}
			}
		}
		return last
	}
}

// TestRPCHedgedCallsRunOnce makes 500 payments with a client that hedges
// every call (3 copies, 10 ms apart), with idemgrpc's client interceptor giving each payment one
// key: each payment's handler runs once and charges once, and every answer
// a client got is the one stored.
func TestRPCHedgedCallsRunOnce(t *testing.T) {
	t.Parallel()
	const payments, workers = 500, 25
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := setupRPC(t, kind, 25*time.Millisecond) // a charge outlasts the hedging delay
			ic, err := idemgrpc.UnaryClientInterceptor(nil)
			if err != nil {
				t.Fatal(err)
			}
			var copies atomic.Int64
			count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				copies.Add(1)
				return invoker(ctx, method, req, reply, cc, opts...)
			}
			hedged := f.client(t, grpc.WithChainUnaryInterceptor(ic, hedge(3, 10*time.Millisecond), count))
			answers := make([]*paymentsv1.Payment, payments)
			request := func(i int) *paymentsv1.CreatePaymentRequest {
				return &paymentsv1.CreatePaymentRequest{Amount: 1001 + 100*int64(i), Currency: "usd", Customer: "cus_" + strconv.Itoa(i)}
			}
			key := func(i int) string { return "hedge-" + strconv.Itoa(i) }
			work := make(chan int)
			var wg sync.WaitGroup
			for range workers {
				wg.Go(func() {
					for i := range work {
						// The application names the payment's key; the
						// interceptor sends it on every hedged copy.
						ctx := idemrpc.WithKey(callCtx(t, "sk_alice", ""), key(i))
						p, err := hedged.CreatePayment(ctx, request(i))
						if err != nil {
							t.Errorf("payment %d: %v", i, err)
							continue
						}
						answers[i] = p
					}
				})
			}
			for i := range payments {
				work <- i
			}
			close(work)
			wg.Wait()
			if t.Failed() {
				return
			}
			calls := f.calls.Load()
			t.Logf("%s: %d payments, %d copies sent, %d reached the server, %d handler runs, %d charges", kind, payments, copies.Load(), calls, f.started.Load(), f.proc.Charges())
			if calls <= payments {
				t.Errorf("%d calls for %d payments: the client sent no hedged copies", calls, payments)
			}
			// A copy never runs the handler of a payment whose key is held
			// or completed: one run per payment. A run that failed before
			// its first phase committed (a store timeout, or a lease taken
			// over, on a machine loaded enough) had no effect, and a later
			// copy runs it again; each such failure is logged.
			f.mu.Lock()
			failures := f.failures
			f.mu.Unlock()
			for _, msg := range failures {
				t.Logf("a copy failed: %s", msg)
			}
			if n := f.started.Load(); n < payments || n > payments+int64(len(failures)) {
				t.Errorf("%d handler runs, want %d (and at most one more per failed copy: %d)", n, payments, len(failures))
			}
			if c := f.proc.Charges(); c != payments {
				t.Errorf("%d charges, want %d", c, payments)
			}
			// Every answer is the stored one: a plain client retrying with
			// the payment's key gets it replayed, and it is the payment
			// recorded, once.
			plain := f.client(t)
			for i, p := range answers {
				var md metadata.MD
				stored, err := plain.CreatePayment(callCtx(t, "sk_alice", key(i)), request(i), grpc.Header(&md))
				if err != nil || !proto.Equal(stored, p) || len(md.Get("idempotent-replayed")) != 1 {
					t.Errorf("payment %d: answered %v, stored %v (%v, %v)", i, p, stored, err, md)
				}
				if got, err := plain.GetPayment(callCtx(t, "sk_alice", ""), &paymentsv1.GetPaymentRequest{Id: p.GetId()}); err != nil || !proto.Equal(got, p) {
					t.Errorf("payment %d: answered %v, recorded %v (%v)", i, p, got, err)
				}
				if n, err := f.repo.Count(context.Background(), "alice", key(i)); err != nil || n != 1 {
					t.Errorf("payment %d: %d payments recorded with its key (%v), want 1", i, n, err)
				}
			}
		})
	}
}
