package idemsqlite_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemsqlite"
)

// A payments endpoint on an embedded database: the business write and the
// stored response commit in one transaction, so a retry replays the
// response and the payment exists once.
func Example() {
	dir, err := os.MkdirTemp("", "idemsqlite-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()

	store, err := idemsqlite.Open(filepath.Join(dir, "payments.db"), &idemsqlite.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := store.DB().ExecContext(ctx, `CREATE TABLE payments (id INTEGER PRIMARY KEY, amount INTEGER NOT NULL)`); err != nil {
		log.Fatal(err)
	}

	mw, err := idem.New(store, &idem.Config{
		ClientID: func(r *http.Request) (string, bool) { return r.Header.Get("X-Client"), r.Header.Get("X-Client") != "" },
	})
	if err != nil {
		log.Fatal(err)
	}
	createPayment := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, err := idemsqlite.TxFromContext(r.Context())
		if err != nil {
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
			return
		}
		res, err := tx.ExecContext(r.Context(), `INSERT INTO payments (amount) VALUES (4200)`)
		if err != nil {
			http.Error(w, "failed", http.StatusInternalServerError)
			return
		}
		id, _ := res.LastInsertId()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"pay_%d"}`, id)
	})
	srv := httptest.NewServer(mw.Wrap(createPayment))
	defer srv.Close()

	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/payments", strings.NewReader(`{"amount":4200}`))
		req.Header.Set("X-Client", "alice")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(idem.HeaderKey, `"order-7"`)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		fmt.Println(res.StatusCode, res.Header.Get(idem.HeaderReplayed), string(body))
	}
	var payments int
	store.ReadDB().QueryRowContext(ctx, `SELECT count(*) FROM payments`).Scan(&payments)
	fmt.Println("payments:", payments)

	// Keys past the published retention are purged in short batches.
	deleted, err := store.Purge(ctx, idemsqlite.PurgeParams{Before: time.Now().Add(-idem.RetentionDefault)})
	fmt.Println("purged:", deleted, err)
	// Output:
	// 201  {"id":"pay_1"}
	// 201 true {"id":"pay_1"}
	// payments: 1
	// purged: 0 <nil>
}
