package payments_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/internal/database"
	"github.com/idemkit/idem/cmd/internal/mysqltest"
	"github.com/idemkit/idem/cmd/internal/payments"
	"github.com/idemkit/idem/idemoutbox"
	"github.com/idemkit/idem/internal/bearer"
	"github.com/idemkit/idem/internal/pgtest"
)

// eventsFixture serves the payments API with events on a store of kind
// sqlite or postgres.
type eventsFixture struct {
	*fixture
	outbox idemoutbox.Store
	// failAfterEnqueue makes the next enqueues fail after writing.
	failAfterEnqueue atomic.Bool
}

// failingOutbox writes each event and then, when told to, fails: the
// handler has enqueued, and the request must roll back.
type failingOutbox struct {
	idemoutbox.Store
	fail *atomic.Bool
}

func (o failingOutbox) EnqueueEvent(ctx context.Context, e idemoutbox.Event) error {
	if err := o.Store.EnqueueEvent(ctx, e); err != nil {
		return err
	}
	if o.fail.Load() {
		return errors.New("injected failure after the enqueue")
	}
	return nil
}

// declining declines the charges of customer cus_declined.
type declining struct{ charges atomic.Int64 }

func (d *declining) Charge(_ context.Context, key string, p payments.Params) (string, error) {
	d.charges.Add(1)
	if p.Customer == "cus_declined" {
		return "", fmt.Errorf("card refused: %w", payments.ErrDeclined)
	}
	return "ch_" + key, nil
}

// setupEvents serves the API with events and a processor that declines
// customer cus_declined, or with proc when one is given. With a processor
// payments run by phases, whatever mode says; a nil proc serves payments
// without one, as inserts in mode.
func setupEvents(t *testing.T, kind string, mode idem.Mode, proc ...payments.Processor) *eventsFixture {
	t.Helper()
	return setupEventsWith(t, kind, idem.Config{Mode: mode}, proc...)
}

// setupEventsWith is setupEvents with the middleware configured by ic.
func setupEventsWith(t *testing.T, kind string, ic idem.Config, proc ...payments.Processor) *eventsFixture {
	t.Helper()
	var processor payments.Processor = &declining{}
	if len(proc) > 0 {
		processor = proc[0]
	}
	ctx := context.Background()
	url := "sqlite:" + filepath.Join(t.TempDir(), "payments.db")
	switch kind {
	case "postgres":
		url = pgtest.NewDatabase(t)
	case "mysql":
		url = mysqltest.NewDatabase(t)
	}
	db, err := database.Open(ctx, url, &database.Config{Migrate: true, Logger: quiet})
	if err != nil {
		t.Fatalf("open %s: %v", kind, err)
	}
	t.Cleanup(db.Close)
	repo, err := payments.NewRepo(ctx, db)
	if err != nil {
		t.Fatalf("NewRepo: %v", err)
	}
	f := &eventsFixture{outbox: db.Outbox()}
	svc, err := payments.NewService(payments.Config{
		Repo: repo, Store: db.Store(), Logger: quiet, Processor: processor,
		Outbox: failingOutbox{Store: db.Outbox(), fail: &f.failAfterEnqueue},
		Tokens: must(bearer.Parse("sk_alice=alice,sk_bob=bob")),
		Idem:   ic,
	})
	if err != nil {
		t.Fatalf("NewService: %v", err)
	}
	srv := httptest.NewServer(svc.Handler())
	t.Cleanup(srv.Close)
	f.fixture = &fixture{url: srv.URL, repo: repo}
	return f
}

type eventPage struct {
	Object string `json:"object"`
	Data   []struct {
		ID       string `json:"id"`
		Object   string `json:"object"`
		Type     string `json:"type"`
		Created  int64  `json:"created"`
		Data     payments.Payment
		Delivery struct {
			Status   string `json:"status"`
			Attempts int    `json:"attempts"`
		} `json:"delivery"`
	} `json:"data"`
	HasMore    bool   `json:"has_more"`
	NextCursor string `json:"next_cursor"`
}

func (f *eventsFixture) events(t *testing.T, token, query string) (int, eventPage, []byte) {
	t.Helper()
	r := f.do(t, http.MethodGet, "/v1/events"+query, http.Header{"Authorization": {"Bearer " + token}}, "")
	var page eventPage
	if r.status == http.StatusOK {
		page = decode[eventPage](t, r.body)
	}
	return r.status, page, r.body
}

