// Package pgproxy is a loopback TCP proxy in front of a PostgreSQL server
// that can cut a connection at a chosen point of the frontend protocol: right
// after a COMMIT has gone out, so that the client cannot know whether it
// committed, or just before, so that it certainly did not. Tests use it to
// check that a store tells a certain outcome from an unknown one; it listens
// on 127.0.0.1 only.
//
// The proxy reads the messages that clients send (the simple and the
// extended query protocols, with prepared statements tracked by name) and
// copies the server's replies through untouched.
package pgproxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// When says where a cut falls relative to the statement that triggers it.
type When int

const (
	// After forwards the message that runs the statement, then cuts the
	// connection before any reply reaches the client: the server runs the
	// statement, and the client cannot know that it did.
	After When = iota
	// Before cuts the connection instead of forwarding that message: the
	// server never runs the statement.
	Before
)

// Match reports whether a statement's text should trigger a cut.
type Match func(sql string) bool

// IsCommit matches COMMIT and END, as clients send them.
func IsCommit(sql string) bool {
	s := strings.ToUpper(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(sql), ";")))
	return s == "COMMIT" || s == "END" || s == "COMMIT TRANSACTION" || s == "COMMIT WORK"
}

// Proxy forwards connections from a loopback port to a PostgreSQL server.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	armed []cut // pending cuts, the first applies next
	conns map[net.Conn]struct{}
	cuts  int
	done  bool
	wg    sync.WaitGroup
}

type cut struct {
	match Match
	when  When
}

// Start listens on 127.0.0.1 at a free port and forwards each connection to
// target (host:port).
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("pgproxy: listen: %w", err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the host:port the proxy listens on.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// StartFor starts a proxy in front of the server of connString, a
// postgres:// URL, and returns it with the URL that connects through it.
func StartFor(connString string) (*Proxy, string, error) {
	u, err := url.Parse(connString)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Host == "" {
		return nil, "", fmt.Errorf("pgproxy: want a postgres://host:port/... URL")
	}
	target := u.Host
	if u.Port() == "" {
		target = net.JoinHostPort(u.Hostname(), "5432")
	}
	p, err := Start(target)
	if err != nil {
		return nil, "", err
	}
	u.Host = p.Addr()
	q := u.Query()
	q.Set("sslmode", "disable") // the proxy reads the protocol in the clear
	u.RawQuery = q.Encode()
	return p, u.String(), nil
}

// CutNext arms one cut: the next statement, on any connection, whose text
// matches is cut as when says. Cuts armed together apply in order.
func (p *Proxy) CutNext(match Match, when When) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed = append(p.armed, cut{match: match, when: when})
}

// Armed returns how many armed cuts have not fallen yet.
func (p *Proxy) Armed() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.armed)
}

// Cuts returns how many connections the proxy has cut.
func (p *Proxy) Cuts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cuts
}

// Close stops listening, closes every connection and waits for the proxy's
// goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.done = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		if !p.track(client, server) {
			return
		}
		p.wg.Add(2)
		cut := new(atomic.Bool) // set by forward before a cut's statement goes out
		go func() {
			defer p.wg.Done()
			drain(client, server, cut)
			client.Close()
			server.Close()
			p.untrack(client, server)
		}()
		go func() {
			defer p.wg.Done()
			if !p.forward(client, server, cut) {
				server.Close()
			}
			// The client learns of the cut at once; after a cut that let the
			// statement through, the server side stays open until the
			// server has read everything and ended its session.
			client.Close()
		}()
	}
}

func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}

// take reports whether the first armed cut matches sql, and removes it if so.
func (p *Proxy) take(sql string) (When, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.armed) == 0 || !p.armed[0].match(sql) {
		return 0, false
	}
	c := p.armed[0]
	p.armed = p.armed[1:]
	p.cuts++
	return c.when, true
}

// Protocol codes of the untyped messages that start a connection.
const (
	codeSSLRequest    = 80877103
	codeGSSENCRequest = 80877104
	codeCancelRequest = 80877102
)

