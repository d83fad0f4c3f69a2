package idempg_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/pgtest"
)

// gateLock is the advisory lock that holds a paused claim statement.
const gateLock = 4242

// pausedClaims returns a store on the database of store whose atomic claim
// statement, after its read finds no key and before it tries the key's
// lock, waits for gateLock, which the returned function releases: the
// window in which the holder of a key can commit it and unlock, shown to a
// test as long as it likes. The store calls claim_gate, which this creates.
func pausedClaims(t *testing.T, store *idempg.Store) (*idempg.Store, func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	pool := store.Pool()
	_, err := pool.Exec(ctx, fmt.Sprintf(`CREATE FUNCTION claim_gate() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(%d);
    RETURN true;
END
$$`, gateLock))
	if err != nil {
		t.Fatalf("create claim_gate: %v", err)
	}
	lockCall := "THEN " + idempg.SessionLockCall
	if !strings.Contains(idempg.QuerySessionClaim, lockCall) {
		t.Fatalf("the claim statement no longer contains %q:\n%s", lockCall, idempg.QuerySessionClaim)
	}
	paused, err := idempg.New(pool, &idempg.Config{Logger: quiet})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	idempg.SetSessionClaimQuery(paused, strings.Replace(idempg.QuerySessionClaim, lockCall,
		"THEN CASE WHEN claim_gate() THEN "+idempg.SessionLockCall+" END", 1))

	gate, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	if _, err := gate.Exec(ctx, `SELECT pg_advisory_lock($1)`, gateLock); err != nil {
		gate.Release()
		t.Fatalf("close the gate: %v", err)
	}
	var once sync.Once
	open := func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			if _, err := gate.Exec(ctx, `SELECT pg_advisory_unlock($1)`, gateLock); err != nil {
				t.Errorf("open the gate: %v", err)
			}
			gate.Release()
		})
	}
	t.Cleanup(open)
	return paused, open
}

