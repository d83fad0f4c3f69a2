package idempg_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemfingerprint"
	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/pgtest"
)

// fakeProcessor charges at most once per key, as a card processor with
// idempotency keys does. lose makes the next calls charge and then fail,
// as a call whose answer was lost.
type fakeProcessor struct {
	mu      sync.Mutex
	charges map[string]string // key -> charge id
	calls   int
	lose    int
}

func newFakeProcessor() *fakeProcessor { return &fakeProcessor{charges: map[string]string{}} }

func (p *fakeProcessor) charge(key string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if key == "" {
		return "", errors.New("a charge without an idempotency key")
	}
	id, ok := p.charges[key]
	if !ok {
		id = fmt.Sprintf("ch_%d", len(p.charges)+1)
		p.charges[key] = id
	}
	if p.lose > 0 {
		p.lose--
		return "", errors.New("the processor's answer was lost")
	}
	return id, nil
}

func (p *fakeProcessor) counts() (charges, calls int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.charges), p.calls
}

// paymentPhases are the phases of a payment after the request's own first
// phase, which a resumer runs too.
func paymentPhases(proc *fakeProcessor) idem.Phases {
	return idem.Phases{
		"payment_created": func(ctx context.Context, w http.ResponseWriter, st idem.State) (string, error) {
			id, err := proc.charge(idem.DeriveKey(ctx, "charge"))
			if err != nil {
				return "", err
			}
			st["charge_id"] = id
			return "charge_created", nil
		},
		"charge_created": func(ctx context.Context, w http.ResponseWriter, st idem.State) (string, error) {
			if err := write(ctx, st["payment"]+"-succeeded"); err != nil {
				return "", err
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"payment":%q,"charge":%q}`, st["payment"], st["charge_id"])
			return idemstore.RecoveryFinished, nil
		},
	}
}

// createPaymentPhases is the first phase: a pending payment row.
func createPaymentPhases(proc *fakeProcessor) idem.Phases {
	ph := paymentPhases(proc)
	ph[idemstore.RecoveryStarted] = func(ctx context.Context, w http.ResponseWriter, st idem.State) (string, error) {
		scope, _ := idem.ScopeFromContext(ctx)
		if err := write(ctx, scope.Key+"-pending"); err != nil {
			return "", err
		}
		st["payment"] = scope.Key
		return "payment_created", nil
	}
	return ph
}

func TestPhasesResumeAfterALostAnswer(t *testing.T) {
	t.Parallel()
	store := setup(t, nil)
	proc := newFakeProcessor()
	proc.lose = 1
	var firstPhase atomic.Int64
	ph := createPaymentPhases(proc)
	started := ph[idemstore.RecoveryStarted]
	ph[idemstore.RecoveryStarted] = func(ctx context.Context, w http.ResponseWriter, st idem.State) (string, error) {
		firstPhase.Add(1)
		return started(ctx, w, st)
	}
	srv := newServer(t, store, idem.Config{Mode: idem.ModeTwoPhase}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ph.Run(r.Context(), w)
	}))
	key := newScope("alice").Key

	first := post(t, srv.Client(), srv.URL, key, `{"amount":4200}`)
	if first.status != http.StatusServiceUnavailable || problemCode(first) != string(idem.ProblemOperationUnfinished) || first.header.Get("Retry-After") == "" {
		t.Fatalf("first answer = %d %s; want 503 operation-unfinished with Retry-After", first.status, first.body)
	}
	if n := countRows(t, store, key+"-pending"); n != 1 {
		t.Fatalf("%d pending rows after the lost answer; want 1, committed with its recovery point", n)
	}
	second := post(t, srv.Client(), srv.URL, key, `{"amount":4200}`)
	if second.status != http.StatusCreated || second.replayed {
		t.Fatalf("retry = %d %s; want 201, run", second.status, second.body)
	}
	third := post(t, srv.Client(), srv.URL, key, `{"amount":4200}`)
	if !third.replayed || string(third.body) != string(second.body) {
		t.Errorf("second retry = %d %s; want the replay of %s", third.status, third.body, second.body)
	}
	if charges, calls := proc.counts(); charges != 1 || calls != 2 {
		t.Errorf("processor saw %d charges in %d calls; want 1 charge, called twice with one derived key", charges, calls)
	}
	if n := firstPhase.Load(); n != 1 {
		t.Errorf("the first phase ran %d times; want 1", n)
	}
	if p, s := countRows(t, store, key+"-pending"), countRows(t, store, key+"-succeeded"); p != 1 || s != 1 {
		t.Errorf("%d pending and %d succeeded rows; want 1 and 1", p, s)
	}
}

// TestCheckpointEndsTheTransactionOfThePhase checks that a transaction
// taken before a checkpoint is of no use after it, and that the next one
// is new.
func TestCheckpointEndsTheTransactionOfThePhase(t *testing.T) {
	t.Parallel()
	store := setup(t, nil)
	ctx := context.Background()
	scope := newScope("alice")
	l := mustLease(t, store, params(idem.ModeTwoPhase, scope, "a", epoch)).(idemstore.RecoveryLease)
	lctx := l.Context(ctx)
	before, err := idempg.TxFromContext(lctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Checkpoint(ctx, idemstore.Recovery{Point: "one"}); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	if _, err := before.Exec(ctx, `INSERT INTO business (value) VALUES ($1)`, scope.Key+"-stale"); err == nil {
		t.Errorf("a write through a transaction from before the checkpoint succeeded")
	}
	if err := write(lctx, scope.Key+"-after"); err != nil {
		t.Fatalf("write after the checkpoint: %v", err)
	}
	complete(t, l, `{}`)
	if s, a := countRows(t, store, scope.Key+"-stale"), countRows(t, store, scope.Key+"-after"); s != 0 || a != 1 {
		t.Errorf("%d stale and %d later rows; want 0 and 1", s, a)
	}
}

// TestResumerOnTwoInstances abandons a payment after payment_created, as
// a process that dies holding its lease, and runs the resumers of two
// instances at once after the lease: one completes the key, once, and the
// client that comes back gets the answer.
func TestResumerOnTwoInstances(t *testing.T) {
	t.Parallel()
	connString := pgtest.NewDatabase(t)
	a := setupOn(t, newPool(t, connString, 4), nil)
	b, err := idempg.New(newPool(t, connString, 4), &idempg.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	proc := newFakeProcessor()
	body := `{"amount":4200}`
	fp, err := idemfingerprint.New(idemfingerprint.Params{Method: http.MethodPost, Path: "/", ContentType: "application/json", Body: []byte(body)})
	if err != nil {
		t.Fatal(err)
	}
	scope := newScope("alice")
	p := idemstore.ClaimParams{
		Scope: scope, Method: http.MethodPost, Path: "/", RequestHash: fp.Hash, RequestFields: fp.Fields,
		TwoPhase: true, Now: epoch, LockTimeout: lockTimeout, Retention: retention,
	}
	l := mustLease(t, a, p).(idemstore.RecoveryLease)
	if err := write(l.Context(ctx), scope.Key+"-pending"); err != nil {
		t.Fatal(err)
	}
	if err := l.Checkpoint(ctx, idemstore.Recovery{Point: "payment_created", State: idem.State{"payment": scope.Key}}); err != nil {
		t.Fatal(err)
	}
	// The process dies here, holding the lease.

	now := epoch.Add(lockTimeout)
	resumers := make([]*idem.Resumer, 2)
	for i, store := range []*idempg.Store{a, b} {
		c, err := idem.NewResumer(store, &idem.Config{
			LockTimeout: lockTimeout, Retention: retention, Logger: quiet,
			Now: func() time.Time { return now }, Resume: idem.ResumeOpts{Operations: map[string]idem.Phases{"POST /": paymentPhases(proc)}},
		})
		if err != nil {
			t.Fatal(err)
		}
		resumers[i] = c
	}
	results := make([]idem.ResumerResult, 2)
	var wg sync.WaitGroup
	for i, c := range resumers {
		wg.Go(func() {
			res, err := c.RunOnce(ctx)
			if err != nil {
				t.Errorf("RunOnce: %v", err)
			}
			results[i] = res
		})
	}
	wg.Wait()
	if done := results[0].Completed + results[1].Completed; done != 1 {
		t.Fatalf("passes = %+v; want the key completed once", results)
	}
	if charges, calls := proc.counts(); charges != 1 || calls != 1 {
		t.Errorf("processor saw %d charges in %d calls; want 1 in 1", charges, calls)
	}
	if n := countRows(t, a, scope.Key+"-succeeded"); n != 1 {
		t.Errorf("%d succeeded rows; want 1", n)
	}
	// The client comes back to the other instance and gets the answer.
	srv := newServer(t, b, idem.Config{Mode: idem.ModeTwoPhase, Now: func() time.Time { return now }},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			t.Errorf("the handler ran for a key the resumer finished")
		}))
	got := post(t, srv.Client(), srv.URL, scope.Key, body)
	if got.status != http.StatusCreated || !got.replayed || string(got.body) != fmt.Sprintf(`{"payment":%q,"charge":"ch_1"}`, scope.Key) {
		t.Errorf("client's return = %d %s (replayed %v); want the resumer's 201", got.status, got.body, got.replayed)
	}
	// The dead holder wakes up: fenced out.
	if err := l.Complete(ctx, response(`{}`)); !errors.Is(err, idemstore.ErrLeaseLost) {
		t.Errorf("stale holder's Complete = %v; want ErrLeaseLost", err)
	}
}

func TestTryLeadHasOneHolder(t *testing.T) {
	t.Parallel()
	for name, pooling := range map[string]bool{"SessionLock": false, "TransactionPooling": true} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testTryLead(t, pooling)
		})
	}
}

func testTryLead(t *testing.T, pooling bool) {
	connString := pgtest.NewDatabase(t)
	a := setupOn(t, newPool(t, connString, 2), &idempg.Config{TransactionPooling: pooling})
	b, err := idempg.New(newPool(t, connString, 2), &idempg.Config{Logger: quiet, TransactionPooling: pooling})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	unlock, held, err := a.TryLead(ctx, "idem-resumer")
	if err != nil || !held {
		t.Fatalf("first TryLead = %v, %v; want held", held, err)
	}
	if _, held, err := b.TryLead(ctx, "idem-resumer"); err != nil || held {
		t.Fatalf("second instance's TryLead = %v, %v; want not held", held, err)
	}
	unlockOther, held, err := b.TryLead(ctx, "another-job")
	if err != nil || !held {
		t.Fatalf("TryLead of another name = %v, %v; want held", held, err)
	}
	unlockOther()
	unlock()
	unlockB, held, err := b.TryLead(ctx, "idem-resumer")
	if err != nil || !held {
		t.Fatalf("TryLead after unlock = %v, %v; want held", held, err)
	}
	unlockB()
}

// TestTwoPhaseCompletionIsHOT completes two-phase keys on a table with
// room on its page, and checks that PostgreSQL made each completion a HOT
// update (migration 010: no index names a column that a completion of a
// key without a recovery point changes), and that a key completed after a
// recovery point keeps none, so the completer's index drops it.
func TestTwoPhaseCompletionIsHOT(t *testing.T) {
	t.Parallel()
	const keys = 5 // their started and completed rows fit one page
	connString := pgtest.NewDatabase(t)
	pool := newPool(t, connString, 2)
	store := setupOn(t, pool, nil)
	ctx := context.Background()
	for range keys {
		l := mustLease(t, store, params(idem.ModeTwoPhase, newScope("alice"), "a", epoch))
		complete(t, l, `{"id":"pay_1"}`)
	}
	pool.Close() // the backends report their counters as they exit

	check := newPool(t, connString, 1)
	var upd, hot int64
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := check.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'idempotency_keys'`).Scan(&upd, &hot)
		if err != nil {
			t.Fatalf("read the table's statistics: %v", err)
		}
		if upd >= keys {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the statistics counted %d updates after 30 s; want the %d completions", upd, keys)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if upd != keys || hot != keys {
		t.Errorf("%d updates, %d of them HOT; want %d completions, all HOT", upd, hot, keys)
	}

	phased := setupOn(t, newPool(t, pgtest.NewDatabase(t), 2), nil)
	scope := newScope("alice")
	l := mustLease(t, phased, params(idem.ModeTwoPhase, scope, "a", epoch)).(idemstore.RecoveryLease)
	if err := l.Checkpoint(ctx, idemstore.Recovery{Point: "payment_created", State: idem.State{"payment": "pay_1"}}); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	complete(t, l, `{"id":"pay_1"}`)
	var indexed int
	err := phased.Pool().QueryRow(ctx, `SELECT count(*) FROM idempotency_keys WHERE recovery_point IS NOT NULL OR recovery_state IS NOT NULL`).Scan(&indexed)
	if err != nil || indexed != 0 {
		t.Errorf("%d completed keys keep a recovery point or state (%v); want none", indexed, err)
	}
}
