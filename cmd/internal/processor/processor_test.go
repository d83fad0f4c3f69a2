package processor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/cmd/internal/database"
	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/internal/bearer"
	"github.com/idemkit/idem/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var quiet = slog.New(slog.DiscardHandler)

// stores are the databases every persistence test runs on.
var stores = []struct {
	name string
	url  func(t *testing.T) string
}{
	{"SQLite", func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "proc.db") }},
	{"PostgreSQL", func(t *testing.T) string { return pgtest.NewDatabase(t) }},
}

// proc is a processor served over HTTP on the database at a URL.
type proc struct {
	URL  string
	db   *database.DB
	once sync.Once
	stop func()
}

// open serves a processor with cfg's faults on the database at dbURL; it
// accepts the tokens sk_a (client alice) and sk_b (client bob).
func open(t *testing.T, dbURL string, cfg Config) *proc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	db, err := database.Open(ctx, dbURL, &database.Config{Migrate: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store, cfg.Logger = db.Store(), quiet
	if cfg.Tokens, err = bearer.Parse("sk_a=alice,sk_b=bob"); err != nil {
		t.Fatal(err)
	}
	h, err := NewHandler(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	p := &proc{URL: srv.URL, db: db}
	p.stop = func() {
		p.once.Do(func() {
			cancel()
			srv.Close()
			db.Close()
		})
	}
	t.Cleanup(p.stop)
	return p
}

// client opens a connection per request: on a reused connection Go's
// transport would resend a keyed request whose answer was lost, and the
// test would not see the loss.
var client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// response is an answer to a charge.
type response struct {
	status   int
	replayed bool
	body     []byte
}

// charge asks for a charge of amount with key as alice.
func charge(ctx context.Context, base, key string, amount int64) (*response, error) {
	body := fmt.Sprintf(`{"amount":%d,"currency":"usd","customer":"c"}`, amount)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/charges", strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk_a")
	req.Header.Set("Idempotency-Key", key)
	res, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return &response{status: res.StatusCode, replayed: res.Header.Get("Idempotent-Replayed") == "true", body: b}, err
}

func mustCharge(t *testing.T, base, key string, amount int64) *response {
	t.Helper()
	r, err := charge(context.Background(), base, key, amount)
	if err != nil {
		t.Fatalf("charge %s: %v", key, err)
	}
	return r
}

// chargeID returns the id of the charge in a 201 or 402 body.
func chargeID(t *testing.T, r *response) string {
	t.Helper()
	var c struct {
		ID     string `json:"id"`
		Charge Charge `json:"charge"`
	}
	if err := json.Unmarshal(r.body, &c); err != nil {
		t.Fatalf("%d %s: %v", r.status, r.body, err)
	}
	if r.status == http.StatusPaymentRequired {
		return c.Charge.ID
	}
	return c.ID
}

func get(t *testing.T, base, token, path string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

// list gets one page of GET /v1/charges with the query q.
func list(t *testing.T, base, token string, q url.Values) ChargeList {
	t.Helper()
	status, body := get(t, base, token, "/v1/charges?"+q.Encode())
	var page ChargeList
	if status != http.StatusOK || json.Unmarshal(body, &page) != nil {
		t.Fatalf("list %s: %d %s", q.Encode(), status, body)
	}
	return page
}

// chargesOf returns alice's charges with key.
func chargesOf(t *testing.T, base, key string) []Charge {
	t.Helper()
	return list(t, base, "sk_a", url.Values{"idempotency_key": {key}}).Data
}

// onlyCharge checks that key has exactly one charge, with id when id is
// not "", and returns it.
func onlyCharge(t *testing.T, base, key, id string) Charge {
	t.Helper()
	cs := chargesOf(t, base, key)
	if len(cs) != 1 || (id != "" && cs[0].ID != id) || cs[0].IdempotencyKey != key {
		t.Fatalf("charges of %s: %+v, want one (id %q)", key, cs, id)
	}
	if status, body := get(t, base, "sk_a", "/v1/charges/count?key="+url.QueryEscape(key)); status != http.StatusOK || strings.TrimSpace(string(body)) != `{"charges":1}` {
		t.Fatalf("count of %s: %d %s", key, status, body)
	}
	return cs[0]
}

// eventually polls cond until it holds, for at most 30 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("%s: not within 30 s", what)
		}
	}
}

