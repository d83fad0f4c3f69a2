package redistest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Node is a redis-server of a test's own, which the test may kill and
// start again on the same port and directory.
type Node struct {
	// Addr is the node's host:port on loopback.
	Addr string
	t    testing.TB
	dir  string
	args []string
	mu   sync.Mutex
	cmd  *exec.Cmd
}

// StartNode starts a redis-server without persistence on a free loopback
// port, with extra arguments, killed when the test ends. With
// "--cluster-enabled" among them the port's cluster bus port, 10000 above
// it, is free too.
func StartNode(t testing.TB, extra ...string) *Node {
	t.Helper()
	need(t, "redis-server")
	cluster := false
	for _, a := range extra {
		cluster = cluster || a == "--cluster-enabled"
	}
	port := freePort(t, cluster)
	dir := t.TempDir()
	n := &Node{Addr: fmt.Sprintf("127.0.0.1:%d", port), t: t, dir: dir,
		args: append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--daemonize", "no", "--dir", dir, "--logfile", filepath.Join(dir, "redis.log"), "--loglevel", "warning"}, extra...)}
	n.Start()
	t.Cleanup(n.Kill)
	return n
}

// Start starts the node again after Kill, on its port and directory (a
// cluster node keeps its nodes.conf there, and so its identity; its data
// is gone).
func (n *Node) Start() {
	n.t.Helper()
	n.mu.Lock()
	cmd := exec.Command("redis-server", n.args...)
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		n.mu.Unlock()
		n.t.Fatalf("start redis-server: %v", err)
	}
	n.cmd = cmd
	n.mu.Unlock()
	Poll(n.t, "redis-server on "+n.Addr+" to answer", func() bool { return ping(n.Addr) })
}

// Kill kills the node (SIGKILL) and waits for it to exit.
func (n *Node) Kill() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Kill()
	_ = n.cmd.Wait()
	n.cmd = nil
}

// Cli runs redis-cli against the node with args and returns its output,
// failing the test if it fails.
func (n *Node) Cli(args ...string) string {
	n.t.Helper()
	out, err := n.TryCli(args...)
	if err != nil {
		n.t.Fatalf("redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// TryCli runs redis-cli against the node with args.
func (n *Node) TryCli(args ...string) (string, error) {
	host, port, _ := net.SplitHostPort(n.Addr)
	out, err := exec.Command("redis-cli", append([]string{"-h", host, "-p", port}, args...)...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// Cluster is a Redis Cluster of a test's own: three primaries, each with
// one replica, built by redis-cli --cluster create.
type Cluster struct {
	// Nodes are the cluster's nodes; redis-cli made the first three the
	// primaries, and Nodes[i+3] the replica of Nodes[i] (not guaranteed by
	// redis-cli: see ReplicaOf).
	Nodes []*Node
}

// StartCluster starts a cluster whose nodes time out (and whose replicas
// take over a failed primary) after nodeTimeout, and waits until every
// node reports cluster_state:ok and every primary has its replica
// online.
func StartCluster(t testing.TB, nodeTimeout time.Duration) *Cluster {
	t.Helper()
	need(t, "redis-cli")
	c := &Cluster{}
	var addrs []string
	for range 6 {
		n := StartNode(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.FormatInt(nodeTimeout.Milliseconds(), 10))
		c.Nodes = append(c.Nodes, n)
		addrs = append(addrs, n.Addr)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, n := range c.Nodes {
		Poll(t, "cluster_state:ok on "+n.Addr, func() bool {
			out, err := n.TryCli("cluster", "info")
			return err == nil && strings.Contains(out, "cluster_state:ok")
		})
	}
	for _, n := range c.Nodes[:3] {
		Poll(t, "the replica of "+n.Addr+" to sync", func() bool {
			out, err := n.TryCli("info", "replication")
			return err == nil && strings.Contains(out, "role:master") && strings.Contains(out, "connected_slaves:1") && strings.Contains(out, "state=online")
		})
	}
	return c
}

// Seeds returns the addresses of every node, comma-separated, as a
// redis-cluster:// URL takes them.
func (c *Cluster) Seeds() string {
	var a []string
	for _, n := range c.Nodes {
		a = append(a, n.Addr)
	}
	return strings.Join(a, ",")
}

// ReplicaOf returns the replica of the primary p.
func (c *Cluster) ReplicaOf(p *Node) *Node {
	c.Nodes[0].t.Helper()
	id := p.Cli("cluster", "myid")
	for _, n := range c.Nodes {
		if n == p {
			continue
		}
		if out, err := n.TryCli("info", "replication"); err == nil && strings.Contains(out, "role:slave") {
			if me, err := n.TryCli("cluster", "nodes"); err == nil {
				for _, line := range strings.Split(me, "\n") {
					f := strings.Fields(line)
					if len(f) > 3 && strings.Contains(f[2], "myself") && f[3] == id {
						return n
					}
				}
			}
		}
	}
	c.Nodes[0].t.Fatalf("no replica of %s", p.Addr)
	return nil
}

// IsPrimary reports whether n says it is a primary.
func (n *Node) IsPrimary() bool {
	out, err := n.TryCli("info", "replication")
	return err == nil && strings.Contains(out, "role:master")
}

// Poll calls ok until it returns true, failing the test after a generous
// deadline (30 s).
func Poll(t testing.TB, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30 s for %s", what)
		}
		time.Sleep(20 * time.Millisecond) // a poll's pause
	}
}

// need skips the test when bin is not installed, and fails it under
// CI=true.
func need(t testing.TB, bin string) {
	t.Helper()
	if _, err := exec.LookPath(bin); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s not found: %v", bin, err)
		}
		t.Skipf("%s not found: %v", bin, err)
	}
}

// freePort returns a free loopback port; for a cluster node, one whose
// cluster bus port, 10000 above it, is free too.
func freePort(t testing.TB, clusterNode bool) int {
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
