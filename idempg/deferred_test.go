package idempg_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/pgtest"
)

// handlerOwn marks every answer that the handler of these tests writes
// itself when its claim was refused: such an answer must never reach the
// client.
const handlerOwn = "HANDLER-OWN"

// sharedRowHandler updates one shared row in the lease's transaction, as a
// payment handler updates a balance. X-Act: reject answers 400 and quick
// answers 200, both without a statement; X-Hold: yes waits, after the
// update, for release to close, having sent on holding.
func sharedRowHandler(holding chan<- struct{}, release <-chan struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		switch r.Header.Get("X-Act") {
		case "reject":
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, handlerOwn+": rejected")
			return
		case "quick":
			w.WriteHeader(http.StatusOK)
			fmt.Fprint(w, handlerOwn+": quick")
			return
		}
		tx, err := idempg.TxFromContext(ctx)
		if err != nil {
			http.Error(w, "no transaction", http.StatusServiceUnavailable)
			return
		}
		var n int
		if err := tx.QueryRow(ctx, `UPDATE shared SET n = n + 1 WHERE id = $1 RETURNING n`, 1).Scan(&n); err != nil {
			// A status that the middleware stores: were this answer used,
			// a client would see it.
			w.WriteHeader(http.StatusOK)
			fmt.Fprintf(w, "%s: %v", handlerOwn, err)
			return
		}
		if r.Header.Get("X-Hold") == "yes" {
			holding <- struct{}{}
			<-release
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"n":%d}`, n)
	})
}

// postWith is post with extra headers.
func postWith(t testing.TB, client *http.Client, url, key, body string, header map[string]string) answer {
	t.Helper()
	return post(t, &http.Client{Transport: headerTransport{base: client.Transport, header: header}}, url, key, body)
}

type headerTransport struct {
	base   http.RoundTripper
	header map[string]string
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.header {
		r.Header.Set(k, v)
	}
	base := h.base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(r)
}

// TestMiddlewareDuplicateNeverWaitsOnHolderRows holds a request in its
// handler after it updated a shared row, and sends duplicates whose handler
// would update the same row: each gets 409 at once, because its claim,
// which goes out in front of that update, is refused and the update never
// runs. Once the holder commits, every duplicate gets the replay (or 422
// for another body), never the handler's own answer.
func TestMiddlewareDuplicateNeverWaitsOnHolderRows(t *testing.T) {
	t.Parallel()
	for _, pooling := range []bool{false, true} {
		t.Run(fmt.Sprintf("TransactionPooling=%v", pooling), func(t *testing.T) {
			t.Parallel()
			store := setup(t, &idempg.Config{TransactionPooling: pooling})
			if _, err := store.Pool().Exec(context.Background(), `CREATE TABLE shared (id int PRIMARY KEY, n int NOT NULL);