// waitAtGate waits until a statement waits for gateLock, polling the
// server's lock table with a generous deadline.
func waitAtGate(t *testing.T, store *idempg.Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for ctx.Err() == nil {
		var waiting bool
		err := store.Pool().QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_locks
WHERE locktype = 'advisory' AND classid = 0 AND objid = $1 AND NOT granted)`, gateLock).Scan(&waiting)
		if err != nil {
			t.Fatalf("read pg_locks: %v", err)
		}
		if waiting {
			return
		}
	}
	t.Fatal("no claim ever waited at the gate")
}

// waitNoAdvisoryLocks waits until no session holds an advisory lock in the
// database of store, polling with a generous deadline: a lock is freed at
// once by an unlock, but only when its server process exits if the store
// closed the connection instead.
func waitNoAdvisoryLocks(t *testing.T, store *idempg.Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for n := advisoryLocks(t, store.Pool()); n != 0; n = advisoryLocks(t, store.Pool()) {
		if ctx.Err() != nil {
			t.Fatalf("%d advisory locks still held %s after the lease ended, want 0", n, testTimeout)
		}
	}
}

// TestSessionClaimSeesKeyCompletedBeforeItsLock reproduces the interleaving
// of an atomic duplicate at READ COMMITTED: its claim statement reads the
// key before the holder commits it and tries the lock after the holder
// unlocks it. The duplicate must get the stored response, not a lease that
// would run the handler a second time.
func TestSessionClaimSeesKeyCompletedBeforeItsLock(t *testing.T) {
	t.Parallel()
	store := setup(t, nil)
	paused, openGate := pausedClaims(t, store)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	scope := newScope("alice")
	p := params(idem.ModeAtomic, scope, "a", epoch)

	holder := mustLease(t, store, p)
	type claimed struct {
		res idemstore.ClaimResult
		err error
	}
	dup := make(chan claimed, 1)
	go func() {
		res, err := paused.Claim(ctx, p)
		dup <- claimed{res, err}
	}()
	waitAtGate(t, store) // the duplicate has read the key: there was none
	if err := write(holder.Context(ctx), scope.Key); err != nil {
		t.Fatalf("write: %v", err)
	}
	complete(t, holder, `{"first":true}`) // commits the key and unlocks it
	openGate()                            // the duplicate now finds the lock free

	got := <-dup
	if got.err != nil {
		t.Fatalf("duplicate claim: %v", got.err)
	}
	if got.res.Lease != nil {
		_ = got.res.Lease.Release(ctx)
		t.Fatal("the duplicate got a lease for a key that was completed: its handler would run again")
	}
	rec := got.res.Record
	if rec == nil || rec.Status != idemstore.StatusCompleted || rec.Response == nil || string(rec.Response.Body) != `{"first":true}` {
		t.Fatalf("duplicate answered with %+v, want the completed key", rec)
	}
	waitNoAdvisoryLocks(t, store)
	if n := countRows(t, store, scope.Key); n != 1 {
		t.Errorf("%d business rows, want 1", n)
	}
}

// TestCompleteAfterAnotherCompletedAnswersFromStoredRow stores a completed
// row for a key while an atomic lease holds it by its lock alone, as a
// request that did not take the lock would: the lease's Complete must roll
// back its writes and return the stored row in an idemstore.CompletedError, not
// a bare lost lease that the middleware answers "taken over".
func TestCompleteAfterAnotherCompletedAnswersFromStoredRow(t *testing.T) {
	t.Parallel()
	store := setup(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	scope := newScope("alice")
	p := params(idem.ModeAtomic, scope, "a", epoch)

	l := mustLease(t, store, p)
	if err := write(l.Context(ctx), scope.Key); err != nil {
		t.Fatalf("write: %v", err)
	}
	_, err := store.Pool().Exec(ctx, `INSERT INTO idempotency_keys
    (client_id, idempotency_key, request_method, request_path, request_hash,
     status, lease_token, response_status, response_headers, response_body, created_at, locked_at, completed_at)
VALUES ($1, $2, 'POST', '/v1/payments', $3, 'completed', 1, 201, '{}', '{"other":true}', $4, $4, $4)`,
		scope.ClientID, scope.Key, hashOf("a"), epoch)
	if err != nil {
		t.Fatalf("store the other request's row: %v", err)
	}

	err = l.Complete(ctx, response(`{"mine":true}`))
	var done *idemstore.CompletedError
	if !errors.As(err, &done) {
		t.Fatalf("Complete = %v, want an idemstore.CompletedError", err)
	}
	if !errors.Is(err, idemstore.ErrLeaseLost) {
		t.Errorf("Complete = %v, want it to wrap idemstore.ErrLeaseLost too", err)
	}
	rec := done.Record
	if rec == nil || rec.Status != idemstore.StatusCompleted || rec.Response == nil ||
		rec.Response.StatusCode != http.StatusCreated || string(rec.Response.Body) != `{"other":true}` {
		t.Fatalf("CompletedError.Record = %+v, want the other request's row", rec)
	}
	if n := countRows(t, store, scope.Key); n != 0 {
		t.Errorf("%d business rows after the refused Complete, want 0", n)
	}
	waitNoAdvisoryLocks(t, store)
	if err := l.Release(ctx); !errors.Is(err, idempg.ErrLeaseEnded) {
		t.Errorf("Release after the refused Complete = %v, want ErrLeaseEnded", err)
	}
}

// TestMiddlewareStormRunsEachKeyOnce sends each of 50 keys 8 times at once
// through the middleware, with a handler that counts its runs per key:
// every key's insert runs exactly once, and every answer is its 201, the replay of
// it, or 409 "in flight"; never 409 "taken over".
func TestMiddlewareStormRunsEachKeyOnce(t *testing.T) {
	t.Parallel()
	pool := newPool(t, pgtest.NewDatabase(t), 20)
	// 400 requests at once on 20 connections: on a busy machine a claim may
	// wait long for a connection, which is not what this test is about.
	store := setupOn(t, pool, &idempg.Config{AcquireTimeout: testTimeout})
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			storm(t, []*idempg.Store{store}, mode)
		})
	}
}

// storm sends each of 50 keys 8 times at once through the middleware, one
// instance per store, the copies of a key spread over the instances, with
// a handler that counts its runs per key: every key's insert runs exactly
// once, and every answer is its 201, the replay of it, or 409 "in flight";
// never 409 "taken over". It returns the count of each answer.
func storm(t *testing.T, stores []*idempg.Store, mode idem.Mode) (created, replayed, inFlight int) {
	t.Helper()
	const keys, copies = 50, 8
	var (
		mu   sync.Mutex
		runs = map[string]int{}
	)
	// Counted once the handler's insert ran: in atomic mode the code
	// before it also runs for the duplicates, and is discarded.
	count := insertPayment(func(key string) {
		mu.Lock()
		runs[key]++
		mu.Unlock()
	})
	urls := make([]string, len(stores))
	for i, store := range stores {
		srv := newServer(t, store, idem.Config{Mode: mode, StoreTimeout: testTimeout}, count)
		urls[i] = srv.URL + "/v1/payments"
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: keys * copies}}
	defer client.CloseIdleConnections()

	type sent struct {
		key string
		a   answer
	}
	start := make(chan struct{})
	answers := make(chan sent, keys*copies)
	var wg sync.WaitGroup
	for k := range keys {
		key := fmt.Sprintf("storm-%s-%d", mode, k)
		for c := range copies {
			url := urls[(k+c)%len(urls)]
			wg.Go(func() {
				<-start
				answers <- sent{key, post(t, client, url, key, `{"amount":4200,"currency":"usd"}`)}
			})
		}
	}
	close(start)
	wg.Wait()
	close(answers)

	first := map[string][]byte{}
	for s := range answers {
		a := s.a
		switch {
		case a.status == http.StatusCreated:
			if body, ok := first[s.key]; ok && !bytes.Equal(body, a.body) {
				t.Errorf("%s: 201 bodies differ: %q and %q", s.key, body, a.body)
			}
			first[s.key] = a.body
			if a.replayed {
				replayed++
			} else {
				created++
			}
		case a.status == http.StatusConflict && problemCode(a) == string(idem.ProblemKeyInFlight):
			inFlight++
			var p idem.Problem
			_ = json.Unmarshal(a.body, &p)
			if strings.Contains(p.Detail, "took this key over") {
				t.Errorf("%s: 409 %q: no key is ever taken over here", s.key, p.Detail)
			}
		default:
			t.Errorf("%s: unexpected answer %d %q", s.key, a.status, a.body)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for k := range keys {
		key := fmt.Sprintf("storm-%s-%d", mode, k)
		if runs[key] != 1 {
			t.Errorf("%s: the handler ran %d times, want 1", key, runs[key])
		}
		if n := countRows(t, stores[0], key); n != 1 {
			t.Errorf("%s: %d business rows, want 1", key, n)
		}
	}
	return created, replayed, inFlight
}

// TestMiddlewareAnswersFromRowCompletedFirst has another request's completed
// row appear for a key while its holder's handler runs, as a request that
// did not take the key's lock would store it: the holder's writes roll back
// and the client gets the stored response replayed, not 409 "taken over".
func TestMiddlewareAnswersFromRowCompletedFirst(t *testing.T) {
	t.Parallel()
	store := setup(t, nil)
	const body = `{"amount":4200,"currency":"usd"}`
	var runs atomic.Int64
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if scope, _ := idem.ScopeFromContext(r.Context()); scope.Key == "victim" {
			// A first statement, which claims the key (with a speculative
			// claim, it goes out with the claim).
			tx, err := idempg.TxFromContext(r.Context())
			if err == nil {
				_, err = tx.Exec(r.Context(), `SELECT $1::text`, scope.Key)
			}
			if err != nil {
				t.Errorf("first statement: %v", err)
			}
			// The row of "template", the same request under another key,
			// copied to this key and committed on its own connection.
			_, err = store.Pool().Exec(r.Context(), `INSERT INTO idempotency_keys
    (client_id, idempotency_key, request_method, request_path, request_hash, request_fields, status, lease_token,
     response_status, response_headers, response_body, created_at, locked_at, completed_at)
SELECT client_id, 'victim', request_method, request_path, request_hash, request_fields, status, lease_token,
       response_status, response_headers, response_body, created_at, locked_at, completed_at
FROM idempotency_keys WHERE client_id = $1 AND idempotency_key = 'template'`, scope.ClientID)
			if err != nil {
				t.Errorf("store the other request's row: %v", err)
			}
		}
		createPayment(&runs).ServeHTTP(w, r)
	})
	srv := newServer(t, store, idem.Config{Mode: idem.ModeAtomic}, handler)
	url := srv.URL + "/v1/payments"

	template := post(t, srv.Client(), url, "template", body)
	if template.status != http.StatusCreated {
		t.Fatalf("template request: %d %q", template.status, template.body)
	}
	got := post(t, srv.Client(), url, "victim", body)
	if got.status != http.StatusCreated || !got.replayed || !bytes.Equal(got.body, template.body) {
		t.Fatalf("victim answered %d replayed=%v %q; want the replay of %q", got.status, got.replayed, got.body, template.body)
	}
	if n := countRows(t, store, "victim"); n != 0 {
		t.Errorf("%d business rows of the refused handler, want 0", n)
	}
	if runs.Load() != 2 {
		t.Errorf("the handler ran %d times, want 2 (template, victim)", runs.Load())
	}
}
