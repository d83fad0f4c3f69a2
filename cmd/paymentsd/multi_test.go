package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/pgtest"
)

// TestThreeInstancesOnePostgres runs three paymentsd processes on one
// PostgreSQL database (all migrating at start; the third claims keys the
// way it does behind a pooler in transaction mode) and sends 500 keys, each
// 8 times at once, spread over the three: exactly 500 payments, and every
// answer a 201, a byte-identical replay, or a 409; no 5xx.
func TestThreeInstancesOnePostgres(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	testThreeInstances(t, dbURL, func(i int) []string {
		args := []string{"-db", withPoolSize(dbURL, threeInstancesPool)}
		if i == 2 {
			args = append(args, "-transaction-pooling")
		}
		return args
	})
}

// TestThreeInstancesThroughPgBouncer runs the same three instances, all
// behind a real PgBouncer in pool_mode = transaction with
// -transaction-pooling.
func TestThreeInstancesThroughPgBouncer(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	viaBouncer := pgtest.StartBouncer(t, dbURL)
	testThreeInstances(t, dbURL, func(int) []string {
		return []string{"-db", withPoolSize(viaBouncer, threeInstancesPool), "-transaction-pooling"}
	})
}

// threeInstancesPool bounds each instance's pool, so that the two tests of
// three instances stay well inside the shared server's connections
// (max_connections is 100) while other packages' tests run.
const threeInstancesPool = 6

// multiStormDeadline bounds the requests of testThreeInstances: several
// times what they take on a loaded machine, well inside the test binary's
// timeout.
const multiStormDeadline = 2 * time.Minute

// testThreeInstances starts three paymentsd processes at once, each
// applying migrations, with the database flags dbArgs(i) gives instance i,
// and checks the storm's answers and the payments in the database at
// dbURL.
func testThreeInstances(t *testing.T, dbURL string, dbArgs func(i int) []string) {
	paymentsd, _ := binaries(t)
	instances := make([]*process, 3)
	var wg sync.WaitGroup
	for i := range instances {
		wg.Add(1)
		go func() {
			defer wg.Done()
			args := append([]string{"-addr", "127.0.0.1:0", "-migrate"}, dbArgs(i)...)
			instances[i] = start(t, paymentsd, args...)
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	const keys, copies = 500, 8
	type outcome struct {
		status   int
		replayed bool
		body     []byte
	}
	results := make([][copies]outcome, keys)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	// Every request ends by the storm's deadline, so that requests that
	// never get an answer fail the test by name instead of hanging it.
	storm, cancel := context.WithTimeout(context.Background(), multiStormDeadline)
	defer cancel()
	work := make(chan int)
	var workers sync.WaitGroup
	for range 8 { // 8 keys in flight, 64 requests at once
		workers.Add(1)
		go func() {
			defer workers.Done()
			for k := range work {
				var burst sync.WaitGroup
				start := make(chan struct{})
				for c := range copies {
					burst.Add(1)
					go func() {
						defer burst.Done()
						<-start
						base := instances[(k+c)%len(instances)].base
						a := postCtx(storm, client, base, "sk_a", fmt.Sprintf("multi-%d", k), fmt.Sprintf(`{"amount":%d,"currency":"usd","customer":"cus_%d"}`, 100*k+101, k)) // never ending in 02, which is declined
						results[k][c] = outcome{a.status, a.header.Get("Idempotent-Replayed") == "true", a.body}
					}()
				}
				close(start)
				burst.Wait()
			}
		}()
	}
	for k := range keys {
		work <- k
	}
	close(work)
	workers.Wait() // every request ends by the storm's deadline
	if storm.Err() != nil {
		var unanswered []string
		for k, copies := range results {
			for c, o := range copies {
				if o.status == 0 {
					unanswered = append(unanswered, fmt.Sprintf("multi-%d copy %d (%s)", k, c, o.body))
				}
			}
		}
		t.Fatalf("%d of %d requests had no answer within %v, the storm's deadline: %s",
			len(unanswered), keys*copies, multiStormDeadline, strings.Join(unanswered[:min(len(unanswered), 5)], "; "))
	}

	statuses := map[string]int{}
	for k, copies := range results {
		var original []byte
		for _, o := range copies {
			if o.status == http.StatusCreated && !o.replayed {
				if original != nil {
					t.Errorf("key %d executed twice", k)
				}
				original = o.body
			}
		}
		for _, o := range copies {
			switch {
			case o.status == http.StatusCreated && o.replayed:
				statuses["201 replay"]++
				if original != nil && !bytes.Equal(o.body, original) {
					t.Errorf("key %d: replay %s differs from the original %s", k, o.body, original)
				}
			case o.status == http.StatusCreated:
				statuses["201"]++
			case o.status == http.StatusConflict:
				statuses["409"]++
			default:
				statuses[fmt.Sprint(o.status)]++
				t.Errorf("key %d: status %d: %s", k, o.status, o.body)
			}
		}
	}
	t.Logf("answers: %v", statuses)

	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var payments, distinct int
	if err := pool.QueryRow(context.Background(), `SELECT count(*), count(DISTINCT idempotency_key) FROM payments`).Scan(&payments, &distinct); err != nil {
		t.Fatal(err)
	}
	if payments != keys || distinct != keys {
		t.Fatalf("%d payment rows for %d distinct keys, want exactly %d", payments, distinct, keys)
	}
	if statuses["201"] != keys {
		t.Errorf("%d original 201s, want one per key (%d)", statuses["201"], keys)
	}
}
