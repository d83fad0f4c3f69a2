package idemamqp_test

import (
	"log/slog"
	"os"
	"testing"

	"github.com/idemkit/idem/idemconsume/idemconsumetest"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/internal/storetest"
)

func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		os.Exit(runChild(role))
	}
	pgtest.Main(m)
}

var quiet = slog.New(slog.DiscardHandler)

// pgEnv is a PostgreSQL database of the test's own whose business table
// counts every committed effect.
func pgEnv(t *testing.T) idemconsumetest.Env { return storetest.ConsumeEnv(storetest.PostgreSQL(t)) }

// sqliteEnv is a SQLite database in the test's directory.
func sqliteEnv(t *testing.T) idemconsumetest.Env { return storetest.ConsumeEnv(storetest.SQLite(t)) }