INSERT INTO shared VALUES (1, 0)`); err != nil {
				t.Fatalf("create the shared row: %v", err)
			}
			holding, release := make(chan struct{}), make(chan struct{})
			srv := newServer(t, store, idem.Config{Mode: idem.ModeAtomic}, sharedRowHandler(holding, release))
			// Another instance on the same store: it has not seen the key,
			// so its claims go out speculatively, with the handler's first
			// statement; the instance that claimed the key claims again at
			// once.
			other := newServer(t, store, idem.Config{Mode: idem.ModeAtomic}, sharedRowHandler(nil, nil))
			released := false
			t.Cleanup(func() { // before the server's Close, which waits for the holder
				if !released {
					close(release)
				}
			})
			url, client := srv.URL+"/v1/transfers", srv.Client()
			const key, body = "transfer-1", `{"amount":100}`

			held := make(chan answer, 1)
			go func() { held <- postWith(t, client, url, key, body, map[string]string{"X-Hold": "yes"}) }()
			select {
			case <-holding:
			case a := <-held:
				t.Fatalf("the holder answered %d %q before it held the row", a.status, a.body)
			case <-time.After(testTimeout):
				t.Fatal("the holder never updated the row")
			}

			for _, act := range []string{"", "reject", "quick"} {
				for _, u := range []string{url, other.URL + "/v1/transfers"} {
					got := make(chan answer, 1)
					go func() { got <- postWith(t, client, u, key, body, map[string]string{"X-Act": act}) }()
					var a answer
					select {
					case a = <-got:
					case <-time.After(testTimeout):
						t.Fatalf("X-Act %q, %s: the duplicate is blocked: its handler's update waits on the holder's row", act, u)
					}
					if a.status != http.StatusConflict || problemCode(a) != string(idem.ProblemKeyInFlight) || strings.Contains(string(a.body), handlerOwn) {
						t.Errorf("X-Act %q, %s: duplicate in flight answered %d %q; want 409 key-in-flight", act, u, a.status, a.body)
					}
				}
			}

			close(release)
			released = true
			first := <-held
			if first.status != http.StatusCreated || string(first.body) != `{"n":1}` {
				t.Fatalf("holder answered %d %q, want 201 {\"n\":1}", first.status, first.body)
			}
			for _, act := range []string{"", "reject", "quick"} {
				for _, u := range []string{url, other.URL + "/v1/transfers"} {
					a := postWith(t, client, u, key, body, map[string]string{"X-Act": act})
					if a.status != http.StatusCreated || !a.replayed || string(a.body) != string(first.body) {
						t.Errorf("X-Act %q, %s: retry answered %d replayed=%v %q; want the replay of %q", act, u, a.status, a.replayed, a.body, first.body)
					}
				}
			}
			for _, u := range []string{url, other.URL + "/v1/transfers"} {
				a := post(t, client, u, key, `{"amount":999}`)
				if a.status != http.StatusUnprocessableEntity || strings.Contains(string(a.body), handlerOwn) {
					t.Errorf("%s: another body answered %d %q; want 422", u, a.status, a.body)
				}
			}
			var n int
			if err := store.Pool().QueryRow(context.Background(), `SELECT n FROM shared WHERE id = 1`).Scan(&n); err != nil || n != 1 {
				t.Errorf("shared row n = %d (err %v); want 1: only the holder's update commits", n, err)
			}
			waitNoAdvisoryLocks(t, store)
		})
	}
}

// TestMiddlewareNewKeyWithoutStatement answers a new key without any
// statement: a stored answer is stored (its claim goes out with Complete),
// a released one is released (its claim is checked by Release), and the
// key is free again after the release.
func TestMiddlewareNewKeyWithoutStatement(t *testing.T) {
	t.Parallel()
	store := setup(t, nil)
	srv := newServer(t, store, idem.Config{Mode: idem.ModeAtomic}, sharedRowHandler(nil, nil))
	url, client := srv.URL+"/v1/transfers", srv.Client()
	// Another instance, which has not seen the keys: its retries claim
	// speculatively.
	other := newServer(t, store, idem.Config{Mode: idem.ModeAtomic}, sharedRowHandler(nil, nil))

	a := postWith(t, client, url, "quick-1", `{}`, map[string]string{"X-Act": "quick"})
	if a.status != http.StatusOK || a.replayed {
		t.Fatalf("new key, quick answer: %d replayed=%v %q; want 200", a.status, a.replayed, a.body)
	}
	for _, u := range []string{other.URL + "/v1/transfers", url} {
		if b := postWith(t, client, u, "quick-1", `{}`, map[string]string{"X-Act": "reject"}); b.status != http.StatusOK || !b.replayed || string(b.body) != string(a.body) {
			t.Errorf("%s: retry: %d replayed=%v %q; want the replay of %q", u, b.status, b.replayed, b.body, a.body)
		}
	}
	a = postWith(t, client, url, "reject-1", `{}`, map[string]string{"X-Act": "reject"})
	if a.status != http.StatusBadRequest || a.replayed {
		t.Fatalf("new key, rejected: %d replayed=%v %q; want the handler's 400", a.status, a.replayed, a.body)
	}
	if _, err := store.Pool().Exec(context.Background(), `CREATE TABLE shared (id int PRIMARY KEY, n int NOT NULL);
