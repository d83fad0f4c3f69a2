package payments_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/internal/database"
	"github.com/idemkit/idem/cmd/internal/mysqltest"
	"github.com/idemkit/idem/cmd/internal/payments"
	"github.com/idemkit/idem/idemfingerprint"
	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/bearer"
	"github.com/idemkit/idem/internal/pgtest"
)

// flakyProcessor is the simulated processor, whose answers can be lost
// after it charged.
type flakyProcessor struct {
	*payments.SimulatedProcessor
	mu    sync.Mutex
	fail  int // calls to refuse before charging
	lose  int // answers to lose after charging
	calls int
	keys  []string // the keys of the calls, in order
}

func (p *flakyProcessor) Charge(ctx context.Context, key string, params payments.Params) (string, error) {
	p.mu.Lock()
	p.keys = append(p.keys, key)
	if p.fail > 0 {
		p.fail--
		p.calls++
		p.mu.Unlock()
		return "", errors.New("processor unavailable")
	}
	p.mu.Unlock()
	id, err := p.SimulatedProcessor.Charge(ctx, key, params)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if err == nil && p.lose > 0 {
		p.lose--
		return "", errors.New("connection lost after the charge was sent")
	}
	return id, err
}

type phasedFixture struct {
	*fixture
	svc  *payments.Service
	db   *database.DB
	proc *flakyProcessor
}

func setupPhased(t *testing.T, kind string) *phasedFixture {
	t.Helper()
	url := "sqlite:" + filepath.Join(t.TempDir(), "payments.db")
	switch kind {
	case "postgres":
		url = pgtest.NewDatabase(t)
	case "mysql":
		url = mysqltest.NewDatabase(t)
	}
	return setupPhasedOn(t, url)
}

// setupPhasedOn is setupPhased on the database at url.
func setupPhasedOn(t *testing.T, url string) *phasedFixture {
	t.Helper()
	ctx := context.Background()
	db, err := database.Open(ctx, url, &database.Config{Migrate: true, Logger: quiet})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(db.Close)
	repo, err := payments.NewRepo(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	proc := &flakyProcessor{SimulatedProcessor: payments.NewSimulatedProcessor()}
	svc, err := payments.NewService(payments.Config{
		Repo: repo, Store: db.Store(), Logger: quiet, Processor: proc,
		Tokens: must(bearer.Parse("sk_alice=alice")),
		Idem:   idem.Config{Mode: idem.ModeTwoPhase},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(svc.Handler())
	t.Cleanup(srv.Close)
	return &phasedFixture{fixture: &fixture{url: srv.URL, repo: repo}, svc: svc, db: db, proc: proc}
}

func TestPaymentsByPhases(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := setupPhased(t, kind)
			body := `{"amount":4200,"currency":"usd","customer":"cus_1"}`

			f.proc.lose = 1
			first := f.post(t, "sk_alice", "k-lost", jsonType, body)
			if first.status != http.StatusServiceUnavailable || first.header.Get("Retry-After") == "" {
				t.Fatalf("lost answer: %d %s; want 503 with Retry-After", first.status, first.body)
			}
			retry := f.post(t, "sk_alice", "k-lost", jsonType, body)
			p := decode[payments.Payment](t, retry.body)
			if retry.status != http.StatusCreated || p.Status != payments.StatusSucceeded {
				t.Fatalf("retry: %d %s; want 201 succeeded", retry.status, retry.body)
			}
			if n, _ := f.repo.Count(context.Background(), "alice", "k-lost"); n != 1 || f.proc.Charges() != 1 {
				t.Errorf("%d payments and %d charges; want 1 and 1", n, f.proc.Charges())
			}
			got, err := f.repo.Get(context.Background(), "alice", p.ID)
			if err != nil || got.Status != payments.StatusSucceeded {
				t.Errorf("stored payment = %+v, %v; want succeeded", got, err)
			}

			declined := `{"amount":4202,"currency":"usd","customer":"cus_1"}`
			d := f.post(t, "sk_alice", "k-declined", jsonType, declined)
			if pr := decode[idem.Problem](t, d.body); d.status != http.StatusPaymentRequired || pr.Code != string(payments.ProblemDeclined.Code) {
				t.Fatalf("declined card: %d %s; want 402 payment-declined", d.status, d.body)
			}
			again := f.post(t, "sk_alice", "k-declined", jsonType, declined)
			if again.status != http.StatusPaymentRequired || again.header.Get(idem.HeaderReplayed) != "true" || string(again.body) != string(d.body) {
				t.Errorf("retry of the decline: %d %s; want the 402 replayed", again.status, again.body)
			}
			if n, _ := f.repo.Count(context.Background(), "alice", "k-declined"); n != 1 {
				t.Errorf("%d payments for the declined key; want 1, declined", n)
			}
		})
	}
}

