package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/idemoutbox"
	"github.com/idemkit/idem/internal/pgtest"
)

// webhookReceiver verifies every delivery, deduplicates by webhook-id and
// records deliveries of one event that overlap in time. With flaky set it
// fails about half of the deliveries, at random, and is slow on some.
type webhookReceiver struct {
	secret string
	flaky  bool

	mu       sync.Mutex
	rng      *rand.Rand
	events   map[string]json.RawMessage // by webhook-id: the first accepted body
	attempts int
	failed   int
	inflight map[string]bool
	overlaps int
	invalid  []string
}

func newWebhookReceiver(t *testing.T, flaky bool) (*webhookReceiver, string) {
	r := &webhookReceiver{
		secret: idemoutbox.NewSecret(), flaky: flaky, rng: rand.New(rand.NewPCG(1, 2)),
		events: map[string]json.RawMessage{}, inflight: map[string]bool{},
	}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return r, srv.URL
}

func (r *webhookReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := idemoutbox.VerifyRequest(r.secret, req, nil)
	id := req.Header.Get(idemoutbox.HeaderID)
	r.mu.Lock()
	r.attempts++
	if err != nil {
		r.invalid = append(r.invalid, fmt.Sprintf("%s: %v", id, err))
		r.mu.Unlock()
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if r.inflight[id] {
		r.overlaps++
	}
	r.inflight[id] = true
	fail := r.flaky && r.rng.IntN(2) == 0
	slow := r.flaky && r.rng.IntN(10) == 0
	r.mu.Unlock()

	if slow { // a slow receiver, as seen by the sender; nothing waits on it
		<-time.After(200 * time.Millisecond)
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.inflight, id)
	if fail {
		r.failed++
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	if _, dup := r.events[id]; !dup {
		r.events[id] = body
	}
	w.WriteHeader(http.StatusNoContent)
}

func (r *webhookReceiver) distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.events)
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, deadline time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(deadline)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("%s: not within %s", what, deadline)
		}
		<-time.After(20 * time.Millisecond)
	}
}

// TestTwoInstancesDeliverEveryEventOnce runs two paymentsd processes on one
// PostgreSQL database, both relaying to one receiver that fails about half
// of its deliveries at random and is slow on some, and makes 500 payments:
// every payment's event arrives, the receiver ends with exactly 500
// distinct events, every signature verifies, and no event is ever
// delivered by both instances at the same time.
func TestTwoInstancesDeliverEveryEventOnce(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	recv, recvURL := newWebhookReceiver(t, true)
	paymentsd, _ := binaries(t)
	instances := make([]*process, 2)
	for i := range instances {
		instances[i] = start(t, paymentsd, "-addr", "127.0.0.1:0", "-migrate", "-db", withPoolSize(dbURL, 8),
			"-webhook-url", recvURL, "-webhook-secret", recv.secret, "-webhook-retry", "20ms", "-webhook-max-attempts", "1000")
	}

	const payments = 500
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	work := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for k := range work {
				a := postWith(client, instances[k%2].base, "sk_a", fmt.Sprintf("evt-%d", k), fmt.Sprintf(`{"amount":%d,"currency":"usd","customer":"cus_%d"}`, 100*k+101, k)) // never ending in 02, which is declined
				if a.status != http.StatusCreated {
					t.Errorf("payment %d: %d %s", k, a.status, a.body)
				}
			}
		})
	}
	for k := range payments {
		work <- k
	}
	close(work)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	waitFor(t, 2*time.Minute, "every event delivered and recorded", func() bool {
		var undelivered int
		err := pool.QueryRow(context.Background(), `SELECT count(*) FROM idem_outbox WHERE status <> 'delivered'`).Scan(&undelivered)
		return err == nil && undelivered == 0 && recv.distinct() == payments
	})

	recv.mu.Lock()
	defer recv.mu.Unlock()
	t.Logf("receiver: %d deliveries, %d failed on purpose, %d distinct events, %d overlaps", recv.attempts, recv.failed, len(recv.events), recv.overlaps)
	if len(recv.invalid) > 0 {
		t.Fatalf("%d deliveries failed verification, first: %s", len(recv.invalid), recv.invalid[0])
	}
	if recv.overlaps != 0 {
		t.Fatalf("%d deliveries overlapped another delivery of the same event, want 0", recv.overlaps)
	}
	if recv.failed == 0 {
		t.Fatal("the receiver never failed: the retries were not exercised")
	}
	// Each event describes one payment, and every payment has its event.
	rows, err := pool.Query(context.Background(), `SELECT id FROM payments`)
	if err != nil {
		t.Fatal(err)
	}
	paid := map[string]bool{}
	for rows.Next() {
		var id string
		rows.Scan(&id)
		paid[id] = true
	}
	if rows.Err() != nil || len(paid) != payments {
		t.Fatalf("%d payments (%v), want %d", len(paid), rows.Err(), payments)
	}
	for id, body := range recv.events {
		var msg struct {
			Type string `json:"type"`
			Data struct {
				ID string `json:"id"`
			} `json:"data"`
		}
		if err := json.Unmarshal(body, &msg); err != nil || msg.Type != "payment.succeeded" || !paid[msg.Data.ID] {
			t.Fatalf("event %s: %s; want payment.succeeded of a payment", id, body)
		}
		delete(paid, msg.Data.ID)
	}
	if len(paid) != 0 {
		t.Fatalf("%d payments without a delivered event", len(paid))
	}
}