func TestPaymentEvents(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := setupEvents(t, kind, idem.ModeTwoPhase)
			ok := f.post(t, "sk_alice", "k-ok", jsonType, `{"amount":500,"currency":"usd","customer":"cus_1"}`)
			okAgain := f.post(t, "sk_alice", "k-ok", jsonType, `{"amount":500,"currency":"usd","customer":"cus_1"}`)
			declined := f.post(t, "sk_alice", "k-no", jsonType, `{"amount":700,"currency":"usd","customer":"cus_declined"}`)
			declinedAgain := f.post(t, "sk_alice", "k-no", jsonType, `{"amount":700,"currency":"usd","customer":"cus_declined"}`)
			if ok.status != http.StatusCreated || okAgain.status != http.StatusCreated || okAgain.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("payment %d, replay %d: %s", ok.status, okAgain.status, okAgain.body)
			}
			if declined.status != http.StatusPaymentRequired || declinedAgain.status != http.StatusPaymentRequired ||
				declinedAgain.header.Get("Idempotent-Replayed") != "true" || string(declined.body) != string(declinedAgain.body) {
				t.Fatalf("declined %d %s, replay %d %s; want a stored 402", declined.status, declined.body, declinedAgain.status, declinedAgain.body)
			}
			if p := decode[idem.Problem](t, declined.body); p.Code != "payment-declined" {
				t.Fatalf("decline problem %+v", p)
			}
			loc := declined.header.Get("Location")
			got := f.do(t, http.MethodGet, loc, http.Header{"Authorization": {"Bearer sk_alice"}}, "")
			if got.status != http.StatusOK || decode[payments.Payment](t, got.body).Status != payments.StatusDeclined {
				t.Fatalf("GET %s: %d %s; want the declined payment", loc, got.status, got.body)
			}

			status, page, body := f.events(t, "sk_alice", "")
			if status != http.StatusOK || len(page.Data) != 2 || page.HasMore {
				t.Fatalf("GET /v1/events: %d %s; want two events", status, body)
			}
			// Newest first: the decline came second (same second: by id,
			// so only the set is certain).
			types := map[string]payments.Payment{}
			for _, e := range page.Data {
				if !strings.HasPrefix(e.ID, "evt_") || e.Object != "event" || e.Delivery.Status != "pending" {
					t.Fatalf("event %+v", e)
				}
				types[e.Type] = e.Data
			}
			paid := decode[payments.Payment](t, ok.body)
			if p, found := types[payments.EventPaymentSucceeded]; !found || p.ID != paid.ID || p.Amount != 500 || p.Status != payments.StatusSucceeded {
				t.Fatalf("payment.succeeded data %+v, want payment %s", p, paid.ID)
			}
			if p, found := types[payments.EventPaymentDeclined]; !found || "/v1/payments/"+p.ID != loc || p.Status != payments.StatusDeclined {
				t.Fatalf("payment.declined data %+v, want the payment at %s", p, loc)
			}
			if status, page, _ := f.events(t, "sk_bob", ""); status != http.StatusOK || len(page.Data) != 0 {
				t.Fatalf("bob sees %d of alice's events (status %d), want none", len(page.Data), status)
			}
		})
	}
}

func TestRolledBackPaymentEnqueuesNothing(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres", "mysql"} {
		for _, phased := range []bool{false, true} {
			name := kind + "/atomic-insert"
			if phased {
				name = kind + "/phases"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				// Without a processor a payment is one insert in atomic
				// mode, rolled back whole (500). With one it runs by phases:
				// the final phase, with the event, rolls back, the pending
				// payment stays at its recovery point, and the answer is 503
				// operation-unfinished.
				f := setupEvents(t, kind, idem.ModeAtomic, nil)
				wantStatus, wantPayments := http.StatusInternalServerError, 0
				if phased {
					f = setupEvents(t, kind, idem.ModeTwoPhase)
					wantStatus, wantPayments = http.StatusServiceUnavailable, 1
				}
				body := `{"amount":500,"currency":"usd","customer":"cus_1"}`
				f.failAfterEnqueue.Store(true)
				failed := f.post(t, "sk_alice", "k-1", jsonType, body)
				if failed.status != wantStatus {
					t.Fatalf("payment whose event failed after the enqueue: %d %s, want %d", failed.status, failed.body, wantStatus)
				}
				if _, page, _ := f.events(t, "sk_alice", ""); len(page.Data) != 0 {
					t.Fatalf("%d events after a rolled-back payment, want 0", len(page.Data))
				}
				if n, err := f.repo.Count(context.Background(), "alice", "k-1"); err != nil || n != wantPayments {
					t.Fatalf("%d payments after the rollback (%v), want %d", n, err, wantPayments)
				}
				f.failAfterEnqueue.Store(false)
				if retry := f.post(t, "sk_alice", "k-1", jsonType, body); retry.status != http.StatusCreated {
					t.Fatalf("retry: %d %s", retry.status, retry.body)
				}
				if _, page, _ := f.events(t, "sk_alice", ""); len(page.Data) != 1 {
					t.Fatalf("%d events after the retry, want 1", len(page.Data))
				}
			})
		}
	}
}