// TestPhasesNeedOneConnection runs payments by phases on a PostgreSQL pool
// of one connection: each phase holds it for its transaction and must
// never wait for a second one, which would wait forever once every
// connection is held that way (as 64 requests on a pool of 6 did, when the
// final phase read the payment outside its transaction).
func TestPhasesNeedOneConnection(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("pool_max_conns", "1")
	u.RawQuery = q.Encode()
	f := setupPhasedOn(t, u.String())
	// A client that gives up: the server then cancels the stuck request's
	// context, so that the test fails instead of hanging in its cleanup.
	client := &http.Client{Timeout: 30 * time.Second}
	for i, amount := range []int{4200, 4202} { // succeeded, declined
		req, _ := http.NewRequest(http.MethodPost, f.url+"/v1/payments", strings.NewReader(fmt.Sprintf(`{"amount":%d,"currency":"usd","customer":"cus_1"}`, amount)))
		req.Header.Set("Authorization", "Bearer sk_alice")
		req.Header.Set("Idempotency-Key", fmt.Sprintf(`"one-conn-%d"`, i))
		req.Header.Set("Content-Type", jsonType)
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("amount %d: %v: a phase waits for a second connection", amount, err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusCreated && res.StatusCode != http.StatusPaymentRequired {
			t.Errorf("amount %d: status %d; want 201 or 402", amount, res.StatusCode)
		}
	}
}

func TestResumerFinishesAbandonedPayment(t *testing.T) {
	t.Parallel()
	f := setupPhased(t, "sqlite")
	body := `{"amount":4200,"currency":"usd","customer":"cus_1"}`
	f.proc.lose = 1
	if r := f.post(t, "sk_alice", "k-gone", jsonType, body); r.status != http.StatusServiceUnavailable {
		t.Fatalf("first attempt: %d; want 503", r.status)
	}
	// The client gives up; the resumer finishes the payment.
	store := f.db.Store().(idemstore.RecoveryStore)
	c, err := idem.NewResumer(store, &idem.Config{
		Logger: quiet, Now: func() time.Time { return time.Now() }, Resume: idem.ResumeOpts{Operations: map[string]idem.Phases{"POST /v1/payments": f.svc.ResumePhases()}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := c.RunOnce(context.Background()); err != nil || res.Completed != 1 {
		t.Fatalf("RunOnce = %+v, %v; want the payment completed", res, err)
	}
	back := f.post(t, "sk_alice", "k-gone", jsonType, body)
	if p := decode[payments.Payment](t, back.body); back.status != http.StatusCreated || back.header.Get(idem.HeaderReplayed) != "true" || p.Status != payments.StatusSucceeded {
		t.Errorf("client's return: %d %s; want the resumer's 201, replayed", back.status, back.body)
	}
	if f.proc.Charges() != 1 || f.proc.calls != 2 {
		t.Errorf("%d charges in %d calls; want 1 in 2", f.proc.Charges(), f.proc.calls)
	}
}

// TestProcessordDeclineIsStored: processord declines amounts ending in 02
// with a 402; the phased payment records it as declined and answers 402
// payment-declined, replayed on retry.
func TestProcessordDeclineIsStored(t *testing.T) {
	t.Parallel()
	_, proc := startProcessorClient(t)
	f := setup(t, idem.ModeTwoPhase, proc)
	body := `{"amount":4202,"currency":"usd","customer":"cus_1"}`
	first := f.post(t, "sk_alice", "k-decl", jsonType, body)
	if p := decode[idem.Problem](t, first.body); first.status != http.StatusPaymentRequired || p.Code != string(payments.ProblemDeclined.Code) {
		t.Fatalf("declined card: %d %s; want 402 payment-declined", first.status, first.body)
	}
	again := f.post(t, "sk_alice", "k-decl", jsonType, body)
	if again.status != http.StatusPaymentRequired || again.header.Get(idem.HeaderReplayed) != "true" {
		t.Errorf("retry: %d %s; want the 402 replayed", again.status, again.body)
	}
	if n, _ := f.repo.Count(context.Background(), "alice", "k-decl"); n != 1 {
		t.Errorf("%d payments; want 1 (declined)", n)
	}
}

// failSettleOnce fails the first Settle, as a process that dies after the
// charge_created checkpoint and before the final phase commits.
type failSettleOnce struct {
	payments.Repo
	once sync.Once
}

func (r *failSettleOnce) Settle(ctx context.Context, clientID, id, status string) (*payments.Payment, error) {
	var err error
	r.once.Do(func() { err = errors.New("the final phase failed") })
	if err != nil {
		return nil, err
	}
	return r.Repo.(interface {
		Settle(context.Context, string, string, string) (*payments.Payment, error)
	}).Settle(ctx, clientID, id, status)
}

// TestFinishedPhaseIsNotRepeated: a failure after charge_created resumes
// there: the retry settles the payment without calling the processor again.
func TestFinishedPhaseIsNotRepeated(t *testing.T) {
	t.Parallel()
	proc := &flakyProcessor{SimulatedProcessor: payments.NewSimulatedProcessor()}
	f := setupWith(t, "sqlite", idem.ModeTwoPhase, proc, func(r payments.Repo) payments.Repo { return &failSettleOnce{Repo: r} })
	body := `{"amount":4200,"currency":"usd","customer":"cus_1"}`
	if r := f.post(t, "sk_alice", "k-settle", jsonType, body); r.status != http.StatusServiceUnavailable {
		t.Fatalf("first attempt: %d %s; want 503", r.status, r.body)
	}
	retry := f.post(t, "sk_alice", "k-settle", jsonType, body)
	if p := decode[payments.Payment](t, retry.body); retry.status != http.StatusCreated || p.Status != payments.StatusSucceeded {
		t.Fatalf("retry: %d %s; want 201 succeeded", retry.status, retry.body)
	}
	if proc.calls != 1 || proc.Charges() != 1 {
		t.Errorf("processor called %d times for %d charges; want once: the charge phase had finished", proc.calls, proc.Charges())
	}
	if n, _ := f.repo.Count(context.Background(), "alice", "k-settle"); n != 1 {
		t.Errorf("%d payments; want 1", n)
	}
}

// TestProcessorAlwaysRunsByPhases: a service with a processor runs its
// payments by phases even when its middleware is configured atomic (a lost
// processor answer is a 503 that the retry resumes, charging once), and
// refuses a repository that cannot settle a pending payment.
func TestProcessorAlwaysRunsByPhases(t *testing.T) {
	t.Parallel()
	proc := &flakyProcessor{SimulatedProcessor: payments.NewSimulatedProcessor(), lose: 1}
	f := setup(t, idem.ModeAtomic, proc)
	body := `{"amount":4200,"currency":"usd","customer":"cus_1"}`
	first := f.post(t, "sk_alice", "k-atomic", jsonType, body)
	if p := decode[idem.Problem](t, first.body); first.status != http.StatusServiceUnavailable || p.Code != string(idem.ProblemOperationUnfinished) {
		t.Fatalf("lost processor answer: %d %s; want 503 operation-unfinished", first.status, first.body)
	}
	if n, _ := f.repo.Count(context.Background(), "alice", "k-atomic"); n != 1 {
		t.Fatalf("%d payments after the lost answer; want the pending one", n)
	}
	retry := f.post(t, "sk_alice", "k-atomic", jsonType, body)
	if p := decode[payments.Payment](t, retry.body); retry.status != http.StatusCreated || p.Status != payments.StatusSucceeded {
		t.Fatalf("retry: %d %s; want 201 succeeded", retry.status, retry.body)
	}
	if proc.Charges() != 1 {
		t.Errorf("%d charges; want 1", proc.Charges())
	}

	_, err := payments.NewService(payments.Config{
		Repo: struct{ payments.Repo }{f.repo}, Store: idemtest.NewMemoryStore(), Processor: proc,
		Tokens: must(bearer.Parse("sk_alice=alice")),
	})
	if err == nil {
		t.Error("NewService with a processor and a repository that cannot settle = nil error; want one")
	}
}

// TestSimulatedProcessorDeclines: with no processord, the in-process
// processor declines amounts ending in 02, as processord does, so the 402
// of a payment whose card is declined is reachable without it.
func TestSimulatedProcessorDeclines(t *testing.T) {
	t.Parallel()
	f := setup(t, idem.ModeTwoPhase, payments.NewSimulatedProcessor())
	for _, tt := range []struct {
		amount int
		want   int
	}{{1002, http.StatusPaymentRequired}, {4202, http.StatusPaymentRequired}, {4200, http.StatusCreated}, {4203, http.StatusCreated}, {2, http.StatusPaymentRequired}} {
		r := f.post(t, "sk_alice", fmt.Sprintf("k-%d", tt.amount), jsonType, fmt.Sprintf(`{"amount":%d,"currency":"usd","customer":"cus_1"}`, tt.amount))
		if r.status != tt.want {
			t.Errorf("amount %d: %d %s; want %d", tt.amount, r.status, r.body, tt.want)
		}
	}
}

// TestResumerReleasesPaymentThatPassedNoPhase: a payment whose holder
// died before the pending payment committed has left nothing but its
// started key. The resumer releases that key once its lease expired,
// and leaves a live one to its holder; the dead holder is fenced out, also
// while a retry holds the key made anew at token 1, the dead holder's
// token (the chaos run once found a second payment there, before leases
// were fenced by their row's created_at), and the client's retry makes the
// payment once.
func TestResumerReleasesPaymentThatPassedNoPhase(t *testing.T) {
	t.Parallel()
	body := `{"amount":4200,"currency":"usd","customer":"cus_1"}`
	fp, err := idemfingerprint.New(idemfingerprint.Params{
		Method: http.MethodPost, Path: "/v1/payments", ContentType: jsonType, Body: []byte(body),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := setupPhased(t, kind)
			ctx := context.Background()
			store := f.db.Store().(idemstore.RecoveryStore)
			claim := func(key string, at time.Time) idemstore.Lease {
				t.Helper()
				res, err := store.Claim(ctx, idemstore.ClaimParams{
					Scope: idemstore.Scope{ClientID: "alice", Key: key}, Method: http.MethodPost, Path: "/v1/payments",
					RequestHash: fp.Hash, TwoPhase: true, Now: at,
					LockTimeout: idem.LockTimeoutDefault, Retention: idem.RetentionDefault,
				})
				if err != nil || res.Lease == nil {
					t.Fatalf("Claim = %+v, %v", res, err)
				}
				return res.Lease
			}
			dead := claim("k-dead", time.Now().Add(-idem.LockTimeoutDefault-time.Second))
			live := claim("k-live", time.Now())
			defer live.Release(ctx)

			c, err := idem.NewResumer(store, &idem.Config{Logger: quiet, Resume: idem.ResumeOpts{Operations: map[string]idem.Phases{"POST /v1/payments": f.svc.ResumePhases()}}})
			if err != nil {
				t.Fatal(err)
			}
			if res, err := c.RunOnce(ctx); err != nil || res.Released != 1 || res.Completed+res.Failed+res.Skipped != 0 {
				t.Fatalf("RunOnce = %+v, %v; want the dead holder's key released, the live one not listed", res, err)
			}
			keys := f.db.Store().(idemstore.KeyReader)
			if rec, err := keys.GetKey(ctx, idemstore.Scope{ClientID: "alice", Key: "k-dead"}); !errors.Is(err, idemstore.ErrKeyNotFound) {
				t.Errorf("released key = %+v, %v; want ErrKeyNotFound", rec, err)
			}
			if rec, err := keys.GetKey(ctx, idemstore.Scope{ClientID: "alice", Key: "k-live"}); err != nil || rec.Status != idemstore.StatusInFlight {
				t.Errorf("live holder's key = %+v, %v; want it still started", rec, err)
			}
			checkpoint := func() error {
				return dead.(idemstore.RecoveryLease).Checkpoint(dead.Context(ctx),
					idemstore.Recovery{Point: "payment_created", State: idem.State{"payment_id": "pay_x"}})
			}
			if err := checkpoint(); !errors.Is(err, idemstore.ErrLeaseLost) {
				t.Errorf("dead holder's checkpoint = %v; want ErrLeaseLost", err)
			}
			again := claim("k-dead", time.Now())
			if info := again.Info(); info.TakenOver || info.Token != 1 {
				t.Errorf("claim after the release = %+v; want a new key at token 1", info)
			}
			if err := checkpoint(); !errors.Is(err, idemstore.ErrLeaseLost) {
				t.Errorf("dead holder's checkpoint while the key is held again = %v; want ErrLeaseLost", err)
			}
			if err := again.Release(ctx); err != nil {
				t.Fatalf("release the second claim: %v", err)
			}
			dead.Release(ctx)

			retry := f.post(t, "sk_alice", "k-dead", jsonType, body)
			if retry.status != http.StatusCreated || retry.header.Get(idem.HeaderReplayed) == "true" {
				t.Fatalf("client's retry: %d %s; want a fresh 201", retry.status, retry.body)
			}
			if n, _ := f.repo.Count(ctx, "alice", "k-dead"); n != 1 || f.proc.Charges() != 1 {
				t.Errorf("%d payments and %d charges; want 1 and 1", n, f.proc.Charges())
			}
		})
	}
}

// TestKeyReusedAfterRetentionIsChargedAgain: a key reused after its
// retention makes a new payment, and the processor charges it: its key
// for the processor is derived from the new payment, not only from the
// client's key, which processord remembers for ever. Before, the identical
// payment was recorded as succeeded with the first payment's charge, and a
// payment with another amount was refused by processord (422) and stayed
// pending.
func TestKeyReusedAfterRetentionIsChargedAgain(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			psrv, proc := startProcessorClient(t)
			var now atomic.Int64
			now.Store(time.Now().UnixNano())
			clock := func() time.Time { return time.Unix(0, now.Load()) }
			f := setupEventsWith(t, kind, idem.Config{Mode: idem.ModeTwoPhase, Retention: time.Hour, Now: clock}, proc)

			seen := map[string]bool{}
			for i, body := range []string{
				`{"amount":4200,"currency":"usd","customer":"cus_1"}`,
				`{"amount":4200,"currency":"usd","customer":"cus_1"}`, // the same payment again
				`{"amount":4300,"currency":"usd","customer":"cus_1"}`, // another amount
			} {
				if i > 0 {
					now.Add(int64(2 * time.Hour))
				}
				res := f.post(t, "sk_alice", "k-reused", jsonType, body)
				if res.status != http.StatusCreated {
					t.Fatalf("payment %d with the key: %d %s; want 201", i+1, res.status, res.body)
				}
				p := decode[payments.Payment](t, res.body)
				if res.header.Get(idem.HeaderReplayed) == "true" || p.Status != payments.StatusSucceeded || seen[p.ID] {
					t.Fatalf("payment %d with the key: %d %s (replayed %q); want a new payment, 201 succeeded", i+1, res.status, res.body, res.header.Get(idem.HeaderReplayed))
				}
				seen[p.ID] = true
			}

			req, _ := http.NewRequest(http.MethodGet, psrv.URL+"/v1/charges?limit=10", nil)
			req.Header.Set("Authorization", "Bearer sk_pay")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var list struct {
				Data []struct {
					ID     string `json:"id"`
					Key    string `json:"idempotency_key"`
					Amount int64  `json:"amount"`
				} `json:"data"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
				t.Fatal(err)
			}
			keys := map[string]bool{}
			for _, c := range list.Data {
				keys[c.Key] = true
			}
			if len(list.Data) != 3 || len(keys) != 3 {
				t.Fatalf("processord holds %+v; want three charges, each with its own key", list.Data)
			}
		})
	}
}

// TestRecoveryPointOfAnEarlierVersionKeepsItsChargeKey: a payment whose
// first recovery point was saved by a version that derived the
// processor's key from the client's key alone, and whose charge may have
// been sent with that key, is charged with that key when it resumes: never
// with a new one, which would charge the card a second time.
func TestRecoveryPointOfAnEarlierVersionKeepsItsChargeKey(t *testing.T) {
	t.Parallel()
	f := setupPhased(t, "sqlite")
	body := `{"amount":4200,"currency":"usd","customer":"cus_1"}`
	f.proc.fail = 1
	if r := f.post(t, "sk_alice", "k-old", jsonType, body); r.status != http.StatusServiceUnavailable {
		t.Fatalf("first attempt: %d %s; want 503", r.status, r.body)
	}
	// Make the recovery point the earlier version's, which had no charge
	// key (nor the claim's creation, which idem.Phases save since), and
	// charge with that version's key, as it did before it died.
	res, err := f.db.Store().(*idemsqlite.Store).DB().Exec(
		`UPDATE idempotency_keys SET recovery_state = json_remove(recovery_state, '$.charge_key', '$."idem.claim_created"') WHERE recovery_point = 'payment_created'`)
	if n, _ := res.RowsAffected(); err != nil || n != 1 {
		t.Fatalf("strip the charge key: %d rows, %v", n, err)
	}
	oldKey := idem.DeriveKey(idem.ContextWithScope(context.Background(), idemstore.Scope{ClientID: "alice", Key: "k-old"}), "charge")
	charged, err := f.proc.SimulatedProcessor.Charge(context.Background(), oldKey, payments.Params{Amount: 4200, Currency: "usd", Customer: "cus_1"})
	if err != nil {
		t.Fatal(err)
	}

	retry := f.post(t, "sk_alice", "k-old", jsonType, body)
	if p := decode[payments.Payment](t, retry.body); retry.status != http.StatusCreated || p.Status != payments.StatusSucceeded {
		t.Fatalf("retry: %d %s; want 201 succeeded", retry.status, retry.body)
	}
	if f.proc.Charges() != 1 || len(f.proc.keys) != 2 || f.proc.keys[1] != oldKey || f.proc.keys[0] == oldKey {
		t.Fatalf("%d charges (%s first), keys %q; want 1 charge, the retry with the earlier version's key %q", f.proc.Charges(), charged, f.proc.keys, oldKey)
	}
}
