package idempg_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idempg"
)

// A payments endpoint whose business write commits with its stored response.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := idempg.New(pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	mw, err := idem.New(store, &idem.Config{
		ClientID: func(r *http.Request) (string, bool) { return r.Header.Get("X-Client"), true },
	})
	if err != nil {
		log.Fatal(err)
	}
	createPayment := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, err := idempg.TxFromContext(r.Context())
		if err != nil {
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
			return
		}
		var id int64
		err = tx.QueryRow(r.Context(), `INSERT INTO payments (amount) VALUES (4200) RETURNING id`).Scan(&id)
		if err != nil {
			http.Error(w, "failed", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d}`, id)
	})
	mux := http.NewServeMux()
	mux.Handle("POST /v1/payments", mw.Wrap(createPayment))
	log.Fatal(http.ListenAndServe(os.Getenv("LISTEN_ADDR"), mux))
}
