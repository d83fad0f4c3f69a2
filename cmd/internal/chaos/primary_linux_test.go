package chaos

import (
	"net"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// The tests of this file count the process's open descriptors, which
// every test running beside them changes: they are not parallel, and so
// run alone, before the parallel tests of the package start.

// openFDs is the number of descriptors the process has open.
func openFDs(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count open descriptors: %v", err)
	}
	return len(es)
}

// waitFDs polls until ok(n) holds for the number n of open descriptors,
// or fails after a deadline long enough for a loaded machine.
func waitFDs(t *testing.T, what string, ok func(n int) bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		n := openFDs(t)
		if ok(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still %d descriptors open after 20 s", what, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPrimarySwitchDescriptorsPerConnection holds connections open
// through the switch and counts what each costs the process: the
// client's end, the switch's two, and the server's end, and no pipes
// (io.Copy between TCP connections splices through two pipes, four
// descriptors, per connection).
func TestPrimarySwitchDescriptorsPerConnection(t *testing.T) {
	server := nameServer(t, "primary")
	s, err := newPrimarySwitch(server)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	const n = 64
	base := openFDs(t)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		c, name := dialName(t, s.addr())
		conns = append(conns, c)
		if name != "primary" {
			t.Fatalf("the switch reached %q", name)
		}
	}
	// The server has written its name on each: both directions of each
	// connection are being copied.
	if got := openFDs(t) - base; got > n*4+n/2 {
		t.Errorf("%d connections through the switch hold %d descriptors, %.1f each; want 4 each (client, switch's two, server)", n, got, float64(got)/n)
	}
}

// stalledListener returns the address of a listener that never accepts,
// with its accept queue full: the kernel drops the SYNs of every new
// connection to it, as it does for a primary too slow to accept, and a
// dial without a timeout hangs for about two minutes.
func stalledListener(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
	for range 8 {
		c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
		if err != nil {
			return addr // the queue is full: this dial's SYNs were dropped
		}
		t.Cleanup(func() { c.Close() })
	}
	t.Skip("could not fill a listen queue here: dials to it do not stall")
	return ""
}

// TestPrimarySwitchGivesUpOnAPrimaryThatDoesNotAccept connects clients
// through the switch to a primary that does not accept: the switch gives
// up on the primary within primaryDialTimeout and closes the clients'
// connections, as when the primary is down, so that their retries do not
// pile up; without the bound, each attempt kept the client's connection
// and the dial open until the kernel gave up on the dial, two minutes
// later, whether the client had left or not.
func TestPrimarySwitchGivesUpOnAPrimaryThatDoesNotAccept(t *testing.T) {
	primary := stalledListener(t)
	s, err := newPrimarySwitch(primary)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	const n = 16
	base := openFDs(t)
	var clients []net.Conn
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	for range n {
		c, err := net.DialTimeout("tcp", s.addr(), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	for i, c := range clients {
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		if _, err := c.Read(make([]byte, 1)); isTimeout(err) {
			t.Fatalf("client %d: the switch still holds its connection after 20 s, waiting for the primary", i)
		}
		c.Close()
	}
	waitFDs(t, "the clients gone", func(got int) bool { return got <= base+2 })
}
