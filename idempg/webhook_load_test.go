package idempg_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemoutbox"
	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/idemwebhook"
	"github.com/idemkit/idem/internal/pgtest"
)

// The load of TestWebhookLoad: events of objects, each delivered several
// times, to receivers on one database.
const (
	loadInstances     = 3
	loadObjects       = 50
	loadEventsPerObj  = 10 // 500 events
	loadCopies        = 4  // deliveries per event: 2,000
	loadPairShare     = 25 // % of events with two copies sent at once, to two instances
	loadFailShare     = 10 // % of events whose handler answers 500 on its first run
	loadSenders       = 24 // deliveries in flight at once
	loadMaxAttempts   = 60 // per delivery, before the test gives up
	loadInjectedError = "injected"
)

// loadEvent is one event of the load.
type loadEvent struct {
	id, object, status string
	at                 time.Time
	fail               bool // the handler answers 500 on its first run
	body               []byte
}

// loadDelivery is one delivery the sender makes: one event, or two
// copies of it at once (to two instances).
type loadDelivery struct {
	ev   *loadEvent
	pair bool
}

// loadTally counts what the sender saw.
type loadTally struct {
	mu        sync.Mutex
	attempts  int
	byStatus  map[int]int
	replayed  int
	injected  int // 500s the handler answered on purpose
	other5xx  []string
	started   int // deliveries made (first attempts)
	redeliver int // attempts after a non-2xx answer
}

func (t *loadTally) add(status int, replayed, injected bool, detail string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.attempts++
	t.byStatus[status]++
	if replayed {
		t.replayed++
	}
	switch {
	case injected:
		t.injected++
	case status >= 500:
		t.other5xx = append(t.other5xx, fmt.Sprintf("%d %s", status, detail))
	}
}

// planLoad returns the events, and the deliveries in the order they are
// sent: every event's copies shuffled together, so that an object's events
// arrive out of order and an event's copies apart or at once.
func planLoad() ([]*loadEvent, []loadDelivery) {
	rng := rand.New(rand.NewPCG(33, 7))
	base := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	var events []*loadEvent
	for o := range loadObjects {
		// Distinct times per object, in milliseconds, shuffled against ids.
		offsets := rng.Perm(loadEventsPerObj * 100)[:loadEventsPerObj]
		for i, off := range offsets {
			e := &loadEvent{
				id:     fmt.Sprintf("evt_%02d_%02d", o, i),
				object: fmt.Sprintf("pay_%02d", o),
				status: fmt.Sprintf("status_at_%04d", off),
				at:     base.Add(time.Duration(off) * time.Millisecond),
				fail:   rng.IntN(100) < loadFailShare,
			}
			e.body, _ = idemoutbox.Body(idemoutbox.Event{
				Type:      "payment.updated",
				Payload:   fmt.Appendf(nil, `{"id":%q,"status":%q}`, e.object, e.status),
				CreatedAt: e.at,
			})
			events = append(events, e)
		}
	}
	var plan []loadDelivery
	for _, e := range events {
		copies := loadCopies
		if rng.IntN(100) < loadPairShare {
			plan = append(plan, loadDelivery{ev: e, pair: true})
			copies -= 2
		}
		for range copies {
			plan = append(plan, loadDelivery{ev: e})
		}
	}
	rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	return events, plan
}