func TestChargesOncePerKeyAndListsPerClient(t *testing.T) {
	t.Parallel()
	p := open(t, stores[0].url(t), Config{})
	first := mustCharge(t, p.URL, "k1", 100)
	if first.status != http.StatusCreated {
		t.Fatalf("charge: %d %s", first.status, first.body)
	}
	for range 2 {
		again := mustCharge(t, p.URL, "k1", 100)
		if again.status != http.StatusCreated || !again.replayed || chargeID(t, again) != chargeID(t, first) {
			t.Fatalf("retry: %d replayed=%v %s", again.status, again.replayed, again.body)
		}
	}
	c := onlyCharge(t, p.URL, "k1", chargeID(t, first))
	if c.Amount != 100 || c.Currency != "usd" || c.Outcome != OutcomeSucceeded || c.Created == 0 {
		t.Errorf("listed charge: %+v", c)
	}
	if page := list(t, p.URL, "sk_b", nil); len(page.Data) != 0 {
		t.Errorf("bob sees alice's charges: %+v", page.Data)
	}
	for _, path := range []string{"/v1/charges", "/v1/charges/count"} {
		if status, _ := get(t, p.URL, "", path); status != http.StatusUnauthorized {
			t.Errorf("GET %s without a token: %d, want 401", path, status)
		}
	}
}

func TestSimulatedFailureChargesNothing(t *testing.T) {
	t.Parallel()
	p := open(t, stores[0].url(t), Config{FailRate: 1})
	r := mustCharge(t, p.URL, "k1", 100)
	if r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "nothing was charged") {
		t.Fatalf("charge: %d %s, want 503", r.status, r.body)
	}
	if cs := list(t, p.URL, "sk_a", nil).Data; len(cs) != 0 {
		t.Errorf("charges: %+v, want none", cs)
	}
}

// TestLostAnswer: the processor charges and closes the connection; the
// client sees a connection error, the charge exists, and the retry with the
// same key gets that charge.
func TestLostAnswer(t *testing.T) {
	t.Parallel()
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			p := open(t, s.url(t), Config{LoseRate: 1})
			r, err := charge(context.Background(), p.URL, "k-lost", 100)
			if err == nil {
				t.Fatalf("charge answered %d %s; want the connection closed", r.status, r.body)
			}
			c := onlyCharge(t, p.URL, "k-lost", "")
			retry := mustCharge(t, p.URL, "k-lost", 100)
			if retry.status != http.StatusCreated || !retry.replayed || chargeID(t, retry) != c.ID {
				t.Fatalf("retry: %d replayed=%v %s; want the replay of %s", retry.status, retry.replayed, retry.body, c.ID)
			}
			onlyCharge(t, p.URL, "k-lost", c.ID)
		})
	}
}

