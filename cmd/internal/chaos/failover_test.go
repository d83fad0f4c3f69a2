package chaos

import (
	"context"
	"strconv"
	"testing"

	"github.com/idemkit/idem/internal/pgtest/pgcluster"
)

// newDBHarness is a harness with a PostgreSQL primary behind the
// primary's link, and with replication a synchronous standby: what the
// database faults act on.
func newDBHarness(t *testing.T, replication string) *harness {
	t.Helper()
	if err := pgcluster.Available(); err != nil {
		t.Skip(err)
	}
	cfg := Config{Replication: replication}.withDefaults()
	cfg.Faults.DiskFullEvery = -1
	h := &harness{cfg: cfg, dir: t.TempDir(), history: newHistory(), net: newNetwork()}
	t.Cleanup(h.close)
	ctx := context.Background()
	var err error
	if h.cluster, err = pgcluster.New(ctx); err != nil {
		t.Fatal(err)
	}
	if replication != "" {
		if err := h.startReplication(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if h.dbURL, err = h.net.routePrimary(h.cluster.URL("postgres")); err != nil {
		t.Fatal(err)
	}
	return h
}

func addrOf(c *pgcluster.Cluster) string { return "127.0.0.1:" + strconv.Itoa(c.Port()) }

// The faults of the stalled run, in their order: a failover, then a
// restart. The restart must hit the new primary, never start the retired
// one again, and after each the primary's link reaches the primary.
func TestFailoverThenRestart(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("makes three PostgreSQL servers")
	}
	h := newDBHarness(t, ReplicationSync)
	old, next := h.cluster, h.standby
	if err := h.dbFault(Failover, func() error { return h.failover(faultMark{Kind: Failover}) }); err != nil {
		t.Fatal(err)
	}
	if h.cluster != next || len(h.retired) != 1 || h.retired[0] != old {
		t.Fatalf("after the failover the primary is %s, retired %d, want the standby %s and the old primary retired",
			addrOf(h.cluster), len(h.retired), addrOf(next))
	}
	if h.standby == nil || h.standby == next {
		t.Fatal("no new standby after the failover")
	}
	if got := h.net.primaryTarget(); got != addrOf(next) {
		t.Fatalf("the primary's link forwards to %s, want the new primary %s", got, addrOf(next))
	}
	if err := h.dbFault(DBRestart, func() error { return h.restartDB(faultMark{Kind: DBRestart}, 0) }); err != nil {
		t.Fatal(err)
	}
	if old.Running() {
		t.Fatal("the restart started the retired primary again")
	}
	if err := h.probePrimary(context.Background()); err != nil {
		t.Fatalf("after the restart: %v", err)
	}
}

// checkPrimary repairs what the stalled run lost: a link that forwards
// to a dead port, a primary that is not running.
func TestCheckPrimaryRepairs(t *testing.T) {
	t.Parallel()
	h := newDBHarness(t, "")
	ctx := context.Background()
	dead, err := freeAddrs(1)
	if err != nil {
		t.Fatal(err)
	}
	h.net.movePrimary(dead[0])
	if err := h.probePrimary(ctx); err == nil {
		t.Fatal("the link reached the primary while forwarding to a closed port")
	}
	if err := h.checkPrimary(ctx); err != nil {
		t.Fatal(err)
	}
	if got := h.net.primaryTarget(); got != addrOf(h.cluster) {
		t.Fatalf("the link forwards to %s after the check, want %s", got, addrOf(h.cluster))
	}
	if err := h.cluster.Crash(); err != nil {
		t.Fatal(err)
	}
	if err := h.checkPrimary(ctx); err != nil {
		t.Fatal(err)
	}
	if !h.cluster.Running() {
		t.Fatal("the check left the primary stopped")
	}
}