// TestWebhookLoad delivers 2,000 Standard Webhooks of 500 events to 3
// receivers on one database, as a provider does: copies of an event
// apart and at once, events of an object out of order, a tenth of the
// events failing in the handler on their first run, and a sender that
// retries every answer that is not 2xx. Each event must be applied once,
// the final state of each object must be that of its newest event, and no
// answer may be 5xx but the handler's own.
func TestWebhookLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("load test: skipped with -short")
	}
	t.Parallel()
	ctx := t.Context()
	connString := pgtest.NewDatabase(t)
	secret := idemoutbox.NewSecret()
	key, _ := idemoutbox.ParseSecret(secret)
	events, plan := planLoad()
	failing := map[string]bool{}
	for _, e := range events {
		failing[e.id] = e.fail
	}

	var (
		failedOnce sync.Map // event id -> true once its handler answered 500
		runs       atomic.Int64
	)
	urls := make([]string, loadInstances)
	var stores []*idempg.Store
	for i := range loadInstances {
		store, err := idempg.New(newPool(t, connString, 6), &idempg.Config{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Migrate(ctx); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
		stores = append(stores, store)
		verifier, err := idemwebhook.NewStandardWebhooks([]string{secret}, nil)
		if err != nil {
			t.Fatal(err)
		}
		rc, err := idemwebhook.New(store, &idemwebhook.Config{Endpoint: "processor", Verifier: verifier, Idem: &idem.Config{Logger: quiet}})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(rc.Wrap(loadHandler(store, failing, &failedOnce, &runs)))
		t.Cleanup(srv.Close)
		urls[i] = srv.URL
	}
	if _, err := stores[0].Pool().Exec(ctx, `
		CREATE TABLE effects (event_id text NOT NULL, applied boolean NOT NULL);
		CREATE TABLE payments (id text PRIMARY KEY, status text NOT NULL, event_id text NOT NULL)`); err != nil {
		t.Fatal(err)
	}

	tally := &loadTally{byStatus: map[int]int{}}
	client := &http.Client{Timeout: 30 * time.Second}
	send := func(e *loadEvent, instance int) error {
		for attempt := 1; ; attempt++ {
			now := time.Now()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, urls[instance], strings.NewReader(string(e.body)))
			if err != nil {
				return err
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(idemoutbox.HeaderID, e.id)
			req.Header.Set(idemoutbox.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
			req.Header.Set(idemoutbox.HeaderSignature, idemoutbox.Sign(key, e.id, now, e.body))
			res, err := client.Do(req)
			if err != nil {
				return err
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			tally.add(res.StatusCode, res.Header.Get(idem.HeaderReplayed) == "true",
				res.StatusCode == 500 && strings.Contains(string(body), loadInjectedError), string(body))
			if res.StatusCode >= 200 && res.StatusCode < 300 {
				return nil
			}
			if attempt == loadMaxAttempts {
				return fmt.Errorf("%s: %d attempts, last %d %s", e.id, attempt, res.StatusCode, body)
			}
			tally.mu.Lock()
			tally.redeliver++
			tally.mu.Unlock()
			// The provider's pause before it delivers again, short here.
			time.Sleep(time.Duration(min(attempt, 10)) * 2 * time.Millisecond)
			instance = (instance + 1) % loadInstances // a retry may reach another instance
		}
	}

	start := time.Now()
	work := make(chan loadDelivery)
	errs := make(chan error, len(plan)*2)
	var wg sync.WaitGroup
	for s := range loadSenders {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(s), 1))
			for d := range work {
				first := rng.IntN(loadInstances)
				if !d.pair {
					tally.mu.Lock()
					tally.started++
					tally.mu.Unlock()
					if err := send(d.ev, first); err != nil {
						errs <- err
					}
					continue
				}
				// Two copies at once, to two instances.
				tally.mu.Lock()
				tally.started += 2
				tally.mu.Unlock()
				var pair sync.WaitGroup
				for k := range 2 {
					pair.Go(func() {
						if err := send(d.ev, (first+k)%loadInstances); err != nil {
							errs <- err
						}
					})
				}
				pair.Wait()
			}
		})
	}
	for _, d := range plan {
		work <- d
	}
	close(work)
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	// Each event's handler committed once: one effect row per event.
	rows, err := stores[0].Pool().Query(ctx, `SELECT event_id, count(*), bool_or(applied) FROM effects GROUP BY event_id`)
	if err != nil {
		t.Fatal(err)
	}
	committed, appliedNewest := map[string]int{}, 0
	for rows.Next() {
		var id string
		var n int
		var applied bool
		if err := rows.Scan(&id, &n, &applied); err != nil {
			t.Fatal(err)
		}
		committed[id] = n
		if applied {
			appliedNewest++
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var twice []string
	for _, e := range events {
		if n := committed[e.id]; n != 1 {
			twice = append(twice, fmt.Sprintf("%s:%d", e.id, n))
		}
	}
	if len(twice) > 0 {
		t.Errorf("%d events committed other than once: %v", len(twice), twice[:min(len(twice), 10)])
	}

	// The final state of each object is its newest event's.
	newest := map[string]*loadEvent{}
	for _, e := range events {
		if n := newest[e.object]; n == nil || e.at.After(n.at) {
			newest[e.object] = e
		}
	}
	wrong := 0
	for object, e := range newest {
		var status, eventID string
		if err := stores[0].Pool().QueryRow(ctx, `SELECT status, event_id FROM payments WHERE id = $1`, object).Scan(&status, &eventID); err != nil {
			t.Fatalf("%s: %v", object, err)
		}
		if status != e.status || eventID != e.id {
			wrong++
			t.Errorf("%s ends at %s (%s), want the newest event's %s (%s)", object, status, eventID, e.status, e.id)
		}
	}

	fails := 0
	for _, e := range events {
		if e.fail {
			fails++
		}
	}
	if tally.injected != fails {
		t.Errorf("the handler answered 500 on purpose %d times, want %d (once per failing event)", tally.injected, fails)
	}
	if len(tally.other5xx) > 0 {
		t.Errorf("%d answers were 5xx other than the handler's own: %v", len(tally.other5xx), tally.other5xx[:min(len(tally.other5xx), 5)])
	}
	if tally.byStatus[http.StatusUnprocessableEntity] > 0 {
		t.Errorf("%d deliveries were refused as mismatches", tally.byStatus[http.StatusUnprocessableEntity])
	}
	statuses := slices.Sorted(func(yield func(int) bool) {
		for s := range tally.byStatus {
			if !yield(s) {
				return
			}
		}
	})
	var answers []string
	for _, s := range statuses {
		answers = append(answers, fmt.Sprintf("%d×%d", tally.byStatus[s], s))
	}
	t.Logf("webhook load: %d events of %d objects, %d deliveries (%d sent as concurrent pairs), %d attempts in %s across %d instances",
		len(events), loadObjects, tally.started, 2*countPairs(plan), tally.attempts, elapsed.Round(time.Millisecond), loadInstances)
	t.Logf("answers: %s; replayed %d; retried after non-2xx %d", strings.Join(answers, ", "), tally.replayed, tally.redeliver)
	t.Logf("handler runs %d (committed %d, one per event; %d applied as newest, %d acknowledged as stale); injected 500s %d; other 5xx %d; objects at their newest event %d/%d",
		runs.Load(), len(committed), appliedNewest, len(committed)-appliedNewest, tally.injected, len(tally.other5xx), len(newest)-wrong, len(newest))
}

func countPairs(plan []loadDelivery) int {
	n := 0
	for _, d := range plan {
		if d.pair {
			n++
		}
	}
	return n
}

// loadHandler applies a payment.updated event: it fails on purpose on the
// first run of a failing event, records the effect, and sets the payment's
// status when the event is the newest of the payment.
func loadHandler(store *idempg.Store, failing map[string]bool, failedOnce *sync.Map, runs *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		ctx := r.Context()
		ev, _ := idemwebhook.EventFromContext(ctx)
		var body struct {
			Data struct{ ID, Status string }
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, "not a payment event", http.StatusBadRequest)
			return
		}
		fail := func() bool {
			// The first run that got the event's key fails, after its
			// first statement: until then, a run may be one that the
			// middleware answers from the key (see idempg's deferred
			// claim), whose answer is not the handler's.
			if !failing[ev.ID] {
				return false
			}
			_, done := failedOnce.LoadOrStore(ev.ID, true)
			return !done
		}
		if err := applyLoadEvent(ctx, store, ev, body.Data.Status, fail); errors.Is(err, errInjected) {
			http.Error(w, loadInjectedError, http.StatusInternalServerError)
			return
		} else if err != nil {
			// The middleware answers for a key held elsewhere (409) or a
			// store failure (503); anything else is the test's failure.
			http.Error(w, "apply: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

var errInjected = errors.New("injected failure")

func applyLoadEvent(ctx context.Context, store *idempg.Store, ev idemwebhook.Event, status string, fail func() bool) error {
	newest, err := idemwebhook.Newest(ctx, store, ev.Object)
	if err != nil {
		return err
	}
	if fail() {
		return errInjected // rolls back the watermark
	}
	tx, err := idempg.TxFromContext(ctx)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO effects (event_id, applied) VALUES ($1, $2)`, ev.ID, newest); err != nil {
		return err
	}
	if !newest {
		return nil
	}
	_, err = tx.Exec(ctx, `INSERT INTO payments (id, status, event_id) VALUES ($1, $2, $3)
		ON CONFLICT (id) DO UPDATE SET status = excluded.status, event_id = excluded.event_id`, ev.Object, status, ev.ID)
	return err
}
