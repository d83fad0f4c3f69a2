package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// claimCounter counts the middleware's claims, the store round trips that
// waiting duplicates cost.
type claimCounter struct{ claims atomic.Int64 }

func (*claimCounter) Request(context.Context, idem.Result)          {}
func (c *claimCounter) Claim(context.Context, time.Duration, error) { c.claims.Add(1) }

// TestPreferWaitThroughProxy: 50 duplicates with Prefer: wait arrive while
// a request that takes at least a second is in flight. All get the 201
// replay, none a 409, the upstream is called once, and the claims the
// waiters make are counted: the load they put on the store.
func TestPreferWaitThroughProxy(t *testing.T) {
	t.Parallel()
	const duplicates = 50
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			counter := &claimCounter{}
			var calls atomic.Int64
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				// Answer once every duplicate has found the key in flight,
				// and no sooner than a second after the request came.
				minimum := time.After(time.Second)
				deadline := time.Now().Add(20 * time.Second)
				for counter.claims.Load() < 1+duplicates && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
				<-minimum
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, `{"id":"ch_1"}`)
			}))
			t.Cleanup(up.Close)
			target, _ := url.Parse(up.URL)
			id, _ := CredentialIdentity([]byte(testSecret))
			p, err := New(&Config{Upstream: target, Store: newStore(t, kind), Identity: id, Idem: idem.Config{Metrics: counter}})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(p)
			t.Cleanup(srv.Close)
			post := func(prefer string) (int, string, http.Header) {
				req, _ := http.NewRequest("POST", srv.URL+"/v1/charges", strings.NewReader(`{"amount":1}`))
				req.Header.Set("Authorization", "Bearer sk_test_alice")
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Idempotency-Key", "wait-1")
				if prefer != "" {
					req.Header.Set("Prefer", prefer)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return 0, "", nil
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b), resp.Header
			}

			firstDone := make(chan int)
			go func() { s, _, _ := post(""); firstDone <- s }()
			waitFor(t, func() bool { return counter.claims.Load() >= 1 })
			started := time.Now()
			var wg sync.WaitGroup
			var replays, conflicts, other atomic.Int64
			for range duplicates {
				wg.Add(1)
				go func() {
					defer wg.Done()
					status, body, h := post("wait=10")
					switch {
					case status == http.StatusCreated && body == `{"id":"ch_1"}` && h.Get(idem.HeaderReplayed) == "true" && h.Get(idem.HeaderPreferenceApplied) == "wait=10":
						replays.Add(1)
					case status == http.StatusConflict:
						conflicts.Add(1)
					default:
						other.Add(1)
						t.Errorf("duplicate: %d %q %v", status, body, h)
					}
				}()
			}
			wg.Wait()
			waited := time.Since(started)
			if s := <-firstDone; s != http.StatusCreated {
				t.Fatalf("first request: %d", s)
			}
			claims := counter.claims.Load() - 1
			t.Logf("%s: %d duplicates waited %.2f s: %d replays, %d 409s; %d claims in all, %.1f per duplicate, %.1f per duplicate-second",
				kind, duplicates, waited.Seconds(), replays.Load(), conflicts.Load(), claims,
				float64(claims)/duplicates, float64(claims)/duplicates/waited.Seconds())
			if replays.Load() != duplicates || calls.Load() != 1 {
				t.Fatalf("%d replays, %d 409s, %d upstream calls; want %d replays and 1 call", replays.Load(), conflicts.Load(), calls.Load(), duplicates)
			}
			// The pauses grow to 125-250 ms: a waiter claims at most about 5
			// times in its first 0.3 s and 8 times a second after that.
			if bound := int64(duplicates) * int64(6+8*waited.Seconds()+1); claims > bound {
				t.Fatalf("%d claims for %d duplicates over %s, more than the backoff allows (%d)", claims, duplicates, waited, bound)
			}
		})
	}
}
