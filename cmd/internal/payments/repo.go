package payments

import (
	"context"

	"github.com/idemkit/idem/cmd/internal/database"
)

// Repo stores payments. Insert runs in the transaction that the idem
// middleware opened for the request, so the payment row and the key row
// commit together.
type Repo interface {
	Insert(ctx context.Context, p *Payment) error
	Get(ctx context.Context, clientID, id string) (*Payment, error)
	// Count returns the number of payments made with a client's key, for
	// tests and operators checking that a key charged once.
	Count(ctx context.Context, clientID, key string) (int, error)
}

// NewRepo returns the payments repository in db, creating its table if
// needed.
func NewRepo(ctx context.Context, db *database.DB) (Repo, error) {
	switch {
	case db.SQLite != nil:
		return NewSQLiteRepo(ctx, db.SQLite)
	case db.MySQL != nil:
		return NewMySQLRepo(ctx, db.MySQL)
	}
	return NewPostgresRepo(ctx, db.Pool, db.NoAdvisoryLocks)
}
