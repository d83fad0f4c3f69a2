// Package pgtest gives tests a real PostgreSQL server: a fresh database per
// test on a server shared by the whole test binary, and throwaway clusters
// that a test owns and may stop, start and restart.
//
// # Usage
//
// Every test package that uses pgtest calls [Main] from TestMain, so that
// any server it started is stopped when the tests end:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
//	func TestStore(t *testing.T) {
//		t.Parallel()
//		pool := pgtest.NewPool(t) // a pool on a database of its own
//		...
//	}
//
// [NewDatabase] creates a uniquely named database and drops it when the test
// ends, so tests run in parallel without seeing each other's rows.
// [NewPool] is the same with a [pgxpool.Pool] on top.
//
// # Which server
//
// The shared server is chosen once per test binary, in this order:
//
//  1. The server named by the TEST_DATABASE_URL environment variable, if it
//     is set. It must answer; if it does not, every test that asks for a
//     database fails.
//  2. A server on 127.0.0.1:5432 with user postgres, database postgres and
//     trust authentication ([LocalURL]), if it answers within about 2 s.
//  3. A throwaway cluster in a temporary directory, started from the
//     PostgreSQL server binaries (initdb and postgres) found on PATH or in
//     /usr/lib/postgresql/*/bin, highest version first.
//  4. Otherwise the test is skipped with a one-line reason, except when the
//     CI environment variable is true: then the test fails with that reason,
//     so that a CI job cannot pass by skipping its database tests.
//
// # Throwaway clusters
//
// [StartCluster] always starts a new cluster (an internal/pgtest/pgcluster
// cluster whose methods fail the test instead of returning errors), separate from the shared
// server, for tests that stop or restart PostgreSQL while clients are
// connected. The cluster keeps its port and data directory across
// [Cluster.Stop] and [Cluster.Start], so clients reconnect to the same
// address and find their data. Clusters listen only on 127.0.0.1, on a port
// picked free at start, use trust authentication and run with fsync=off:
// a clean stop or a crash of the server keeps every committed row, a crash of
// the machine may not.
//
// Throwaway clusters need Linux: the parent-death signal, the lock files and
// /proc below have no portable equivalent. On other systems the package
// builds, [StartCluster] skips its test (fails it when CI is true) and the
// shared server must come from [EnvDatabaseURL] or [LocalURL].
//
// PostgreSQL refuses to run as root. When the tests run as root, initdb and
// postgres run as the postgres system user, which must exist, and the
// cluster directory is handed over to that user.
//
// # Process lifetime
//
// A cluster is stopped and its directory removed by the test cleanup of
// [StartCluster], or by [Main] for the shared one. If the test binary is
// killed instead, the kernel sends the server SIGINT (a fast shutdown) as the
// binary dies, because the server is started with a parent-death signal from
// an operating-system thread that lives as long as the binary. The directory
// of a cluster whose owner died is removed by the next cluster that starts in
// the same temporary directory; each directory holds a lock file that its
// owner keeps locked while it lives.
package pgtest
