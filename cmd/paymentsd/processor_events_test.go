package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/idemoutbox"
	"github.com/idemkit/idem/idemsqlite"
)

// TestProcessorEventsRecordEveryChargeOnce: processord, given
// -webhook-url, sends a signed Standard Webhook for every charge, also
// for those whose answer it drops (-lose-rate); paymentsd, given
// -processor-webhook-secret, receives them on POST /v1/webhooks/processor
// and records each charge once, with its outcome.
func TestProcessorEventsRecordEveryChargeOnce(t *testing.T) {
	t.Parallel()
	paymentsd, processord := binaries(t)
	dir := t.TempDir()
	procDB, payDB := filepath.Join(dir, "proc.db"), filepath.Join(dir, "pay.db")
	secret := idemoutbox.NewSecret()

	// Each needs the other's address: paymentsd reaches processord
	// through a proxy whose target is set once processord listens.
	var target atomic.Pointer[url.URL]
	proxy := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(target.Load()) }})
	defer proxy.Close()
	svc := startWithEnv(t, paymentsd, []string{"PAYMENTSD_PROCESSOR_WEBHOOK_SECRET=" + secret},
		"-addr", "127.0.0.1:0", "-db", "sqlite:"+payDB, "-processor", proxy.URL)
	proc := startWithEnv(t, processord, []string{"PROCESSORD_WEBHOOK_SECRET=" + secret},
		"-addr", "127.0.0.1:0", "-db", procDB, "-webhook-url", svc.base+"/v1/webhooks/processor", "-lose-rate", "0.3", "-seed", "7")
	u, err := url.Parse(proc.base)
	if err != nil {
		t.Fatal(err)
	}
	target.Store(u)

	const payments = 12
	for i := range payments {
		amount := 1000 + i*100 // 1000, 1100, ...
		if i == 3 {
			amount = 1302 // declined
		}
		a := retryLikeAClient(t, svc.base, fmt.Sprintf("pay-%02d", i), fmt.Sprintf(`{"amount":%d,"currency":"usd","customer":"cus_1"}`, amount))
		if a.status != http.StatusCreated && a.status != http.StatusPaymentRequired {
			t.Fatalf("payment %d: %d %s", i, a.status, a.body)
		}
	}
	if n := countRows(t, procDB, `SELECT count(*) FROM charges`); n != payments {
		t.Fatalf("%d charges at the processor, want %d", n, payments)
	}
	pollStatus(t, "all recorded", func() string {
		if n := countRows(t, payDB, `SELECT count(*) FROM processor_charges`); n < payments {
			return fmt.Sprintf("%d recorded", n)
		}
		return "all recorded"
	})
	// Every charge of the processor, once, with its outcome.
	store, err := idemsqlite.Open(procDB, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	rows, err := store.ReadDB().Query(`SELECT id, outcome FROM charges`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	declined := 0
	for rows.Next() {
		var id, outcome string
		if err := rows.Scan(&id, &outcome); err != nil {
			t.Fatal(err)
		}
		if outcome == "declined" {
			declined++
		}
		if n := countRows(t, payDB, `SELECT count(*) FROM processor_charges WHERE id = ? AND outcome = ?`, id, outcome); n != 1 {
			t.Errorf("charge %s (%s) recorded %d times by paymentsd, want 1", id, outcome, n)
		}
	}
	if declined != 1 {
		t.Errorf("%d declined charges, want 1", declined)
	}
	if n := countRows(t, payDB, `SELECT count(*) FROM processor_charges`); n != payments {
		t.Errorf("%d charges recorded by paymentsd, want %d", n, payments)
	}
}

// TestProcessorEventsRefuseABadSecret: a secret that is not whsec_ and
// base64 stops paymentsd at start, without repeating it.
func TestProcessorEventsRefuseABadSecret(t *testing.T) {
	t.Parallel()
	db := "sqlite:" + filepath.Join(t.TempDir(), "pay.db")
	p := runInProcess(t, "-addr", "127.0.0.1:0", "-admin-addr", "off", "-db", db, "-processor-webhook-secret", "whsec_SECRETVALUE!")
	select {
	case err := <-p.done:
		if err == nil || !strings.Contains(err.Error(), "-processor-webhook-secret") || strings.Contains(err.Error(), "SECRETVALUE") {
			t.Fatalf("Run = %v, want a refusal of -processor-webhook-secret that does not repeat it", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not refuse the secret within 30 s")
	}
}
