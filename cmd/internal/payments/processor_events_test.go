package payments_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/cmd/internal/database"
	"github.com/idemkit/idem/cmd/internal/mysqltest"
	"github.com/idemkit/idem/cmd/internal/payments"
	"github.com/idemkit/idem/idemoutbox"
	"github.com/idemkit/idem/internal/pgtest"
)

// TestProcessorEvents: the receiver of the processor's charge events
// records each charge once, with the outcome of its newest event, on
// SQLite and PostgreSQL, through redeliveries, concurrent copies and a
// late event; MySQL is refused at start.
func TestProcessorEvents(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			url := "sqlite:" + filepath.Join(t.TempDir(), "payments.db")
			if kind == "postgres" {
				url = pgtest.NewDatabase(t)
			}
			db, err := database.Open(ctx, url, &database.Config{Migrate: true, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(db.Close)
			secret := idemoutbox.NewSecret()
			h, err := payments.NewProcessorEvents(ctx, payments.ProcessorEventsConfig{DB: db, Secrets: []string{idemoutbox.NewSecret(), secret}, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			key, _ := idemoutbox.ParseSecret(secret)
			base := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
			deliver := func(id, typ, charge, outcome string, at time.Duration) int {
				body, _ := idemoutbox.Body(idemoutbox.Event{Type: typ, CreatedAt: base.Add(at),
					Payload: fmt.Appendf(nil, `{"id":%q,"object":"charge","idempotency_key":"idk_1","amount":4200,"currency":"usd","outcome":%q}`, charge, outcome)})
				now := time.Now()
				req := httptest.NewRequest(http.MethodPost, payments.ProcessorEventsPath, strings.NewReader(string(body)))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set(idemoutbox.HeaderID, id)
				req.Header.Set(idemoutbox.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
				req.Header.Set(idemoutbox.HeaderSignature, idemoutbox.Sign(key, id, now, body))
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				return rec.Code
			}
			// Copies of one event at once: one records, the others get 409
			// or the replay; the sender retries until 2xx.
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					for range 100 {
						if code := deliver("evt_1", "charge.succeeded", "ch_1", "succeeded", time.Second); code == http.StatusNoContent {
							return
						} else if code != http.StatusConflict {
							t.Errorf("a copy of evt_1 answered %d", code)
							return
						}
						time.Sleep(5 * time.Millisecond) // the sender's pause before a retry
					}
					t.Error("evt_1 still in flight after 100 attempts")
				})
			}
			wg.Wait()
			if code := deliver("evt_2", "charge.declined", "ch_2", "declined", 2*time.Second); code != http.StatusNoContent {
				t.Fatalf("evt_2 answered %d", code)
			}
			// A late event of ch_1, older than evt_1: acknowledged, ignored.
			if code := deliver("evt_0", "charge.pending", "ch_1", "pending", 0); code != http.StatusNoContent {
				t.Fatalf("evt_0 answered %d", code)
			}
			if code := deliver("evt_1", "charge.succeeded", "ch_1", "succeeded", time.Second); code != http.StatusNoContent {
				t.Fatalf("a redelivery of evt_1 answered %d", code)
			}
			got := map[string]string{}
			query := `SELECT id, outcome || '/' || event_id FROM processor_charges`
			switch {
			case db.SQLite != nil:
				rows, err := db.SQLite.DB().Query(query)
				if err != nil {
					t.Fatal(err)
				}
				for rows.Next() {
					var id, v string
					rows.Scan(&id, &v)
					got[id] = v
				}
				rows.Close()
			default:
				rows, err := db.Pool.Query(ctx, query)
				if err != nil {
					t.Fatal(err)
				}
				for rows.Next() {
					var id, v string
					rows.Scan(&id, &v)
					got[id] = v
				}
				rows.Close()
			}
			if want := map[string]string{"ch_1": "succeeded/evt_1", "ch_2": "declined/evt_2"}; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("processor_charges = %v, want %v", got, want)
			}
		})
	}
	t.Run("mysql", func(t *testing.T) {
		t.Parallel()
		db, err := database.Open(context.Background(), mysqltest.NewDatabase(t), &database.Config{Migrate: true, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(db.Close)
		if _, err := payments.NewProcessorEvents(context.Background(), payments.ProcessorEventsConfig{DB: db, Secrets: []string{idemoutbox.NewSecret()}}); err == nil {
			t.Fatal("the receiver started on MySQL, where it records nothing")
		}
	})
}