// TestTimedOutAnswer: the processor charges and holds the answer; the
// client gives up, the charge exists, and the retry with the same key gets
// that charge.
func TestTimedOutAnswer(t *testing.T) {
	t.Parallel()
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			p := open(t, s.url(t), Config{TimeoutRate: 1})
			ctx, giveUp := context.WithCancelCause(context.Background())
			defer giveUp(nil)
			deadline := errors.New("the caller's deadline passed")
			done := make(chan error, 1)
			go func() {
				r, err := charge(ctx, p.URL, "k-slow", 100)
				if err == nil {
					err = fmt.Errorf("answered %d %s before the caller gave up", r.status, r.body)
				}
				done <- err
			}()
			eventually(t, "the charge", func() bool { return len(chargesOf(t, p.URL, "k-slow")) == 1 })
			giveUp(deadline)
			if err := <-done; !errors.Is(err, deadline) && !errors.Is(err, context.Canceled) {
				t.Fatalf("charge: %v; want the caller's own deadline", err)
			}
			c := onlyCharge(t, p.URL, "k-slow", "")
			retry := mustCharge(t, p.URL, "k-slow", 100)
			if retry.status != http.StatusCreated || !retry.replayed || chargeID(t, retry) != c.ID {
				t.Fatalf("retry: %d replayed=%v %s; want the replay of %s", retry.status, retry.replayed, retry.body, c.ID)
			}
			onlyCharge(t, p.URL, "k-slow", c.ID)
		})
	}
}

// TestHeldAnswerIsBounded: a caller that never gives up gets the answer
// after HoldMax, or when the processor stops.
func TestHeldAnswerIsBounded(t *testing.T) {
	t.Parallel()
	t.Run("HoldMax", func(t *testing.T) {
		t.Parallel()
		p := open(t, stores[0].url(t), Config{TimeoutRate: 1, HoldMax: time.Nanosecond})
		r := mustCharge(t, p.URL, "k1", 100)
		if r.status != http.StatusCreated || r.replayed {
			t.Fatalf("charge: %d replayed=%v %s", r.status, r.replayed, r.body)
		}
		onlyCharge(t, p.URL, "k1", chargeID(t, r))
	})
	t.Run("Stop", func(t *testing.T) {
		t.Parallel()
		p := open(t, stores[0].url(t), Config{TimeoutRate: 1})
		done := make(chan *response, 1)
		go func() {
			r, err := charge(context.Background(), p.URL, "k1", 100)
			if err != nil {
				r = &response{body: []byte(err.Error())}
			}
			done <- r
		}()
		eventually(t, "the charge", func() bool { return len(chargesOf(t, p.URL, "k1")) == 1 })
		go p.stop()
		if r := <-done; r.status != http.StatusCreated {
			t.Fatalf("charge: %d %s; want 201 when the processor stops", r.status, r.body)
		}
	})
}

// TestDeclines: an amount ending in 02 is declined with 402, recorded with
// outcome declined, and the decline is replayed, never charged again.
func TestDeclines(t *testing.T) {
	t.Parallel()
	p := open(t, stores[0].url(t), Config{})
	r := mustCharge(t, p.URL, "k-decline", 4202)
	var body struct {
		Type   string `json:"type"`
		Code   string `json:"code"`
		Status int    `json:"status"`
		Charge Charge `json:"charge"`
	}
	if r.status != http.StatusPaymentRequired || json.Unmarshal(r.body, &body) != nil || body.Code != "card-declined" ||
		body.Type != "/problems/card-declined" || body.Status != 402 || body.Charge.Outcome != OutcomeDeclined || body.Charge.ID == "" {
		t.Fatalf("charge of 4202: %d %s; want a 402 card-declined problem", r.status, r.body)
	}
	retry := mustCharge(t, p.URL, "k-decline", 4202)
	if retry.status != http.StatusPaymentRequired || !retry.replayed || chargeID(t, retry) != body.Charge.ID {
		t.Fatalf("retry: %d replayed=%v %s; want the replayed decline", retry.status, retry.replayed, retry.body)
	}
	if c := onlyCharge(t, p.URL, "k-decline", body.Charge.ID); c.Outcome != OutcomeDeclined || c.Amount != 4202 {
		t.Errorf("listed: %+v", c)
	}
	for _, amount := range []int64{4200, 4203, 4212, 102_00} {
		if r := mustCharge(t, p.URL, fmt.Sprint("k", amount), amount); r.status != http.StatusCreated {
			t.Errorf("charge of %d: %d %s, want 201", amount, r.status, r.body)
		}
	}
	if status, body := get(t, p.URL, "", "/problems/card-declined"); status != http.StatusOK {
		t.Errorf("GET /problems/card-declined: %d %s", status, body)
	}
}