func TestEventsPagination(t *testing.T) {
	t.Parallel()
	f := setupEvents(t, "sqlite", idem.ModeAtomic, nil)
	const total = 7
	for i := range total {
		if r := f.post(t, "sk_alice", fmt.Sprintf("k-%d", i), jsonType, fmt.Sprintf(`{"amount":%d,"currency":"usd","customer":"cus_1"}`, 100+i)); r.status != http.StatusCreated {
			t.Fatalf("payment %d: %d", i, r.status)
		}
	}
	f.post(t, "sk_bob", "k-0", jsonType, `{"amount":1,"currency":"usd","customer":"cus_1"}`)
	seen := map[string]bool{}
	query := "?limit=3"
	for pages := 1; ; pages++ {
		status, page, body := f.events(t, "sk_alice", query)
		if status != http.StatusOK || len(page.Data) == 0 || len(page.Data) > 3 {
			t.Fatalf("page %d: %d %s", pages, status, body)
		}
		for _, e := range page.Data {
			if seen[e.ID] {
				t.Fatalf("event %s listed twice", e.ID)
			}
			seen[e.ID] = true
		}
		if !page.HasMore {
			if pages != 3 {
				t.Fatalf("%d pages of 3 for %d events, want 3", pages, total)
			}
			break
		}
		query = "?limit=3&cursor=" + page.NextCursor
	}
	if len(seen) != total {
		t.Fatalf("%d events listed, want %d", len(seen), total)
	}
	for _, q := range []string{"?limit=0", "?limit=101", "?limit=x", "?cursor=nonsense", "?cursor=MTIzLnBheV8x"} {
		if status, _, body := f.events(t, "sk_alice", q); status != http.StatusBadRequest || !strings.Contains(string(body), "invalid-parameter") {
			t.Errorf("GET /v1/events%s: %d %s, want a 400 invalid-parameter problem", q, status, body)
		}
	}
	if r := f.do(t, http.MethodGet, "/v1/events", http.Header{}, ""); r.status != http.StatusUnauthorized {
		t.Errorf("GET /v1/events without credentials: %d, want 401", r.status)
	}
}

// TestProcessorDeclineIsStored: processord declines amounts ending in 02
// with a 402; paymentsd records the payment as declined, answers 402
// payment-declined, replays it, and enqueues payment.declined once.
func TestProcessorDeclineIsStored(t *testing.T) {
	t.Parallel()
	_, proc := startProcessorClient(t)
	f := setupEvents(t, "sqlite", idem.ModeTwoPhase, proc)
	body := `{"amount":1002,"currency":"usd","customer":"cus_1"}`
	first := f.post(t, "sk_alice", "k-decline", jsonType, body)
	again := f.post(t, "sk_alice", "k-decline", jsonType, body)
	if first.status != http.StatusPaymentRequired || again.status != http.StatusPaymentRequired ||
		again.header.Get("Idempotent-Replayed") != "true" || string(first.body) != string(again.body) {
		t.Fatalf("declined payment %d %s, retry %d %s; want a stored, replayed 402", first.status, first.body, again.status, again.body)
	}
	if p := decode[idem.Problem](t, first.body); p.Code != "payment-declined" {
		t.Fatalf("problem %+v, want payment-declined", p)
	}
	if n, err := f.repo.Count(context.Background(), "alice", "k-decline"); err != nil || n != 1 {
		t.Fatalf("%d payments for the declined key (%v), want 1", n, err)
	}
	_, page, body2 := f.events(t, "sk_alice", "")
	if len(page.Data) != 1 || page.Data[0].Type != payments.EventPaymentDeclined || page.Data[0].Data.Status != payments.StatusDeclined {
		t.Fatalf("events %s; want one payment.declined", body2)
	}
}

// TestKeyReusedAfterRetentionGetsItsOwnEvent: a key whose retention passed
// makes a new payment, and that payment has an event of its own.
func TestKeyReusedAfterRetentionGetsItsOwnEvent(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	f := setupEventsWith(t, "sqlite", idem.Config{Mode: idem.ModeAtomic, Retention: time.Hour, Now: clock})
	body := `{"amount":500,"currency":"usd","customer":"cus_1"}`
	first := f.post(t, "sk_alice", "k-reused", jsonType, body)
	now.Add(int64(2 * time.Hour))
	second := f.post(t, "sk_alice", "k-reused", jsonType, body)
	if first.status != http.StatusCreated || second.status != http.StatusCreated || second.header.Get("Idempotent-Replayed") == "true" {
		t.Fatalf("first %d, after retention %d (replayed %q); want two new payments", first.status, second.status, second.header.Get("Idempotent-Replayed"))
	}
	_, page, body2 := f.events(t, "sk_alice", "")
	if len(page.Data) != 2 || page.Data[0].Data.ID == page.Data[1].Data.ID {
		t.Fatalf("events %s; want one per payment", body2)
	}
}
