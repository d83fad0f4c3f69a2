package idemsqlite_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemoutbox"
	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/idemwebhook"
)

// A receiver of payment.updated events ignores one that arrives after a
// newer event of the same payment: the per-payment watermark and the
// payment's status are written in one transaction, with the record of the
// processed event.
func Example_webhookStaleEvent() {
	dir, err := os.MkdirTemp("", "idemsqlite-webhook")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	store, err := idemsqlite.Open(filepath.Join(dir, "app.db"), &idemsqlite.Config{Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := store.DB().Exec(`CREATE TABLE payments (id TEXT PRIMARY KEY, status TEXT NOT NULL)`); err != nil {
		log.Fatal(err)
	}

	secret := idemoutbox.NewSecret() // shared with the sender
	verifier, err := idemwebhook.NewStandardWebhooks([]string{secret}, nil)
	if err != nil {
		log.Fatal(err)
	}
	rc, err := idemwebhook.New(store, &idemwebhook.Config{Endpoint: "processor", Verifier: verifier, Idem: &idem.Config{Logger: quiet}})
	if err != nil {
		log.Fatal(err)
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ev, _ := idemwebhook.EventFromContext(r.Context())
		newest, err := idemwebhook.Newest(r.Context(), store, ev.Object)
		if err != nil {
			http.Error(w, "failed", http.StatusInternalServerError) // rolls back; the sender retries
			return
		}
		if !newest {
			fmt.Println("ignored", ev.ID, "of", ev.Time.Format(time.TimeOnly), ": a newer event was applied")
			w.WriteHeader(http.StatusOK) // acknowledged, so that it is not sent again
			return
		}
		var p struct {
			Data struct{ ID, Status string }
		}
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			http.Error(w, "not a payment event", http.StatusBadRequest)
			return
		}
		tx, err := idemsqlite.TxFromContext(r.Context())
		if err == nil {
			_, err = tx.ExecContext(r.Context(), `INSERT INTO payments (id, status) VALUES (?, ?)
				ON CONFLICT (id) DO UPDATE SET status = excluded.status`, p.Data.ID, p.Data.Status)
		}
		if err != nil {
			http.Error(w, "failed", http.StatusInternalServerError)
			return
		}
		fmt.Println("applied", ev.ID, "of", ev.Time.Format(time.TimeOnly), ":", p.Data.Status)
		w.WriteHeader(http.StatusOK)
	})
	srv := httptest.NewServer(rc.Wrap(handler))
	defer srv.Close()

	key, _ := idemoutbox.ParseSecret(secret)
	deliver := func(id, at, status string) {
		body := `{"type":"payment.updated","timestamp":"2026-03-01T` + at + `Z","data":{"id":"pay_1","status":"` + status + `"}}`
		now := time.Now()
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(idemoutbox.HeaderID, id)
		req.Header.Set(idemoutbox.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
		req.Header.Set(idemoutbox.HeaderSignature, idemoutbox.Sign(key, id, now, []byte(body)))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		res.Body.Close()
	}
	deliver("evt_1", "10:00:01", "processing")
	deliver("evt_3", "10:00:03", "succeeded")
	deliver("evt_2", "10:00:02", "requires_action") // late
	deliver("evt_3", "10:00:03", "succeeded")       // again: replayed, not run

	var status string
	store.DB().QueryRow(`SELECT status FROM payments WHERE id = 'pay_1'`).Scan(&status)
	fmt.Println("pay_1 is", status)
	// Output:
	// applied evt_1 of 10:00:01 : processing
	// applied evt_3 of 10:00:03 : succeeded
	// ignored evt_2 of 10:00:02 : a newer event was applied
	// pay_1 is succeeded
}
