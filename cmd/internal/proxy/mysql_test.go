package proxy

import (
	"context"
	"log/slog"
	"testing"

	"github.com/idemkit/idem/cmd/internal/database"
	"github.com/idemkit/idem/cmd/internal/mysqltest"
	"github.com/idemkit/idem/idemmysql"
	"github.com/idemkit/idem/idemstore"
)

// Every test that runs on each of storeKinds runs on MySQL (MariaDB) too:
// the key store that idemproxy keeps on a mysql:// URL.
func init() { storeKinds = append(storeKinds, "mysql") }

// newMySQLStore returns a migrated idemmysql store on a database of t's
// own.
func newMySQLStore(t *testing.T) idemstore.Store {
	t.Helper()
	dsn, err := database.MySQLDSN(mysqltest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s, err := idemmysql.Open(ctx, dsn, &idemmysql.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}