// TestListPages: pages of a fixed number of charges cover each charge
// exactly once, newest first.
func TestListPages(t *testing.T) {
	t.Parallel()
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			p := open(t, s.url(t), Config{})
			const n, limit = 23, 5
			for i := range n {
				if r := mustCharge(t, p.URL, fmt.Sprintf("k%02d", i), 1000+10*int64(i)); r.status != http.StatusCreated {
					t.Fatalf("charge %d: %d %s", i, r.status, r.body)
				}
			}
			q := url.Values{"limit": {fmt.Sprint(limit)}}
			var keys []string
			for pages := 1; ; pages++ {
				page := list(t, p.URL, "sk_a", q)
				if len(page.Data) != limit && page.HasMore || len(page.Data) > limit || page.HasMore != (page.NextCursor != "") {
					t.Fatalf("page %d: %d charges, has_more %v, cursor %q", pages, len(page.Data), page.HasMore, page.NextCursor)
				}
				for _, c := range page.Data {
					keys = append(keys, c.IdempotencyKey)
				}
				if !page.HasMore {
					if want := (n + limit - 1) / limit; pages != want {
						t.Errorf("%d pages, want %d", pages, want)
					}
					break
				}
				if pages > n {
					t.Fatal("the pages do not end")
				}
				q.Set("cursor", page.NextCursor)
			}
			if len(keys) != n {
				t.Fatalf("the pages list %d charges, want %d: %v", len(keys), n, keys)
			}
			for i, k := range keys {
				if want := fmt.Sprintf("k%02d", n-1-i); k != want {
					t.Fatalf("charge %d of the pages is %s, want %s (newest first, each once): %v", i, k, want, keys)
				}
			}
			if page := list(t, p.URL, "sk_a", url.Values{"idempotency_key": {"k07"}, "limit": {"1"}}); len(page.Data) != 1 || page.HasMore || page.Data[0].Amount != 1070 {
				t.Errorf("k07: %+v", page)
			}
		})
	}
}

func TestListRejectsBadParameters(t *testing.T) {
	t.Parallel()
	p := open(t, stores[0].url(t), Config{})
	for _, tt := range []struct{ query, param string }{
		{"limit=0", "limit"}, {"limit=101", "limit"}, {"limit=ten", "limit"},
		{"cursor=nonsense", "cursor"}, {"cursor=" + formatCursor(0), "cursor"},
	} {
		status, body := get(t, p.URL, "sk_a", "/v1/charges?"+tt.query)
		if status != http.StatusBadRequest || !strings.Contains(string(body), `"param":"`+tt.param+`"`) {
			t.Errorf("?%s: %d %s; want 400 naming %s", tt.query, status, body, tt.param)
		}
	}
}

