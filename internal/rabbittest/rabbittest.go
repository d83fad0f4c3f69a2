// Package rabbittest starts throwaway RabbitMQ nodes for tests that kill,
// cut or restart a broker: each node has its own name, ports, database
// directory and Erlang cookie, never the shared server's. The nodes are
// internal/rabbittest/rabbitnode's, tied to a test.
package rabbittest

import (
	"errors"
	"testing"

	"github.com/idemkit/idem/internal/rabbittest/rabbitnode"
)

// Bin returns the installed RabbitMQ start script, or skips t when there
// is none. IDEM_RABBITMQ_SERVER names another one.
func Bin(t testing.TB) string {
	bin, err := rabbitnode.Bin()
	if err != nil {
		t.Skip("no rabbitmq-server installed")
	}
	return bin
}

// Node is a throwaway RabbitMQ node of a test.
type Node struct {
	*rabbitnode.Node
	t testing.TB
}

// Start starts a node and waits until it accepts AMQP connections; the
// node is killed when the test ends. When the first start fails because
// the node exited (a port taken between its choice and the node's bind,
// say), it is tried again on other ports, three times in all. It skips t
// when no RabbitMQ is installed.
func Start(t testing.TB) *Node {
	t.Helper()
	n, err := rabbitnode.Start(t.TempDir(), t.Logf)
	if errors.Is(err, rabbitnode.ErrNotInstalled) {
		t.Skip("no rabbitmq-server installed")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Kill)
	return &Node{Node: n, t: t}
}

// Restart starts the killed node again on the same ports and database
// directory, so its durable queues and persistent messages come back; it
// fails the test when the node does not start.
func (n *Node) Restart() {
	n.t.Helper()
	if err := n.Node.Restart(); err != nil {
		n.t.Fatal(err)
	}
}
