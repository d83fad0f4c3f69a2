package rabbitnode

import (
	"errors"
	"net"
	"testing"
)

// A node accepts the AMQP handshake once started, refuses connections
// after Kill, and accepts them again after Restart.
func TestStartKillRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a RabbitMQ node")
	}
	n, err := Start(t.TempDir(), t.Logf)
	if errors.Is(err, ErrNotInstalled) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer n.Kill()
	if err := Handshake(n.Addr()); err != nil {
		t.Fatalf("after Start: %v", err)
	}
	n.Kill()
	if c, err := net.Dial("tcp", n.Addr()); err == nil {
		c.Close()
		t.Fatalf("after Kill, %s still accepts connections", n.Addr())
	}
	if err := n.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := Handshake(n.Addr()); err != nil {
		t.Fatalf("after Restart: %v", err)
	}
}