// TestKeysSurviveRestarts: a processor restarted on the same database knows
// every key, and so does one whose key records were purged: a key charges
// once, ever.
func TestKeysSurviveRestarts(t *testing.T) {
	t.Parallel()
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			dbURL := s.url(t)
			p := open(t, dbURL, Config{})
			paid, declined := mustCharge(t, p.URL, "k-paid", 100), mustCharge(t, p.URL, "k-declined", 302)
			if paid.status != http.StatusCreated || declined.status != http.StatusPaymentRequired {
				t.Fatalf("charges: %d %s, %d %s", paid.status, paid.body, declined.status, declined.body)
			}
			p.stop()

			p = open(t, dbURL, Config{})
			for _, tt := range []struct {
				key    string
				amount int64
				first  *response
			}{{"k-paid", 100, paid}, {"k-declined", 302, declined}} {
				r := mustCharge(t, p.URL, tt.key, tt.amount)
				if r.status != tt.first.status || !r.replayed || chargeID(t, r) != chargeID(t, tt.first) {
					t.Errorf("%s after a restart: %d replayed=%v %s", tt.key, r.status, r.replayed, r.body)
				}
				onlyCharge(t, p.URL, tt.key, chargeID(t, tt.first))
			}

			// Purge the key records, as retention eventually does.
			ctx := context.Background()
			if p.db.SQLite != nil {
				_, err := p.db.SQLite.DB().ExecContext(ctx, "DELETE FROM idempotency_keys")
				if err != nil {
					t.Fatal(err)
				}
			} else if _, err := p.db.Pool.Exec(ctx, "DELETE FROM idempotency_keys"); err != nil {
				t.Fatal(err)
			}
			r := mustCharge(t, p.URL, "k-paid", 100)
			if r.status != http.StatusCreated || chargeID(t, r) != chargeID(t, paid) {
				t.Errorf("k-paid without its key record: %d %s; want its charge", r.status, r.body)
			}
			if r := mustCharge(t, p.URL, "k-declined", 999); r.status != http.StatusUnprocessableEntity {
				t.Errorf("k-declined reused for another amount: %d %s; want 422", r.status, r.body)
			}
			onlyCharge(t, p.URL, "k-paid", chargeID(t, paid))
			onlyCharge(t, p.URL, "k-declined", chargeID(t, declined))
		})
	}
}

// TestFaultsFollowTheSeed: the same seed gives the same faults, in the
// configured proportions' order of checks.
func TestFaultsFollowTheSeed(t *testing.T) {
	t.Parallel()
	cfg := Config{FailRate: 0.2, LoseRate: 0.3, TimeoutRate: 0.1, Seed: 42}
	a, b, other := newFaults(cfg), newFaults(cfg), newFaults(Config{FailRate: 0.2, LoseRate: 0.3, TimeoutRate: 0.1, Seed: 43})
	seen := map[fault]int{}
	differs := false
	for range 1000 {
		fa := a.draw()
		if fb := b.draw(); fa != fb {
			t.Fatalf("seed 42 drew %v and %v", fa, fb)
		}
		differs = differs || other.draw() != fa
		seen[fa]++
	}
	if len(seen) != 4 || !differs {
		t.Errorf("faults of 1000 draws: %v; another seed differs: %v", seen, differs)
	}
	if f := newFaults(Config{}); f.any() || f.draw() != faultNone {
		t.Error("no rates, yet a fault")
	}
}

