package idemtest

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemoutbox"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/idemwebhook"
)

// WatermarkStore is a store that keeps webhook watermarks in the lease's
// transaction, as idempg.Store and idemsqlite.Store do.
type WatermarkStore interface {
	idemstore.Store
	idemwebhook.Watermarks
}

// WatermarkHarness describes a store to [RunWatermarkTests].
type WatermarkHarness struct {
	// NewStores returns n stores on one fresh, migrated database: the
	// instances of a service that share it. Required.
	NewStores func(t *testing.T, n int) []WatermarkStore
}

// RunWatermarkTests runs the conformance suite of webhook watermarks,
// through an idemwebhook.Receiver in front of a handler that asks
// idemwebhook.Newest: events of an object delivered out of order are
// applied only when newest; a watermark rolls back with a failed handler;
// events of one time are ordered by id; endpoints and objects are apart;
// and concurrent deliveries of one object's events, across instances,
// leave the watermark at the newest.
func RunWatermarkTests(t *testing.T, h WatermarkHarness) {
	t.Helper()
	for _, mode := range []idem.Mode{idem.ModeAtomic, idem.ModeTwoPhase} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Run("OutOfOrder", func(t *testing.T) { watermarkOutOfOrder(t, h, mode) })
			t.Run("RollsBackWithHandler", func(t *testing.T) { watermarkRollback(t, h, mode) })
			t.Run("TiesOrderedByID", func(t *testing.T) { watermarkTies(t, h, mode) })
			t.Run("EndpointsAndObjectsApart", func(t *testing.T) { watermarkApart(t, h, mode) })
			t.Run("ConcurrentDeliveries", func(t *testing.T) { watermarkConcurrent(t, h, mode) })
		})
	}
}

// watermarkRig is a receiver per endpoint over stores, whose handler
// applies an event when idemwebhook.Newest says so, or answers 500 when
// the event's data asks it to fail.
type watermarkRig struct {
	secret string
	key    []byte
	base   time.Time

	mu      sync.Mutex
	applied map[string]int // event id -> runs that saw it newest (committed or not)
}

func newWatermarkRig(t *testing.T) *watermarkRig {
	secret := idemoutbox.NewSecret()
	key, err := idemoutbox.ParseSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	return &watermarkRig{secret: secret, key: key, base: time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC), applied: map[string]int{}}
}

// receiver returns the handler of one endpoint on store.
func (rig *watermarkRig) receiver(t *testing.T, store WatermarkStore, endpoint string, mode idem.Mode) http.Handler {
	t.Helper()
	v, err := idemwebhook.NewStandardWebhooks([]string{rig.secret}, nil)
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	rc, err := idemwebhook.New(store, &idemwebhook.Config{
		Endpoint: endpoint, Verifier: v,
		Idem: &idem.Config{Mode: mode, Logger: quiet},
	})
	if err != nil {
		t.Fatal(err)
	}
	return rc.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ev, _ := idemwebhook.EventFromContext(r.Context())
		newest, err := idemwebhook.Newest(r.Context(), store, ev.Object)
		if err != nil {
			http.Error(w, "watermark: "+err.Error(), http.StatusInternalServerError)
			return
		}
		var body struct {
			Data struct {
				Fail bool `json:"fail"`
			} `json:"data"`
		}
		json.NewDecoder(r.Body).Decode(&body)
		if body.Data.Fail {
			http.Error(w, "failed", http.StatusInternalServerError) // rolls the watermark back
			return
		}
		if newest {
			rig.mu.Lock()
			rig.applied[ev.ID]++
			rig.mu.Unlock()
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.WriteHeader(http.StatusAccepted) // stale: acknowledged, not applied
	}))
}