// drain copies the server's replies to the client until the server ends the
// connection, and reads on (discarding) once the client is gone or cut is
// set, so that the server always reads what it was sent before it sees the
// end. forward sets cut before it sends the statement of an After cut, so
// no reply to it, which can only be read after that, reaches the client:
// checked after each read, before the write.
func drain(client, server net.Conn, cut *atomic.Bool) {
	buf := make([]byte, 32<<10)
	clientGone := false
	server.SetReadDeadline(time.Now().Add(drainTimeout))
	for {
		n, err := server.Read(buf)
		if cut.Load() {
			clientGone = true
		}
		if n > 0 && !clientGone {
			if _, werr := client.Write(buf[:n]); werr != nil {
				clientGone = true
			}
		}
		if err != nil {
			return
		}
		if !clientGone {
			server.SetReadDeadline(time.Now().Add(drainTimeout))
		}
	}
}

// drainTimeout bounds how long a connection may stay silent.
const drainTimeout = 10 * time.Minute

// forward copies client messages to server until either side ends or a cut
// falls. It returns true when a cut let its statement through and half-closed
// the server connection, which drain then closes.
func (p *Proxy) forward(client, server net.Conn, cut *atomic.Bool) (halfClosed bool) {
	// The start-up phase: untyped messages, until the startup message.
	for {
		msg, err := readUntyped(client)
		if err != nil {
			return false
		}
		if _, err := server.Write(msg); err != nil {
			return false
		}
		code := binary.BigEndian.Uint32(msg[4:8])
		if code == codeCancelRequest {
			return false
		}
		if code != codeSSLRequest && code != codeGSSENCRequest {
			break
		}
	}
	statements := map[string]string{} // prepared statement name -> text
	portals := map[string]string{}    // portal name -> statement text
	for {
		typ, msg, err := readTyped(client)
		if err != nil {
			return false
		}
		body := msg[5:]
		var sql string
		runs := false // whether this message runs a statement
		switch typ {
		case 'Q':
			sql, runs = cstring(body), true
		case 'P':
			name, rest := cstringRest(body)
			statements[name] = cstring(rest)
		case 'B':
			portal, rest := cstringRest(body)
			portals[portal] = statements[cstring(rest)]
		case 'E':
			sql, runs = portals[cstring(body)], true
		case 'C': // Close of a statement or portal
			if len(body) > 1 {
				if body[0] == 'S' {
					delete(statements, cstring(body[1:]))
				} else {
					delete(portals, cstring(body[1:]))
				}
			}
		}
		if runs {
			if when, ok := p.take(sql); ok {
				if when == Before {
					return false
				}
				// No reply from here on reaches the client (see drain).
				// The server reads the message, then the end of the
				// connection: a half-close sends FIN after the data.
				cut.Store(true)
				if _, err := server.Write(msg); err != nil {
					return false
				}
				server.(*net.TCPConn).CloseWrite()
				return true
			}
		}
		if _, err := server.Write(msg); err != nil {
			return false
		}
	}
}

func readUntyped(r io.Reader) ([]byte, error) {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(head[:])
	if n < 8 || n > 1<<20 {
		return nil, errors.New("pgproxy: bad start-up message length")
	}
	msg := make([]byte, n)
	copy(msg, head[:])
	_, err := io.ReadFull(r, msg[4:])
	return msg, err
}

func readTyped(r io.Reader) (byte, []byte, error) {
	var head [5]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(head[1:])
	if n < 4 || n > 1<<30 {
		return 0, nil, errors.New("pgproxy: bad message length")
	}
	msg := make([]byte, 1+n)
	copy(msg, head[:])
	_, err := io.ReadFull(r, msg[5:])
	return head[0], msg, err
}

// cstring returns the NUL-terminated string at the start of b.
func cstring(b []byte) string {
	s, _ := cstringRest(b)
	return s
}

func cstringRest(b []byte) (string, []byte) {
	for i, c := range b {
		if c == 0 {
			return string(b[:i]), b[i+1:]
		}
	}
	return string(b), nil
}
