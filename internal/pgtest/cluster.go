package pgtest

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/idemkit/idem/internal/pgtest/pgcluster"
)

// Cluster is a throwaway PostgreSQL cluster in a temporary directory,
// listening on 127.0.0.1 with trust authentication for the user postgres.
// It keeps its port and data directory for its whole life. It is a
// [pgcluster.Cluster] whose methods fail the test instead of returning
// errors.
//
// Its methods are meant for the goroutine running the test, like t.Fatal.
type Cluster struct {
	c *pgcluster.Cluster
}

// StartCluster initialises and starts a new cluster that t owns. The cluster
// is stopped and its directory removed when the test ends. It skips or fails
// the test when the server binaries are missing, as the package
// documentation describes, and fails it when the cluster does not start.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	spec, err := locate()
	if err != nil {
		fail(t, err)
	}
	c, err := spec.create(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.close(); err != nil {
			t.Error(err)
		}
	})
	return c
}

// URL returns the connection string of database on the cluster.
func (c *Cluster) URL(database string) string { return c.c.URL(database) }

// Port returns the TCP port the cluster listens on, on 127.0.0.1.
func (c *Cluster) Port() int { return c.c.Port() }

// Stop shuts the server down (fast shutdown: sessions are ended, work is
// checkpointed) and waits until it has exited. Stopping a stopped cluster
// does nothing.
func (c *Cluster) Stop(t testing.TB) {
	t.Helper()
	if err := c.c.Stop(); err != nil {
		t.Fatal(err)
	}
}

// Start starts the server again on the same port and data directory and
// waits until it accepts connections. Starting a running cluster does
// nothing.
func (c *Cluster) Start(t testing.TB) {
	t.Helper()
	if err := c.c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Restart stops the server, then starts it as Start does.
func (c *Cluster) Restart(t testing.TB) {
	t.Helper()
	if err := c.c.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// CreateDatabase creates the database name on the running cluster and
// returns its connection string. It is not dropped at the end of the test;
// it goes with the cluster.
func (c *Cluster) CreateDatabase(t testing.TB, name string) string {
	t.Helper()
	url, err := c.c.CreateDatabase(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return url
}

// clusterSpec stands for a machine that can run clusters.
type clusterSpec struct{}

// locate reports whether this machine can run a cluster. Its errors are
// *UnavailableError.
func locate() (clusterSpec, error) {
	err := pgcluster.Available()
	var ue *pgcluster.UnavailableError
	if errors.As(err, &ue) {
		return clusterSpec{}, &UnavailableError{Reasons: ue.Reasons}
	}
	return clusterSpec{}, err
}

// create starts a cluster and registers it for Main.
func (clusterSpec) create(ctx context.Context) (*Cluster, error) {
	pc, err := pgcluster.New(ctx)
	if err != nil {
		return nil, err
	}
	c := &Cluster{c: pc}
	register(c)
	return c, nil
}

// close stops the cluster, removes its directory and forgets it. It may be
// called more than once.
func (c *Cluster) close() error {
	unregister(c)
	return c.c.Close()
}

// live holds the clusters that Main stops at the end.
var live struct {
	mu       sync.Mutex
	clusters map[*Cluster]struct{}
}

func register(c *Cluster) {
	live.mu.Lock()
	defer live.mu.Unlock()
	if live.clusters == nil {
		live.clusters = make(map[*Cluster]struct{})
	}
	live.clusters[c] = struct{}{}
}

func unregister(c *Cluster) {
	live.mu.Lock()
	defer live.mu.Unlock()
	delete(live.clusters, c)
}

func liveClusters() []*Cluster {
	live.mu.Lock()
	defer live.mu.Unlock()
	cs := make([]*Cluster, 0, len(live.clusters))
	for c := range live.clusters {
		cs = append(cs, c)
	}
	return cs
}