// deliver sends the event id about object at base+offset, and returns
// the status: 204 applied, 202 stale, 500 failed.
func (rig *watermarkRig) deliver(t *testing.T, h http.Handler, id, object string, offset time.Duration, fail bool) int {
	t.Helper()
	body := fmt.Sprintf(`{"type":"payment.updated","timestamp":%q,"data":{"id":%q,"fail":%t}}`,
		rig.base.Add(offset).Format(time.RFC3339Nano), object, fail)
	now := time.Now()
	req := httptest.NewRequest(http.MethodPost, "/webhooks", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(idemoutbox.HeaderID, id)
	req.Header.Set(idemoutbox.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(idemoutbox.HeaderSignature, idemoutbox.Sign(rig.key, id, now, []byte(body)))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code
}

func (rig *watermarkRig) expect(t *testing.T, h http.Handler, id, object string, offset time.Duration, want int) {
	t.Helper()
	if got := rig.deliver(t, h, id, object, offset, false); got != want {
		t.Errorf("delivery of %s (%s at +%s) answered %d, want %d", id, object, offset, got, want)
	}
}

func watermarkOutOfOrder(t *testing.T, h WatermarkHarness, mode idem.Mode) {
	rig := newWatermarkRig(t)
	rc := rig.receiver(t, h.NewStores(t, 1)[0], "ep", mode)
	rig.expect(t, rc, "evt_2", "pay_1", 2*time.Second, http.StatusNoContent)
	rig.expect(t, rc, "evt_1", "pay_1", 1*time.Second, http.StatusAccepted) // older than evt_2
	rig.expect(t, rc, "evt_3", "pay_1", 3*time.Second, http.StatusNoContent)
	rig.expect(t, rc, "evt_3", "pay_1", 3*time.Second, http.StatusNoContent) // a redelivery: replayed
	rig.expect(t, rc, "evt_2b", "pay_1", 2*time.Second+time.Microsecond, http.StatusAccepted)
	if rig.applied["evt_3"] != 1 {
		t.Errorf("evt_3 applied %d times, want 1", rig.applied["evt_3"])
	}
	if rig.applied["evt_1"] != 0 || rig.applied["evt_2b"] != 0 {
		t.Errorf("stale events applied: %v", rig.applied)
	}
}

func watermarkRollback(t *testing.T, h WatermarkHarness, mode idem.Mode) {
	rig := newWatermarkRig(t)
	rc := rig.receiver(t, h.NewStores(t, 1)[0], "ep", mode)
	rig.expect(t, rc, "evt_1", "pay_1", 1*time.Second, http.StatusNoContent)
	if got := rig.deliver(t, rc, "evt_5", "pay_1", 5*time.Second, true); got != http.StatusInternalServerError {
		t.Fatalf("failing delivery answered %d, want 500", got)
	}
	// evt_5's watermark rolled back with its handler: evt_4 is newest.
	rig.expect(t, rc, "evt_4", "pay_1", 4*time.Second, http.StatusNoContent)
	// The provider's retry of evt_5, which now succeeds, is applied.
	rig.expect(t, rc, "evt_5", "pay_1", 5*time.Second, http.StatusNoContent)
	rig.expect(t, rc, "evt_4b", "pay_1", 4*time.Second+time.Millisecond, http.StatusAccepted)
}

func watermarkTies(t *testing.T, h WatermarkHarness, mode idem.Mode) {
	rig := newWatermarkRig(t)
	rc := rig.receiver(t, h.NewStores(t, 1)[0], "ep", mode)
	// One time, two events: the greater id wins, whichever comes first.
	rig.expect(t, rc, "evt_b", "pay_1", time.Second, http.StatusNoContent)
	rig.expect(t, rc, "evt_a", "pay_1", time.Second, http.StatusAccepted)
	rig.expect(t, rc, "evt_c", "pay_2", time.Second, http.StatusNoContent)
	rig.expect(t, rc, "evt_d", "pay_2", time.Second, http.StatusNoContent)
}

func watermarkApart(t *testing.T, h WatermarkHarness, mode idem.Mode) {
	rig := newWatermarkRig(t)
	store := h.NewStores(t, 1)[0]
	one, two := rig.receiver(t, store, "one", mode), rig.receiver(t, store, "two", mode)
	rig.expect(t, one, "evt_9", "pay_1", 9*time.Second, http.StatusNoContent)
	rig.expect(t, one, "evt_1", "pay_2", 1*time.Second, http.StatusNoContent) // another object
	rig.expect(t, two, "evt_1", "pay_1", 1*time.Second, http.StatusNoContent) // another endpoint
}

func watermarkConcurrent(t *testing.T, h WatermarkHarness, mode idem.Mode) {
	const instances, events = 3, 24
	rig := newWatermarkRig(t)
	stores := h.NewStores(t, instances)
	handlers := make([]http.Handler, instances)
	for i, s := range stores {
		handlers[i] = rig.receiver(t, s, "ep", mode)
	}
	var wg sync.WaitGroup
	for i := range events {
		wg.Go(func() {
			id := fmt.Sprintf("evt_%02d", i)
			// A 409 (the event in flight) or 503 is retried, as a
			// provider would.
			deadline := time.Now().Add(30 * time.Second)
			for {
				code := rig.deliver(t, handlers[i%instances], id, "pay_1", time.Duration(i)*time.Second, false)
				if code == http.StatusNoContent || code == http.StatusAccepted {
					return
				}
				if time.Now().After(deadline) {
					t.Errorf("%s: still %d after 30 s", id, code)
					return
				}
				time.Sleep(5 * time.Millisecond) // the provider's pause before a retry
			}
		})
	}
	wg.Wait()
	// The watermark is at the newest event: one just before it is stale,
	// one just after it is newest.
	rig.expect(t, handlers[0], "evt_probe_old", "pay_1", time.Duration(events-1)*time.Second-time.Microsecond, http.StatusAccepted)
	rig.expect(t, handlers[1], "evt_probe_new", "pay_1", time.Duration(events-1)*time.Second+time.Microsecond, http.StatusNoContent)
}