INSERT INTO shared VALUES (1, 0)`); err != nil {
		t.Fatalf("create the shared row: %v", err)
	}
	if b := post(t, client, url, "reject-1", `{}`); b.status != http.StatusCreated || b.replayed {
		t.Errorf("after the release the key runs: %d replayed=%v %q; want 201", b.status, b.replayed, b.body)
	}
	waitNoAdvisoryLocks(t, store)
}

// completeSpeculatively claims scope's key speculatively at epoch, writes
// its business row and completes it with body, as the middleware does for
// a key's first request. It returns the claim's parameters.
func completeSpeculatively(t *testing.T, store *idempg.Store, scope idemstore.Scope, body string) idemstore.ClaimParams {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	p := params(idem.ModeAtomic, scope, "a", epoch)
	p.Speculative = true
	first := mustLease(t, store, p)
	if err := write(first.Context(ctx), scope.Key); err != nil {
		t.Fatalf("first write: %v", err)
	}
	complete(t, first, body)
	return p
}

// TestDeferredClaimRefusal drives a speculative lease by hand: its first
// statement, for a completed key, fails with ErrNotClaimed and an
// idemstore.ExistsError and does not run, and so do the later ones; Complete and
// Release return the ExistsError.
func TestDeferredClaimRefusal(t *testing.T) {
	t.Parallel()
	store := setup(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	scope := newScope("alice")
	p := completeSpeculatively(t, store, scope, `{"first":true}`)

	p.Now = epoch.Add(time.Second)
	l := mustLease(t, store, p)
	lctx := l.Context(ctx)
	for i := range 2 {
		err := write(lctx, scope.Key)
		var exists *idemstore.ExistsError
		if !errors.Is(err, idempg.ErrNotClaimed) || !errors.As(err, &exists) ||
			exists.Record.Status != idemstore.StatusCompleted || string(exists.Record.Response.Body) != `{"first":true}` {
			t.Fatalf("statement %d: %v; want ErrNotClaimed with the completed key", i+1, err)
		}
	}
	err := l.Complete(ctx, response(`{"second":true}`))
	var exists *idemstore.ExistsError
	if !errors.As(err, &exists) || !errors.Is(err, idemstore.ErrLeaseLost) {
		t.Fatalf("Complete: %v; want an idemstore.ExistsError", err)
	}
	if n := countRows(t, store, scope.Key); n != 1 {
		t.Errorf("%d business rows, want 1", n)
	}
	waitNoAdvisoryLocks(t, store)
}

// TestDeferredClaimReplacesKeyPastRetention: a speculative claim of a key
// whose row is past retention is not refused. Its guard reports the row,
// and Complete replaces it with the new request's, with the next token.
func TestDeferredClaimReplacesKeyPastRetention(t *testing.T) {
	t.Parallel()
	store := setup(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	scope := newScope("alice")
	p := completeSpeculatively(t, store, scope, `{"first":true}`)

	p = params(idem.ModeAtomic, scope, "b", epoch.Add(retention+time.Second))
	p.Speculative = true
	l := mustLease(t, store, p)
	if err := write(l.Context(ctx), scope.Key); err != nil {
		t.Fatalf("write after retention: %v; want the key claimed anew", err)
	}
	complete(t, l, `{"second":true}`)
	rec, err := store.GetKey(ctx, scope)
	if err != nil || rec == nil {
		t.Fatalf("Get: %v, %v", rec, err)
	}
	if string(rec.Response.Body) != `{"second":true}` || rec.Token != 2 || !bytes.Equal(rec.RequestHash, hashOf("b")) {
		t.Errorf("stored key: body %q, token %d; want the second request's, token 2", rec.Response.Body, rec.Token)
	}
	if n := countRows(t, store, scope.Key); n != 2 {
		t.Errorf("%d business rows, want 2", n)
	}
	waitNoAdvisoryLocks(t, store)
}

// TestDeferredRefusalNeedsOneConnection: a refused speculative claim reads
// the key that refused it on its own connection, so that refusals cannot
// wait for each other's connections when the pool is used up. The pool has
// one connection; a replay and a 409 are answered on it.
func TestDeferredRefusalNeedsOneConnection(t *testing.T) {
	t.Parallel()
	store := setupOn(t, newPool(t, pgtest.NewDatabase(t), 1), nil)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	scope := newScope("alice")
	p := completeSpeculatively(t, store, scope, `{"first":true}`)

	p.Now = epoch.Add(time.Second)
	l := mustLease(t, store, p)
	err := write(l.Context(ctx), scope.Key)
	var exists *idemstore.ExistsError
	if !errors.As(err, &exists) || exists.Record.Status != idemstore.StatusCompleted || string(exists.Record.Response.Body) != `{"first":true}` {
		t.Fatalf("replay: %v; want ErrNotClaimed with the completed key", err)
	}
	if err := l.Release(ctx); !errors.As(err, &exists) {
		t.Fatalf("Release: %v; want the idemstore.ExistsError", err)
	}
	if n := countRows(t, store, scope.Key); n != 1 {
		t.Errorf("%d business rows, want 1", n)
	}
}

// TestClaimGuardRereadsAfterLock checks what the deferred claim rests on:
// the guard reads the key with a snapshot taken after it got the lock, not
// with its statement's. A statement that calls the guard takes its snapshot,
// then waits (on a gate lock) while a holder commits the key and frees its
// lock; the guard must then see the key and refuse.
func TestClaimGuardRereadsAfterLock(t *testing.T) {
	t.Parallel()
	store := setup(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	pool := store.Pool()
	const gate, lock = int64(7001), int64(7002)
	begin := func() pgx.Tx {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatalf("begin: %v", err)
		}
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		return tx
	}
	holder, gatekeeper := begin(), begin()
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, lock); err != nil {
		t.Fatalf("holder lock: %v", err)
	}
	if _, err := holder.Exec(ctx, `INSERT INTO idempotency_keys
    (client_id, idempotency_key, request_method, request_path, request_hash, status, lease_token,
     response_status, response_headers, response_body, created_at, locked_at, completed_at)