// TestRunDeliversWebhooks: paymentsd on SQLite posts each payment's event,
// signed, and counts the deliveries on /metrics.
func TestRunDeliversWebhooks(t *testing.T) {
	t.Parallel()
	recv, recvURL := newWebhookReceiver(t, false)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdout := newLineWriter()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{"-addr", "127.0.0.1:0", "-admin-addr", "127.0.0.1:0", "-tokens", "sk_a=alice",
			"-db", "sqlite:" + filepath.Join(t.TempDir(), "p.db"), "-webhook-url", recvURL, "-webhook-secret", recv.secret}, stdout, &syncBuffer{})
	}()
	base := waitListening(t, stdout.lines, "paymentsd")
	admin := waitLine(t, stdout.lines, adminRE, "paymentsd's admin endpoint")
	for k := range 3 {
		if a := post(t, base, "sk_a", fmt.Sprintf("wh-%d", k), `{"amount":100,"currency":"usd","customer":"cus_1"}`); a.status != http.StatusCreated {
			t.Fatalf("payment: %d %s", a.status, a.body)
		}
	}
	waitFor(t, 30*time.Second, "three events delivered", func() bool { return recv.distinct() == 3 })
	waitFor(t, 30*time.Second, "the deliveries counted on /metrics", func() bool {
		res, err := http.Get(admin + "/metrics")
		if err != nil {
			return false
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return bytes.Contains(b, []byte(`idem_outbox_deliveries_total{result="delivered"} 3`))
	})
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/events", nil)
	req.Header.Set("Authorization", "Bearer sk_a")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || strings.Count(string(b), `"payment.succeeded"`) != 3 {
		t.Fatalf("GET /v1/events: %d %s", res.StatusCode, b)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestWebhookFlags: -webhook-url needs a valid secret; the secret, from
// the flag or PAYMENTSD_WEBHOOK_SECRET, is never printed, not by -h nor in
// an error.
func TestWebhookFlags(t *testing.T) {
	secret := idemoutbox.NewSecret()
	t.Setenv("PAYMENTSD_WEBHOOK_SECRET", secret)
	var out bytes.Buffer
	Run(context.Background(), []string{"-h"}, &out, &out)
	if !strings.Contains(out.String(), "-webhook-secret") || strings.Contains(out.String(), secret[6:]) {
		t.Errorf("-h output:\n%s", out.String())
	}
	o, err := parseFlags([]string{"-webhook-url", "http://127.0.0.1:1/hook"}, &out)
	if err != nil || o.webhookSecret != secret {
		t.Errorf("the environment's secret is not used: %v", err)
	}
	db := "sqlite:" + filepath.Join(t.TempDir(), "p.db")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-webhook-url", "http://127.0.0.1:1/hook", "-webhook-secret", "whsec_NOT*BASE64*" + secret[6:]}, "-webhook-secret"},
		{[]string{"-webhook-url", "http://127.0.0.1:1/hook", "-webhook-secret", "whsec_AA=="}, "-webhook-secret: idemoutbox: a secret is written whsec_ followed by the base64 of 24 to 64 bytes: it decodes to 1 bytes"},
		{[]string{"-webhook-url", "http://127.0.0.1:1/hook", "-webhook-secret", secret[6:]}, "does not start with whsec_"},
		{[]string{"-webhook-url", "ftp://example.com/hook"}, "-webhook-url"},
		{[]string{"-webhook-url", "http://127.0.0.1:1/hook", "-webhook-max-attempts", "0"}, "-webhook-max-attempts"},
	} {
		var stderr bytes.Buffer
		args := append([]string{"-addr", "127.0.0.1:0", "-admin-addr", "off", "-tokens", "sk_a=alice", "-db", db}, tt.args...)
		// A secret that is wrongly accepted starts the service: the
		// deadline stops it, and Run's nil error fails the case.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := Run(ctx, args, &stderr, &stderr)
		cancel()
		if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error()+stderr.String(), secret[6:]) {
			t.Errorf("Run(%q) = %v (output %q); want an error naming %s without the secret", tt.args, err, stderr.String(), tt.want)
		}
	}
	t.Setenv("PAYMENTSD_WEBHOOK_SECRET", "")
	err = Run(context.Background(), []string{"-addr", "127.0.0.1:0", "-admin-addr", "off", "-tokens", "sk_a=alice", "-db", db, "-webhook-url", "http://127.0.0.1:1/hook"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "-webhook-secret") {
		t.Errorf("-webhook-url without a secret: %v, want an error naming -webhook-secret", err)
	}
}

// TestKilledRelayLosesNoEvent kills (SIGKILL) a paymentsd process on
// PostgreSQL while its relay is delivering a batch, then starts another:
// every committed payment's event is delivered, none lost.
func TestKilledRelayLosesNoEvent(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	recv, _ := newWebhookReceiver(t, false)
	// The first delivery blocks until the process that sent it is dead.
	arrived, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	blocking := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		first := false
		once.Do(func() { first = true })
		if first {
			close(arrived)
			<-release
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		recv.ServeHTTP(w, r)
	}))
	t.Cleanup(blocking.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	paymentsd, _ := binaries(t)
	args := []string{"-addr", "127.0.0.1:0", "-migrate", "-db", withPoolSize(dbURL, 4),
		"-webhook-url", blocking.URL, "-webhook-secret", recv.secret, "-webhook-retry", "20ms"}
	first := start(t, paymentsd, args...)
	const payments = 20
	for k := range payments {
		if a := post(t, first.base, "sk_a", fmt.Sprintf("kill-%d", k), `{"amount":100,"currency":"usd","customer":"cus_1"}`); a.status != http.StatusCreated {
			t.Fatalf("payment %d: %d %s", k, a.status, a.body)
		}
	}
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("no delivery arrived")
	}
	first.kill()
	close(release)

	second := start(t, paymentsd, args...)
	defer second.kill()
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	waitFor(t, time.Minute, "every event delivered by the second instance", func() bool {
		var undelivered int
		err := pool.QueryRow(context.Background(), `SELECT count(*) FROM idem_outbox WHERE status <> 'delivered'`).Scan(&undelivered)
		return err == nil && undelivered == 0 && recv.distinct() == payments
	})
	recv.mu.Lock()
	defer recv.mu.Unlock()
	if len(recv.invalid) > 0 || recv.overlaps != 0 {
		t.Fatalf("%d invalid deliveries, %d overlaps; want none", len(recv.invalid), recv.overlaps)
	}
}

// withPoolSize bounds the pool of a paymentsd on the shared test server.
func withPoolSize(dbURL string, conns int) string {
	sep := "?"
	if strings.Contains(dbURL, "?") {
		sep = "&"
	}
	return fmt.Sprintf("%s%spool_max_conns=%d", dbURL, sep, conns)
}
