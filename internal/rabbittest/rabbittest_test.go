package rabbittest

import (
	"net"
	"testing"

	"github.com/idemkit/idem/internal/rabbittest/rabbitnode"
)

// A node accepts the AMQP handshake once started, refuses connections
// after Kill, and again after Restart.
func TestStartKillRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a RabbitMQ node")
	}
	n := Start(t)
	if err := rabbitnode.Handshake(n.Addr()); err != nil {
		t.Fatalf("after Start: %v", err)
	}
	n.Kill()
	if c, err := net.Dial("tcp", n.Addr()); err == nil {
		c.Close()
		t.Fatalf("after Kill, %s still accepts connections", n.Addr())
	}
	n.Restart()
	if err := rabbitnode.Handshake(n.Addr()); err != nil {
		t.Fatalf("after Restart: %v", err)
	}
}
