package idemredis_test

import (
	"context"
	"log"
	"net/http"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemredis"
)

// A two-phase endpoint whose effect lives in another service: the key is
// kept in Redis, and the handler passes a key derived from it downstream,
// so that a takeover's second call is recognised there.
func Example() {
	ctx := context.Background()
	// One server; a cluster's seed addresses make a cluster client.
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{"127.0.0.1:6379"}})
	defer rdb.Close()
	store, err := idemredis.New(rdb, &idemredis.Config{MinReplicas: 1})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	mw, err := idem.New(store, &idem.Config{
		Mode:     idem.ModeTwoPhase, // Redis keeps two-phase keys only
		ClientID: func(r *http.Request) (string, bool) { return r.Header.Get("X-Client"), true },
	})
	if err != nil {
		log.Fatal(err)
	}
	charge := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		downstreamKey := idem.DeriveKey(r.Context(), "charge")
		_ = downstreamKey // sent as the processor's Idempotency-Key
		w.WriteHeader(http.StatusCreated)
	})
	http.Handle("POST /v1/charges", mw.Wrap(charge))
}
