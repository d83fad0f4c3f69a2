//go:build chaosbroken

package main

import (
	"os"

	"github.com/idemkit/idem/cmd/internal/brokenstore"
	"github.com/idemkit/idem/cmd/internal/database"
	"github.com/idemkit/idem/cmd/internal/payments"
	"github.com/idemkit/idem/idemstore"
)

// Built only for the chaos harness's tests: IDEM_CHAOS_BREAK breaks the
// store on purpose (see cmd/internal/brokenstore).
func init() {
	breakStore = func(db *database.DB, store idemstore.Store, repo payments.Repo, ledger payments.LedgerRepo) (idemstore.Store, payments.Repo, payments.LedgerRepo, error) {
		return brokenstore.Wrap(store, repo, ledger, db.Pool, os.Getenv)
	}
}