VALUES ('alice', 'k', 'POST', '/v1/payments', '\x00', 'completed', 1, 201, '{}', '{}', $1, $1, $1)`, epoch); err != nil {
		t.Fatalf("holder insert: %v", err)
	}
	if _, err := gatekeeper.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, gate); err != nil {
		t.Fatalf("gate lock: %v", err)
	}
	guarded := make(chan error, 1)
	go func() {
		_, err := pool.Exec(ctx, `SELECT pg_advisory_xact_lock($1), idem_claim_guard($2, 'alice', 'k', NULL)`, gate, lock)
		guarded <- err
	}()
	// Wait until the guarded statement, its snapshot taken, waits at the gate.
	for {
		var waiting bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_locks
WHERE locktype = 'advisory' AND NOT granted AND ((classid::bigint << 32) | objid::bigint) = $1)`, gate).Scan(&waiting); err != nil {
			t.Fatalf("read pg_locks: %v", err)
		}
		if waiting {
			break
		}
		select {
		case err := <-guarded:
			t.Fatalf("the guarded statement ended (%v) before it waited at the gate", err)
		case <-ctx.Done():
			t.Fatal("the guarded statement never waited at the gate")
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := holder.Commit(ctx); err != nil {
		t.Fatalf("holder commit: %v", err)
	}
	if err := gatekeeper.Commit(ctx); err != nil {
		t.Fatalf("open the gate: %v", err)
	}
	var pgErr *pgconn.PgError
	if err := <-guarded; !errors.As(err, &pgErr) || pgErr.Code != "IDEM3" {
		t.Fatalf("guard after the holder committed: %v; want SQLSTATE IDEM3 (key exists)", err)
	}
}

// TestClaimKey sends a speculative lease's claim before any statement, as a
// handler that calls another system first does: for a new key it holds the
// key (a duplicate is refused until the holder ends), for a completed one
// it refuses; for other leases it does nothing.
func TestClaimKey(t *testing.T) {
	t.Parallel()
	store := setup(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := idempg.ClaimKey(ctx); !errors.Is(err, idempg.ErrNoTx) {
		t.Errorf("ClaimKey without a lease: %v; want ErrNoTx", err)
	}
	scope := newScope("alice")
	p := params(idem.ModeAtomic, scope, "a", epoch)
	p.Speculative = true
	holder := mustLease(t, store, p)
	if err := idempg.ClaimKey(holder.Context(ctx)); err != nil {
		t.Fatalf("ClaimKey of a new key: %v", err)
	}
	dup := mustLease(t, store, p)
	var exists *idemstore.ExistsError
	if err := idempg.ClaimKey(dup.Context(ctx)); !errors.Is(err, idempg.ErrNotClaimed) || !errors.As(err, &exists) || exists.Record.Status != idemstore.StatusInFlight {
		t.Errorf("ClaimKey of a key held: %v; want ErrNotClaimed with a key in flight", err)
	}
	if err := dup.Release(ctx); !errors.As(err, &exists) {
		t.Errorf("Release of the refused duplicate: %v; want an idemstore.ExistsError", err)
	}
	if err := write(holder.Context(ctx), scope.Key); err != nil {
		t.Fatalf("the holder's write: %v", err)
	}
	complete(t, holder, `{"done":true}`)

	retry := mustLease(t, store, p)
	if err := idempg.ClaimKey(retry.Context(ctx)); !errors.As(err, &exists) || exists.Record.Status != idemstore.StatusCompleted {
		t.Errorf("ClaimKey of a completed key: %v; want ErrNotClaimed with the completed key", err)
	}
	if err := retry.Release(ctx); !errors.As(err, &exists) {
		t.Errorf("Release of the refused retry: %v; want an idemstore.ExistsError", err)
	}
	if n := countRows(t, store, scope.Key); n != 1 {
		t.Errorf("%d business rows, want 1", n)
	}

	twoPhase := mustLease(t, store, params(idem.ModeTwoPhase, newScope("alice"), "a", epoch))
	if err := idempg.ClaimKey(twoPhase.Context(ctx)); err != nil {
		t.Errorf("ClaimKey of a two-phase lease: %v; want nil", err)
	}
	if err := twoPhase.Release(ctx); err != nil {
		t.Errorf("Release: %v", err)
	}
	waitNoAdvisoryLocks(t, store)
}
