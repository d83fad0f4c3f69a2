package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemoutbox"
	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/idemwebhook"
)

// TestOutboxToIdemwebhookReceiver: paymentsd's own outbox, as it runs,
// delivers to a receiver built on idemwebhook (Standard Webhooks, atomic
// mode, SQLite): every delivery verifies, the handler fails the first
// attempt of every third event (its write rolled back, the key released,
// the relay retries), and a delivery sent again by hand is replayed.
// Every event paymentsd lists is applied exactly once.
func TestOutboxToIdemwebhookReceiver(t *testing.T) {
	t.Parallel()
	const payments = 15
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	secret := idemoutbox.NewSecret()

	store, err := idemsqlite.Open(filepath.Join(t.TempDir(), "receiver.db"), &idemsqlite.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := store.DB().Exec(`CREATE TABLE applied (event_id TEXT NOT NULL, type TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	verifier, err := idemwebhook.NewStandardWebhooks([]string{secret}, nil)
	if err != nil {
		t.Fatal(err)
	}
	recv, err := idemwebhook.New(store, &idemwebhook.Config{Endpoint: "paymentsd", Verifier: verifier, Idem: &idem.Config{Logger: slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		attempts = map[string]int{} // handler runs per event id
		failed   = 0
		sample   *http.Request // one delivery, to send again
		sampleB  []byte
	)
	handler := recv.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ev, ok := idemwebhook.EventFromContext(r.Context())
		if !ok {
			http.Error(w, "no event in the context", http.StatusInternalServerError)
			return
		}
		var body struct {
			Type string `json:"type"`
		}
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &body); err != nil || body.Type == "" {
			http.Error(w, "no type", http.StatusBadRequest)
			return
		}
		tx, err := idemsqlite.TxFromContext(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if _, err := tx.ExecContext(r.Context(), `INSERT INTO applied (event_id, type) VALUES (?, ?)`, ev.ID, body.Type); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		mu.Lock()
		attempts[ev.ID]++
		fail := len(attempts)%3 == 0 && attempts[ev.ID] == 1
		if fail {
			failed++
		}
		mu.Unlock()
		if fail { // after the write: the 500 must roll it back
			http.Error(w, "try again", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if sample == nil {
			b, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(b))
			sample, sampleB = r.Clone(context.Background()), b
		}
		mu.Unlock()
		handler.ServeHTTP(w, r)
	}))
	defer srv.Close()

	stdout := newLineWriter()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{"-addr", "127.0.0.1:0", "-admin-addr", "127.0.0.1:0", "-tokens", "sk_a=alice",
			"-db", "sqlite:" + filepath.Join(t.TempDir(), "p.db"), "-webhook-url", srv.URL, "-webhook-secret", secret,
			"-webhook-retry", "50ms"}, stdout, &syncBuffer{})
	}()
	base := waitListening(t, stdout.lines, "paymentsd")
	for k := range payments {
		if a := post(t, base, "sk_a", fmt.Sprintf("whr-%d", k), `{"amount":100,"currency":"usd","customer":"cus_1"}`); a.status != http.StatusCreated {
			t.Fatalf("payment: %d %s", a.status, a.body)
		}
	}

	// The events paymentsd lists, which the receiver must apply once each.
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/events?limit=100", nil)
	req.Header.Set("Authorization", "Bearer sk_a")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var listed struct {
		Data []struct {
			ID   string `json:"id"`
			Type string `json:"type"`
		} `json:"data"`
	}
	err = json.NewDecoder(res.Body).Decode(&listed)
	res.Body.Close()
	if err != nil || res.StatusCode != http.StatusOK || len(listed.Data) < payments {
		t.Fatalf("GET /v1/events: %d, %d events, %v", res.StatusCode, len(listed.Data), err)
	}
	applied := func() map[string]int {
		n := map[string]int{}
		rows, err := store.ReadDB().Query(`SELECT event_id FROM applied`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			n[id]++
		}
		return n
	}
	waitFor(t, 60*time.Second, fmt.Sprintf("the receiver to apply all %d listed events", len(listed.Data)), func() bool {
		return len(applied()) >= len(listed.Data)
	})

	// One delivery sent again, as a provider's retry would be: replayed,
	// the handler not run.
	mu.Lock()
	again, againB := sample, sampleB
	runsBefore := attempts[again.Header.Get(idemoutbox.HeaderID)]
	mu.Unlock()
	again.RequestURI, again.Body = "", io.NopCloser(bytes.NewReader(againB))
	again.URL.Scheme, again.URL.Host = "http", srv.Listener.Addr().String()
	res, err = http.DefaultClient.Do(again)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode/100 != 2 || res.Header.Get(idem.HeaderReplayed) != "true" {
		t.Errorf("a delivery sent again: %d, %s %q; want 2xx replayed", res.StatusCode, idem.HeaderReplayed, res.Header.Get(idem.HeaderReplayed))
	}

	got := applied()
	mu.Lock()
	defer mu.Unlock()
	if runs := attempts[again.Header.Get(idemoutbox.HeaderID)]; runs != runsBefore {
		t.Errorf("the delivery sent again ran the handler: %d runs, %d before", runs, runsBefore)
	}
	for _, e := range listed.Data {
		if got[e.ID] != 1 {
			t.Errorf("event %s (%s) applied %d times, want once", e.ID, e.Type, got[e.ID])
		}
	}
	if len(got) != len(listed.Data) {
		t.Errorf("%d events applied, paymentsd lists %d", len(got), len(listed.Data))
	}
	if failed == 0 {
		t.Error("no delivery failed on its first try: the retry path went untested")
	}
	t.Logf("%d events listed, %d applied once each; %d first tries answered 500 and retried; a delivery sent again was replayed", len(listed.Data), len(got), failed)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
