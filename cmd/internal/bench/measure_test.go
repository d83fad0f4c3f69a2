package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestMeasureLetsRequestsFinish runs a round whose requests are all still
// in flight when its duration ends: each runs to its answer, none is
// canceled on its way (which would break its connections for the variant
// after), and each counts.
func TestMeasureLetsRequestsFinish(t *testing.T) {
	t.Parallel()
	const duration, hold = 300 * time.Millisecond, 600 * time.Millisecond
	var received, canceled atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		received.Add(1)
		select {
		case <-time.After(hold): // past the end of the duration
		case <-r.Context().Done():
			canceled.Add(1)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	const clients = 4
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	defer client.CloseIdleConnections()
	next := func() string { return "k" }
	tl := measure(context.Background(), client, srv.URL, Config{Duration: duration, Concurrency: clients}, next, http.StatusCreated)
	if c := canceled.Load(); c != 0 {
		t.Errorf("%d requests were canceled in flight; want none", c)
	}
	if got := received.Load(); tl.n != got || tl.errors != 0 {
		t.Errorf("counted %d requests (%d errors), the server answered %d; want each counted, none failed", tl.n, tl.errors, got)
	}
	if tl.n > 0 && tl.elapsed < hold {
		t.Errorf("the round lasted %v; want it to last until the last answer, after %v", tl.elapsed, hold)
	}
}
