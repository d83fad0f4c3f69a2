package chaos

import (
	"bufio"
	"errors"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
)

// nameServer accepts connections and writes name on each, then holds it
// open until the peer closes it.
func nameServer(t *testing.T, name string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.Write([]byte(name + "\n"))
				c.Read(make([]byte, 1)) // until the peer closes
			}()
		}
	}()
	return l.Addr().String()
}

// dialName dials addr and returns the name its server writes.
func dialName(t *testing.T, addr string) (net.Conn, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		c.Close()
		t.Fatalf("read the server's name through %s: %v", addr, err)
	}
	return c, line[:len(line)-1]
}

func TestPrimarySwitchMove(t *testing.T) {
	t.Parallel()
	a, b := nameServer(t, "a"), nameServer(t, "b")
	s, err := newPrimarySwitch(a)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	old, name := dialName(t, s.addr())
	defer old.Close()
	if name != "a" {
		t.Fatalf("before the move the link reached %q, want a", name)
	}
	s.move(b)
	// The sessions of the old primary end with the move.
	old.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := old.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("a connection to the old primary survived the move (read: %v)", err)
	}
	c, name := dialName(t, s.addr())
	defer c.Close()
	if name != "b" {
		t.Fatalf("after the move the link reached %q, want b", name)
	}
	if got := s.target(); got != b {
		t.Fatalf("target %s after the move, want %s", got, b)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// thief dials to from the local port of addr, as an outgoing connection
// that the kernel gave that port does.
func thief(addr, to string) (net.Conn, error) {
	_, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: p}, Timeout: 10 * time.Second}
	return d.Dial("tcp", to)
}

// The stall of a 32-minute run, in order: a failover moved the primary's
// link, a toxiproxy proxy, which closes its listener and binds the same
// port again; in between, an outgoing connection got that port as its
// local one; the bind failed, and nothing listened on the link for the
// rest of the run. The switch that replaced it never lets its port go.
func TestPrimaryLinkKeepsItsPortThroughAMove(t *testing.T) {
	t.Parallel()
	a, b := nameServer(t, "a"), nameServer(t, "b")
	elsewhere := nameServer(t, "elsewhere")

	t.Run("toxiproxy", func(t *testing.T) {
		n := newNetwork()
		defer n.close()
		p := toxiproxy.NewProxy(n.srv, "primary", "127.0.0.1:0", a)
		if err := n.srv.Collection.Add(p, true); err != nil {
			t.Fatal(err)
		}
		listen := p.Listen
		// Update is stop, then start on the same port; the thief comes
		// between the two.
		p.Stop()
		c, err := thief(listen, elsewhere)
		if err != nil {
			t.Skipf("could not take the port the proxy let go: %v", err)
		}
		defer c.Close()
		err = p.Update(&toxiproxy.Proxy{Listen: listen, Upstream: b, Enabled: true})
		if !errors.Is(err, syscall.EADDRINUSE) {
			t.Fatalf("moving the proxy with its port taken: %v, want EADDRINUSE (the failure this test documents)", err)
		}
	})

	t.Run("switch", func(t *testing.T) {
		s, err := newPrimarySwitch(a)
		if err != nil {
			t.Fatal(err)
		}
		defer s.close()
		for i, to := range []string{b, a, b} {
			if c, err := thief(s.addr(), elsewhere); err == nil {
				c.Close()
				t.Fatalf("move %d: an outgoing connection took the link's port %s", i, s.addr())
			}
			s.move(to)
			c, name := dialName(t, s.addr())
			c.Close()
			if want := map[string]string{a: "a", b: "b"}[to]; name != want {
				t.Fatalf("move %d: the link reached %q, want %q", i, name, want)
			}
		}
	})
}
