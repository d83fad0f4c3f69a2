// Package rabbitnode runs throwaway RabbitMQ nodes: each has its own name,
// ports, database directory and Erlang cookie, never the shared server's.
// A node keeps its ports and database directory across [Node.Kill] and
// [Node.Restart], so clients reconnect to the same address and find their
// durable queues and persistent messages. Tests get nodes through
// internal/rabbittest; the chaos harness uses this package directly.
package rabbitnode

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/idemkit/idem/internal/child"
)

// StartTimeout bounds one start of a node; RabbitMQ boots in seconds on
// an idle machine and in tens of seconds on a loaded one.
const StartTimeout = 3 * time.Minute

// ErrNotInstalled is returned by [Bin] and [Start] when no RabbitMQ is
// installed.
var ErrNotInstalled = errors.New("rabbitnode: no rabbitmq-server installed")

// Bin returns the installed RabbitMQ start script, or ErrNotInstalled.
// IDEM_RABBITMQ_SERVER names another one.
func Bin() (string, error) {
	for _, p := range []string{os.Getenv("IDEM_RABBITMQ_SERVER"), "/usr/lib/rabbitmq/bin/rabbitmq-server"} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", ErrNotInstalled
}

// Node is a throwaway RabbitMQ node.
type Node struct {
	bin, dir   string
	name       string
	port, dist int
	cmd        *exec.Cmd
	exited     chan struct{} // closed when cmd has exited
}

// Start starts a node whose files live in dir, which must exist and
// belong to the node alone, and waits until it accepts AMQP connections.
// When a start fails because the node exited (a port taken between its
// choice and the node's bind, say), it is tried again on other ports,
// three times in all; logf, when not nil, hears of each failed attempt.
// The caller kills the node when done with it.
func Start(dir string, logf func(format string, args ...any)) (*Node, error) {
	bin, err := Bin()
	if err != nil {
		return nil, err
	}
	n := &Node{bin: bin, dir: dir,
		name: fmt.Sprintf("idemtest%d-%d@localhost", os.Getpid(), time.Now().UnixNano()%1e9)}
	for attempt := 1; attempt <= 3; attempt++ {
		if n.port, err = freePort(); err != nil {
			return nil, err
		}
		if n.dist, err = freePort(); err != nil {
			return nil, err
		}
		if err = n.start(); err == nil {
			return n, nil
		}
		n.Kill()
		if !errors.Is(err, errExited) {
			break
		}
		if logf != nil {
			logf("rabbitnode: attempt %d: %v", attempt, err)
		}
	}
	return nil, fmt.Errorf("rabbitnode: the throwaway RabbitMQ did not start: %w\n%s", err, n.LogTail())
}

// URL is the node's AMQP URL for the default vhost as guest.
func (n *Node) URL() string { return "amqp://guest:guest@" + n.Addr() + "/" }

// Addr is the node's AMQP listener, host:port.
func (n *Node) Addr() string { return "127.0.0.1:" + strconv.Itoa(n.port) }

// Restart starts the killed node again on the same ports and database
// directory, so its durable queues and persistent messages come back.
func (n *Node) Restart() error {
	if err := n.start(); err != nil {
		return fmt.Errorf("rabbitnode: the throwaway RabbitMQ did not start again: %w\n%s", err, n.LogTail())
	}
	return nil
}

// Kill kills the node with SIGKILL, as a crash does, and waits for it. A
// node that is not running is left alone.
func (n *Node) Kill() {
	if n.cmd == nil {
		return
	}
	n.cmd.Process.Kill()
	<-n.exited
	n.cmd = nil
}

var errExited = errors.New("the node exited")

func (n *Node) start() error {
	n.cmd = exec.Command(n.bin)
	n.cmd.Dir = n.dir
	n.cmd.Env = append(os.Environ(),
		"HOME="+n.dir, // its own Erlang cookie, whoever runs the node
		"RABBITMQ_NODENAME="+n.name, "RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(n.port), "RABBITMQ_DIST_PORT="+strconv.Itoa(n.dist),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(n.dir, "mnesia"), "RABBITMQ_LOG_BASE="+filepath.Join(n.dir, "log"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(n.dir, "plugins"), "RABBITMQ_CONFIG_FILE="+filepath.Join(n.dir, "rabbitmq"),
		"RABBITMQ_PID_FILE="+filepath.Join(n.dir, "pid"),
		// The script then replaces itself with the Erlang VM, which Kill
		// kills and which dies with its owner.
		"RUNNING_UNDER_SYSTEMD=1",
	)
	out, err := os.OpenFile(filepath.Join(n.dir, "output"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	n.cmd.Stdout, n.cmd.Stderr = out, out
	dieWithParent(n.cmd)
	if err := child.Start(n.cmd); err != nil {
		n.cmd = nil
		return err
	}
	exited := make(chan struct{})
	n.exited = exited
	go func(cmd *exec.Cmd) { cmd.Wait(); close(exited) }(n.cmd)

	deadline := time.Now().Add(StartTimeout)
	for {
		err := handshake(n.Addr())
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			n.cmd = nil
			return fmt.Errorf("%w before it accepted connections (%v)", errExited, err)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no AMQP handshake on %s within %v: %v", n.Addr(), StartTimeout, err)
		}
		time.Sleep(200 * time.Millisecond) // a poll under a deadline
	}
}

// Handshake sends the AMQP 0-9-1 protocol header to addr and reads the
// first byte of the broker's answer, a method frame (connection.start),
// which RabbitMQ sends only once it has booted.
func Handshake(addr string) error { return handshake(addr) }

func handshake(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("AMQP\x00\x00\x09\x01")); err != nil {
		return err
	}
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return err
	}
	if b[0] != 1 {
		return fmt.Errorf("frame type %d, want a method frame", b[0])
	}
	return nil
}

// LogTail is the end of the node's output and logs, for a failure
// message.
func (n *Node) LogTail() string {
	var buf bytes.Buffer
	files, _ := filepath.Glob(filepath.Join(n.dir, "log", "*.log"))
	for _, f := range append([]string{filepath.Join(n.dir, "output")}, files...) {
		b, err := os.ReadFile(f)
		if err != nil || len(b) == 0 {
			continue
		}
		lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
		if len(lines) > 25 {
			lines = lines[len(lines)-25:]
		}
		fmt.Fprintf(&buf, "--- %s (last %d lines)\n%s\n", f, len(lines), bytes.Join(lines, []byte("\n")))
	}
	if buf.Len() == 0 {
		return "(the node wrote no output or logs in " + n.dir + ")"
	}
	return buf.String()
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("rabbitnode: pick a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