func TestConfigIsValidated(t *testing.T) {
	t.Parallel()
	tokens, _ := bearer.Parse("sk_a=alice")
	for _, cfg := range []Config{
		{Tokens: tokens, FailRate: -0.1},
		{Tokens: tokens, LoseRate: 1.1},
		{Tokens: tokens, LoseRate: 0.6, TimeoutRate: 0.5},
		{Tokens: tokens, HoldMax: -time.Second},
		{Tokens: tokens},           // no store
		{Tokens: nil, FailRate: 0}, // no tokens
	} {
		if _, err := NewHandler(context.Background(), cfg); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
}

// TestFaultsNeverChargeTwice: eight clients that retry like idemclient
// make 200 charges through lost and held answers; every key is charged
// exactly once, and each client's final answer is that charge.
func TestFaultsNeverChargeTwice(t *testing.T) {
	t.Parallel()
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			p := open(t, s.url(t), Config{LoseRate: 0.3, TimeoutRate: 0.1, Seed: 1})
			ic, err := idemclient.New(&idemclient.Config{
				Transport: &http.Transport{DisableKeepAlives: true},
				// A held answer is given up after AttemptTimeout and the
				// key retried; the timeout is small to keep the test short,
				// and any value works.
				AttemptTimeout: 100 * time.Millisecond, MaxAttempts: 100, MaxElapsed: 2 * time.Minute,
				BaseDelay: time.Millisecond, MaxDelay: 50 * time.Millisecond,
			})
			if err != nil {
				t.Fatal(err)
			}
			const clients, each = 8, 25
			got := make([]map[string]string, clients) // key -> charge id
			var retried atomic.Int64                  // operations that took more than one attempt
			var wg sync.WaitGroup
			for c := range clients {
				got[c] = map[string]string{}
				wg.Go(func() {
					for i := range each {
						key := fmt.Sprintf("c%d-%02d", c, i)
						req, _ := http.NewRequestWithContext(idemclient.WithKey(context.Background(), key), http.MethodPost, p.URL+"/v1/charges",
							strings.NewReader(fmt.Sprintf(`{"amount":%d,"currency":"usd","customer":"c"}`, 1000+10*i)))
						req.Header.Set("Content-Type", "application/json")
						req.Header.Set("Authorization", "Bearer sk_a")
						res, err := ic.Do(req)
						if err != nil {
							t.Errorf("%s: %v", key, err)
							return
						}
						if idemclient.Attempts(res) > 1 {
							retried.Add(1)
						}
						var ch Charge
						err = json.NewDecoder(res.Body).Decode(&ch)
						res.Body.Close()
						if err != nil || res.StatusCode != http.StatusCreated {
							t.Errorf("%s: %d %v", key, res.StatusCode, err)
							return
						}
						got[c][key] = ch.ID
					}
				})
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			listed := map[string]string{}
			q := url.Values{"limit": {"100"}}
			for {
				page := list(t, p.URL, "sk_a", q)
				for _, c := range page.Data {
					if prev, dup := listed[c.IdempotencyKey]; dup {
						t.Errorf("key %s charged twice: %s and %s", c.IdempotencyKey, prev, c.ID)
					}
					listed[c.IdempotencyKey] = c.ID
				}
				if !page.HasMore {
					break
				}
				q.Set("cursor", page.NextCursor)
			}
			if len(listed) != clients*each {
				t.Errorf("%d keys charged, want %d", len(listed), clients*each)
			}
			if retried.Load() == 0 {
				t.Error("no charge needed a retry; the faults did not happen")
			}
			t.Logf("%d of %d charges needed a retry", retried.Load(), clients*each)
			for _, m := range got {
				for key, id := range m {
					if listed[key] != id {
						t.Errorf("%s: the client got %s, the processor charged %q", key, id, listed[key])
					}
				}
			}
		})
	}
}

// TestOlderChargesTableIsUpgraded: a database written by a processord from
// before declines and listing keeps its charges, as succeeded ones, and
// their keys.
func TestOlderChargesTableIsUpgraded(t *testing.T) {
	t.Parallel()
	dbURL := stores[0].url(t)
	db, err := database.Open(context.Background(), dbURL, &database.Config{Migrate: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.SQLite.DB().Exec(`CREATE TABLE charges (
    id              TEXT    PRIMARY KEY,
    client_id       TEXT    NOT NULL,
    idempotency_key TEXT    NOT NULL,
    amount          INTEGER NOT NULL,
    currency        TEXT    NOT NULL,
    customer        TEXT    NOT NULL,
    created         INTEGER NOT NULL
);
INSERT INTO charges VALUES ('ch_old', 'alice', 'k-old', 500, 'usd', 'c', 1700000000)`)
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	p := open(t, dbURL, Config{})
	want := Charge{ID: "ch_old", Object: "charge", IdempotencyKey: "k-old", Amount: 500, Currency: "usd", Customer: "c", Outcome: OutcomeSucceeded, Created: 1700000000}
	if c := onlyCharge(t, p.URL, "k-old", "ch_old"); c != want {
		t.Errorf("old charge: %+v, want %+v", c, want)
	}
	if r := mustCharge(t, p.URL, "k-old", 500); r.status != http.StatusCreated || chargeID(t, r) != "ch_old" {
		t.Errorf("charge with the old key: %d %s; want ch_old", r.status, r.body)
	}
	onlyCharge(t, p.URL, "k-old", "ch_old")
}
