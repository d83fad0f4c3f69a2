// Package pgcluster runs throwaway PostgreSQL clusters: initdb in a
// temporary directory, a server on 127.0.0.1 at a port picked free, trust
// authentication for the user postgres, fsync off. A cluster keeps its port
// and data directory across [Cluster.Stop], [Cluster.Crash] and
// [Cluster.Start], so clients reconnect to the same address and find their
// data. Tests get clusters through internal/pgtest; the chaos harness uses
// this package directly, to crash and restart its own server.
//
// Clusters need Linux: the parent-death signal, the lock files and /proc
// below have no portable equivalent. Elsewhere [New] and [Available] return
// an *UnavailableError.
//
// PostgreSQL refuses to run as root. When the process runs as root, initdb
// and postgres run as the postgres system user, which must exist, and the
// cluster directory is handed over to that user.
//
// # Process lifetime
//
// [Cluster.Close] stops the server and removes the directory. If the owning
// process is killed instead, the kernel sends the server SIGINT (a fast
// shutdown) as the process dies, because the server is started with a
// parent-death signal (see internal/child). The directory of a cluster whose
// owner died is removed by the next cluster that starts in the same
// temporary directory; each directory holds a lock file that its owner
// keeps locked while it lives.
package pgcluster

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrUnavailable reports that this machine cannot run a cluster.
var ErrUnavailable = errors.New("pgcluster: cannot run a PostgreSQL cluster")

// UnavailableError says why this machine cannot run a cluster. It unwraps to
// ErrUnavailable.
type UnavailableError struct {
	Reasons []string
}

// Error returns ErrUnavailable's message followed by the reasons.
func (e *UnavailableError) Error() string {
	return ErrUnavailable.Error() + ": " + strings.Join(e.Reasons, "; ")
}

// Unwrap returns ErrUnavailable.
func (e *UnavailableError) Unwrap() error { return ErrUnavailable }

// databaseTimeout bounds CreateDatabase.
const databaseTimeout = 30 * time.Second

// ping connects to connString within timeout and disconnects.
func ping(ctx context.Context, connString string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := pgconn.Connect(ctx, connString)
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}
