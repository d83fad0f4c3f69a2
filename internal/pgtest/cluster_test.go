package pgtest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestCluster(t *testing.T) {
	t.Parallel()
	begin := time.Now()
	c := StartCluster(t)
	t.Logf("cluster initialised and started in %s", time.Since(begin).Round(time.Millisecond))

	if c.Port() == 5432 {
		t.Fatal("cluster took port 5432, the shared server's")
	}
	connString := c.CreateDatabase(t, "app")
	if connString != c.URL("app") {
		t.Errorf("CreateDatabase = %q, want %q", connString, c.URL("app"))
	}
	ctx := testContext(t)
	before := connect(t, connString)
	if _, err := before.Exec(ctx, "CREATE TABLE payment (id int PRIMARY KEY, amount int NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if _, err := before.Exec(ctx, "INSERT INTO payment VALUES (1, 4200)"); err != nil {
		t.Fatal(err)
	}

	amount := func(t *testing.T) int {
		t.Helper()
		var n int
		if err := connect(t, connString).QueryRow(testContext(t), "SELECT amount FROM payment WHERE id = 1").Scan(&n); err != nil {
			t.Fatalf("read back: %v", err)
		}
		return n
	}

	t.Run("RestartKeepsURLAndData", func(t *testing.T) {
		begin := time.Now()
		c.Restart(t)
		t.Logf("restart took %s", time.Since(begin).Round(time.Millisecond))
		if err := before.Ping(testContext(t)); err == nil {
			t.Error("a session from before the restart still answers")
		}
		if got := amount(t); got != 4200 {
			t.Errorf("amount after restart = %d, want 4200", got)
		}
	})

	t.Run("StopRefusesConnections", func(t *testing.T) {
		begin := time.Now()
		c.Stop(t)
		t.Logf("stop took %s", time.Since(begin).Round(time.Millisecond))
		if err := ping(testContext(t), connString, 2*time.Second); err == nil {
			t.Error("a stopped cluster accepted a connection")
		}
		c.Stop(t) // stopping twice is allowed
	})

	t.Run("StartServesSameURL", func(t *testing.T) {
		begin := time.Now()
		c.Start(t)
		t.Logf("start took %s", time.Since(begin).Round(time.Millisecond))
		c.Start(t) // starting a running cluster is allowed
		if got := amount(t); got != 4200 {
			t.Errorf("amount after stop and start = %d, want 4200", got)
		}
	})
}

func TestClusterCleanupRemovesDirectory(t *testing.T) {
	t.Parallel()
	var c *Cluster
	t.Run("Owner", func(t *testing.T) {
		c = StartCluster(t)
		if _, err := os.Stat(filepath.Join(c.c.Dir(), "data")); err != nil {
			t.Fatalf("data directory: %v", err)
		}
	})
	if c == nil {
		t.Skip("the owner test did not get a cluster")
	}
	if _, err := os.Stat(c.c.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cluster directory %s still there after cleanup (stat: %v)", c.c.Dir(), err)
	}
	if err := ping(testContext(t), c.URL("postgres"), 2*time.Second); err == nil {
		t.Error("cluster still accepts connections after cleanup")
	}
	for _, live := range liveClusters() {
		if live == c {
			t.Error("cluster still registered for Main after cleanup")
		}
	}
}

func TestResolveStartsRealCluster(t *testing.T) {
	t.Parallel()
	if _, err := locate(); err != nil {
		fail(t, err)
	}
	r := defaultResolver()
	r.getenv = func(string) string { return "" }
	realPing := r.ping
	r.ping = func(ctx context.Context, connString string, timeout time.Duration) error {
		if connString == LocalURL {
			return errors.New("connection refused (simulated)")
		}
		return realPing(ctx, connString, timeout)
	}
	srv, err := r.resolve(context.Background())
	if err != nil {
		t.Fatalf("resolve: %v", err)
	}
	if srv.cluster == nil {
		t.Fatalf("resolve = %q without a cluster, want a throwaway cluster", srv.url)
	}
	t.Cleanup(func() {
		if err := srv.cluster.close(); err != nil {
			t.Error(err)
		}
	})
	conn := connect(t, srv.url)
	ctx := testContext(t)
	for setting, want := range map[string]string{"listen_addresses": "127.0.0.1", "fsync": "off"} {
		var got string
		if err := conn.QueryRow(ctx, "SELECT current_setting($1)", setting).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s = %q, want %q", setting, got, want)
		}
	}
}
