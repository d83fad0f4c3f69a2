package bench

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"log/slog"
	"testing"

	"github.com/idemkit/idem/cmd/internal/database"
	"github.com/idemkit/idem/cmd/internal/payments"
	"github.com/idemkit/idem/internal/pgtest"
)

// TestFloorReadChecksTheKey shows that floor-2rt-read's read is a check,
// not only a cost: a request whose key exists, or whose key's lock another
// transaction holds, rolls back and writes nothing.
func TestFloorReadChecksTheKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	db, err := database.Open(ctx, url, &database.Config{Migrate: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(db.Close)
	if _, err := payments.NewRepo(ctx, db); err != nil { // the payments table
		t.Fatalf("NewRepo: %v", err)
	}
	repo := &floorRepo{pool: db.Pool, variant: Floor2RTRead}
	payment := func(id, key string) *payments.Payment {
		return &payments.Payment{ID: id, Amount: 100, Currency: "EUR", Customer: "cus_1", Status: "succeeded", ClientID: benchClient, IdempotencyKey: key}
	}
	if err := repo.Insert(ctx, payment("pay_1", "k-1")); err != nil {
		t.Fatalf("first insert: %v", err)
	}
	if err := repo.Insert(ctx, payment("pay_2", "k-1")); !errors.Is(err, errFloorKeyTaken) {
		t.Errorf("insert under an existing key: %v, want errFloorKeyTaken", err)
	}

	// Hold the advisory lock of a new key, as a request in flight would.
	held, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Rollback(ctx)
	sum := sha256.Sum256([]byte("k-2"))
	if _, err := held.Exec(ctx, `SELECT pg_advisory_xact_lock($1::bigint)`, int64(binary.BigEndian.Uint64(sum[:8]))); err != nil {
		t.Fatal(err)
	}
	if err := repo.Insert(ctx, payment("pay_3", "k-2")); !errors.Is(err, errFloorKeyTaken) {
		t.Errorf("insert while the key's lock is held: %v, want errFloorKeyTaken", err)
	}

	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM payments`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("%d payments, want 1: the refused requests rolled back", n)
	}
}
