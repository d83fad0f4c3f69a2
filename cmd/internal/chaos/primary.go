package chaos

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// primarySwitch is the link in front of the database primary: every
// database link, and the harness's own connections, reach the primary
// through it, and a failover moves it to the promoted standby. Its
// listener stays open for the whole run. A toxiproxy proxy is moved by
// closing its listener and binding the same port again, and under load
// another socket (an outgoing connection given that port as its local
// one) can take the port in between: the bind fails, nothing listens any
// more, and every connection to the database fails until the run ends.
//
// Every database connection of a run passes the switch, so it costs the
// harness's process as few descriptors as it can: two per connection,
// the client's and the primary's, held no longer than the connection
// (see primaryDialTimeout and copyConn).
type primarySwitch struct {
	l net.Listener

	mu       sync.Mutex
	upstream string                // host:port of the primary
	conns    map[net.Conn]struct{} // both ends of every open connection
	closed   bool
	done     chan struct{} // closed when the accept loop has returned
}

// newPrimarySwitch listens on a free loopback port and forwards each
// connection to upstream, a host:port.
func newPrimarySwitch(upstream string) (*primarySwitch, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("chaos: start the primary's link: %w", err)
	}
	s := &primarySwitch{l: l, upstream: upstream, conns: map[net.Conn]struct{}{}, done: make(chan struct{})}
	go s.serve()
	return s, nil
}

// addr is the address to dial to reach the primary.
func (s *primarySwitch) addr() string { return s.l.Addr().String() }

// target returns the upstream that new connections go to.
func (s *primarySwitch) target() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.upstream
}

// move sends new connections to upstream and closes every open one, as
// a failover does to the sessions of the primary that died. The listener
// is not touched, so move cannot fail.
func (s *primarySwitch) move(upstream string) {
	s.mu.Lock()
	s.upstream = upstream
	open := s.conns
	s.conns = map[net.Conn]struct{}{}
	s.mu.Unlock()
	for c := range open {
		c.Close()
	}
}

// close stops the listener and closes every open connection.
func (s *primarySwitch) close() {
	s.mu.Lock()
	s.closed = true
	open := s.conns
	s.conns = map[net.Conn]struct{}{}
	s.mu.Unlock()
	s.l.Close()
	for c := range open {
		c.Close()
	}
	<-s.done
}

func (s *primarySwitch) serve() {
	defer close(s.done)
	for {
		c, err := s.l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// A connection that failed before it was accepted, or no
			// file descriptor left for a while.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go s.forward(c)
	}
}

// primaryDialTimeout bounds the switch's dial of the primary. A primary
// too slow to accept (a loaded machine, a postmaster forking backends)
// lets its listen queue fill, and the kernel then drops the dial's SYNs
// and sends them again for about two minutes, while the client behind
// the switch gives up and connects again: without a bound, each of its
// attempts kept two descriptors of the harness (the client's connection
// and the dial) for those two minutes. The bound lets the kernel send
// the SYN twice more (after 1 s and 3 s) before the client is told that
// the primary is down.
const primaryDialTimeout = 5 * time.Second

// forward pipes c to the current upstream until either side closes, or
// a move closes both.
func (s *primarySwitch) forward(c net.Conn) {
	target := s.target()
	up, err := net.DialTimeout("tcp", target, primaryDialTimeout)
	if err != nil {
		c.Close() // the client sees the primary down
		return
	}
	s.mu.Lock()
	if s.closed || s.upstream != target {
		// Moved while dialing: this connection reached the old primary.
		s.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	s.conns[c], s.conns[up] = struct{}{}, struct{}{}
	s.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		copyConn(dst, src)
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	c.Close()
	up.Close()
	<-done
	s.mu.Lock()
	delete(s.conns, c)
	delete(s.conns, up)
	s.mu.Unlock()
}

// copyConn copies src to dst until src ends or either fails, through a
// buffer of its own. io.Copy from one TCP connection to another splices:
// on Linux it moves the bytes through a pipe held for the whole copy, two
// more descriptors per direction, which made each connection through the
// switch cost six descriptors instead of two.
func copyConn(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, buf)
}
