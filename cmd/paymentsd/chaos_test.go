package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/internal/payments"
	"github.com/idemkit/idem/cmd/internal/processor"
	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/idemstore"
)

// TestLossyProcessorChargesEveryKeyOnce runs 200 payments from 8
// concurrent clients (idemclient, retrying with one key per payment)
// through paymentsd in two-phase mode against a processord that loses 30%
// of its answers after charging and answers 10% only after the caller gave
// up: every payment ends succeeded, each key charged exactly once at the
// processor (GET /v1/charges?idempotency_key=), no charge without a payment.
func TestLossyProcessorChargesEveryKeyOnce(t *testing.T) {
	t.Parallel()
	paymentsd, processord := binaries(t)
	dir := t.TempDir()
	procDB := filepath.Join(dir, "proc.db")
	proc := start(t, processord, "-addr", "127.0.0.1:0", "-db", procDB, "-lose-rate", "0.3", "-timeout-rate", "0.1", "-seed", "7")
	payDB := filepath.Join(dir, "pay.db")
	svc := start(t, paymentsd, "-addr", "127.0.0.1:0", "-db", "sqlite:"+payDB,
		"-processor", proc.base, "-lock-timeout", "15s", "-resumer-interval", "1s")

	// Count the faults that processord logs, so that the test cannot pass
	// without them.
	var lost, held int
	stopCounting := make(chan struct{})
	counted := make(chan struct{})
	go func() {
		defer close(counted)
		for {
			select {
			case line := <-proc.stderr.lines:
				switch {
				case strings.Contains(line, "closing the connection without an answer"):
					lost++
				case strings.Contains(line, "holding the answer"):
					held++
				}
			case <-stopCounting:
				return
			}
		}
	}()
	client, err := idemclient.New(&idemclient.Config{MaxAttempts: 100, MaxElapsed: 5 * time.Minute, AttemptTimeout: 30 * time.Second, MaxDelay: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	const payments, clients = 200, 8
	keys := make(chan int)
	go func() {
		for i := range payments {
			keys <- i
		}
		close(keys)
	}()
	// Every payment's retries end by the storm's deadline, so that a
	// payment that never completes fails the test by name instead of
	// retrying until the test binary's timeout; and the storm stops after
	// a few failed payments, which show the rule broken already.
	storm, stop := context.WithTimeoutCause(context.Background(), lossyStormDeadline,
		fmt.Errorf("the storm's deadline, %v, passed", lossyStormDeadline))
	defer stop()
	const maxFailed = 5
	var failed atomic.Int32
	var mu sync.Mutex
	var failures, unanswered []string
	fail := func(key, what string) {
		mu.Lock()
		defer mu.Unlock()
		failures = append(failures, key+": "+what)
		if failed.Add(1) == maxFailed {
			stop()
		}
	}
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for i := range keys {
				key := fmt.Sprintf("chaos-%03d", i)
				if storm.Err() != nil {
					mu.Lock()
					unanswered = append(unanswered, key)
					mu.Unlock()
					continue
				}
				body := fmt.Sprintf(`{"amount":%d,"currency":"usd","customer":"cus_%d"}`, 1000+100*i, i)
				ctx := idemclient.WithKey(storm, key)
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, svc.base+"/v1/payments", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer sk_a")
				res, err := client.Do(req)
				switch {
				case err != nil:
					fail(key, err.Error())
				default:
					io.Copy(io.Discard, res.Body)
					res.Body.Close()
					if res.StatusCode != http.StatusCreated {
						fail(key, fmt.Sprintf("final answer %d; want 201", res.StatusCode))
					}
				}
			}
		})
	}
	wg.Wait() // every request ends by the storm's deadline
	close(stopCounting)
	<-counted
	if len(failures) > 0 || len(unanswered) > 0 {
		why := "the storm ran to its end"
		switch {
		case failed.Load() >= maxFailed:
			why = fmt.Sprintf("the storm stopped after %d failed payments", maxFailed)
		case storm.Err() != nil:
			why = context.Cause(storm).Error()
		}
		slices.Sort(failures)
		t.Fatalf("%d of %d payments failed and %d were not sent (%s): %s",
			len(failures), payments, len(unanswered), why, strings.Join(failures, "; "))
	}
	if lost == 0 || held == 0 {
		t.Errorf("processord lost %d answers and held %d; want some of each", lost, held)
	}
	t.Logf("processord lost %d answers and held %d past the caller's deadline", lost, held)

	for i := range payments {
		key := fmt.Sprintf("chaos-%03d", i)
		if n := chargesOf(t, proc.base, chargeKeyOf(t, payDB, "alice", key)); n != 1 {
			t.Errorf("%s: %d charges at the processor; want 1", key, n)
		}
	}
	svc.kill()
	proc.kill()
	if n := countRows(t, payDB, `SELECT count(*) FROM payments WHERE status = 'succeeded'`); n != payments {
		t.Errorf("%d succeeded payments; want %d", n, payments)
	}
	if n := countRows(t, payDB, `SELECT count(*) FROM payments`); n != payments {
		t.Errorf("%d payment rows; want %d, one per key", n, payments)
	}
	if n := countRows(t, procDB, `SELECT count(*) FROM charges`); n != payments {
		t.Errorf("%d charges at the processor; want %d, none without a payment", n, payments)
	}
}

// lossyStormDeadline bounds TestLossyProcessorChargesEveryKeyOnce's
// payments, retries included: several times what they take on a loaded
// machine, well inside the test binary's timeout.
const lossyStormDeadline = 3 * time.Minute

// chargeKeyOf is the processor's key for the payment of the client's key
// in the database at path.
func chargeKeyOf(t *testing.T, path, clientID, key string) string {
	t.Helper()
	var id string
	scanRow(t, path, `SELECT id FROM payments WHERE client_id = ? AND idempotency_key = ?`, []any{clientID, key}, &id)
	return payments.ChargeKey(idem.ContextWithScope(context.Background(), idemstore.Scope{ClientID: clientID, Key: key}), id)
}

// chargesOf lists the charges of a derived key at the processor.
func chargesOf(t *testing.T, base, key string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/charges?idempotency_key="+url.QueryEscape(key), nil)
	req.Header.Set("Authorization", "Bearer "+processor.DevToken)
	res, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("GET /v1/charges: %v", err)
	}
	defer res.Body.Close()
	var list struct {
		Data []json.RawMessage `json:"data"`
	}
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/charges: %d", res.StatusCode)
	}
	if err := json.NewDecoder(res.Body).Decode(&list); err != nil {
		t.Fatalf("GET /v1/charges: %v", err)
	}
	return len(list.Data)
}
