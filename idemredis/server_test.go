package idemredis_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The test servers: redis-server processes of the tests' own, on free
// loopback ports, never the shared one on 6379. Each is killed when its
// test ends.

// needRedis skips the test when redis-server is not installed, and fails
// it under CI=true.
func needRedis(t *testing.T) {
	t.Helper()
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s not found: %v", bin, err)
			}
			t.Skipf("%s not found: %v", bin, err)
		}
	}
}

// freePort returns a free loopback port; for a cluster node, one whose
// cluster bus port, 10000 above it, is free too (so the port is at most
// 55535).
func freePort(t *testing.T, clusterNode bool) int {
	t.Helper()
	for range 1000 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if !clusterNode {
			l.Close()
			return port
		}
		if port <= 55535 {
			if bus, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port+10000)); err == nil {
				bus.Close()
				l.Close()
				return port
			}
		}
		l.Close()
	}
	t.Fatal("no free port with a free cluster bus port")
	return 0
}

// startServer starts a redis-server without persistence in dir, with
// extra arguments, and returns its address.
func startServer(t *testing.T, dir string, extra ...string) string {
	t.Helper()
	addr, _ := startServerProcess(t, dir, extra...)
	return addr
}

// startServerProcess is startServer that returns the server's process
// too, for tests that stop it.
func startServerProcess(t *testing.T, dir string, extra ...string) (string, *os.Process) {
	t.Helper()
	port := freePort(t, slices.Contains(extra, "--cluster-enabled"))
	args := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--dir", dir, "--logfile", filepath.Join(dir, "redis.log"), "--loglevel", "warning"}, extra...)
	cmd := exec.Command("redis-server", args...)
	dieWithTest(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	poll(t, "redis-server on "+addr+" to answer", func() bool { return c.Ping(context.Background()).Err() == nil })
	return addr, cmd.Process
}

// poll calls ok until it returns true, failing the test after a generous
// deadline.
func poll(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30s for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// singleServer starts one server and returns a client of it.
func singleServer(t *testing.T) redis.UniversalClient {
	t.Helper()
	needRedis(t)
	addr := startServer(t, t.TempDir())
	c := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{addr}})
	t.Cleanup(func() { c.Close() })
	return c
}

// cluster starts a cluster of three primaries, each with one replica,
// built by redis-cli --cluster create, and returns a client of it and
// the nodes' addresses.
func cluster(t *testing.T) (redis.UniversalClient, []string) {
	t.Helper()
	needRedis(t)
	var addrs []string
	for i := range 6 {
		dir := filepath.Join(t.TempDir(), strconv.Itoa(i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		// Redis's default node timeout: a node that a loaded machine
		// starves for a few seconds is not taken for failed, and no
		// replica is promoted under the tests.
		addrs = append(addrs, startServer(t, dir, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "15000"))
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		poll(t, "cluster_state:ok on "+a, func() bool {
			info, err := c.ClusterInfo(context.Background()).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok")
		})
		c.Close()
	}
	// Generous timeouts: a command that a loaded machine delays is slow,
	// not failed, as the tests cannot tell a timed-out write that landed
	// from one that did not.
	c := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: addrs[:3], IsClusterMode: true,
		ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second})
	t.Cleanup(func() { c.Close() })
	// Every replica has caught up with its primary before the tests start.
	poll(t, "the cluster's replicas to sync", func() bool {
		var n atomic.Int32
		err := c.(*redis.ClusterClient).ForEachMaster(context.Background(), func(ctx context.Context, m *redis.Client) error {
			info, err := m.Info(ctx, "replication").Result()
			if err == nil && strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online") {
				n.Add(1)
			}
			return err
		})
		return err == nil && n.Load() == 3
	})
	return c, addrs
}
