package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// upstream is a test API with no idempotency of its own unless honour is
// set. It counts every request it receives and every effect (charge) per
// test key (the X-Test-Key header that send sets to the Idempotency-Key,
// forwarded or not), so that tests can tell a replay from a second forward.
//
//	POST /v1/charges          charges and answers 201 with the charge
//	POST /v1/reset            charges, then resets the connection the first
//	                          time it sees a key; later it answers like
//	                          /v1/charges
//	POST /v1/slow             charges, then answers only once release is
//	                          closed
//	POST /v1/bad-gateway      charges, then answers 502, like a gateway
//	                          whose upstream died
//	POST /v1/hang             charges and records its answer (when honour
//	                          is set), then answers only once release is
//	                          closed
//	POST /v1/drop             resets the connection the first time it sees
//	                          a key, before it records or charges anything;
//	                          later it answers like /v1/charges
//	GET  /v1/requests/{key}   the status URL of the probe contract, when
//	                          honour is set (see status)
//	GET  /v1/ping             answers 200
type upstream struct {
	*httptest.Server
	honour  bool          // deduplicate by Idempotency-Key, as Stripe does
	release chan struct{} // closed to let /v1/slow answer

	mu       sync.Mutex
	requests map[string]int    // requests received, per key
	charges  map[string]int    // effects, per key
	answers  map[string][]byte // the stored answer per key, when honour is set
	inFlight map[string]bool   // keys being processed, when honour is set
	conns    map[string]int    // requests per connection (remote address)
	reused   map[string]bool   // the first request of a key came on a reused connection
	headers  map[string]http.Header
	// perClientKey counts charges per Authorization and forwarded key.
	perClientKey map[string]int
	// owner is the Authorization of each forwarded key's first request;
	// the status URL answers only for it.
	owner map[string]string
	// probes counts the status URL's requests per key.
	probes map[string]int
	// probeStarted, when set, receives each key the status URL is asked
	// about, and probeGate, when set, holds the status URL's answer until
	// it is closed.
	probeStarted chan string
	probeGate    chan struct{}
}

func newUpstream(t *testing.T, honour bool) *upstream {
	t.Helper()
	u := &upstream{
		honour: honour, release: make(chan struct{}),
		requests: map[string]int{}, charges: map[string]int{}, answers: map[string][]byte{},
		inFlight: map[string]bool{}, conns: map[string]int{}, reused: map[string]bool{},
		headers: map[string]http.Header{}, perClientKey: map[string]int{},
		owner: map[string]string{}, probes: map[string]int{},
	}
	u.Server = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(func() {
		u.releaseSlow()
		u.Close()
	})
	return u
}

func (u *upstream) releaseSlow() {
	u.mu.Lock()
	defer u.mu.Unlock()
	select {
	case <-u.release:
	default:
		close(u.release)
	}
}

func (u *upstream) count(key string) (requests, charges int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.requests[key], u.charges[key]
}

func (u *upstream) serve(w http.ResponseWriter, r *http.Request) {
	if key, ok := strings.CutPrefix(r.URL.Path, "/v1/requests/"); ok && r.Method == http.MethodGet {
		u.status(w, r, key)
		return
	}
	io.Copy(io.Discard, r.Body)
	key := r.Header.Get("X-Test-Key") // counts, whether the key is forwarded or not
	ikey := r.Header.Get("Idempotency-Key")
	u.mu.Lock()
	u.conns[r.RemoteAddr]++
	if u.requests[key] == 0 {
		u.reused[key] = u.conns[r.RemoteAddr] > 1
		u.headers[key] = r.Header.Clone()
	}
	u.requests[key]++
	if r.Method == http.MethodGet {
		u.mu.Unlock()
		fmt.Fprintln(w, "pong")
		return
	}
	if r.URL.Path == "/v1/drop" && u.requests[key] == 1 {
		u.mu.Unlock()
		resetConnection(w)
		return
	}
	if _, ok := u.owner[ikey]; !ok && ikey != "" {
		u.owner[ikey] = r.Header.Get("Authorization")
	}
	if u.honour && ikey != "" {
		if body, ok := u.answers[ikey]; ok {
			u.mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			w.Write(body)
			return
		}
		if u.inFlight[ikey] {
			u.mu.Unlock()
			http.Error(w, "in flight", http.StatusConflict)
			return
		}
		u.inFlight[ikey] = true
	}
	u.charges[key]++
	if ikey != "" {
		u.perClientKey[r.Header.Get("Authorization")+" "+ikey]++
	}
	n := 0
	for _, c := range u.charges {
		n += c
	}
	id := fmt.Sprintf("ch_%d", n)
	body, _ := json.Marshal(map[string]any{"id": id, "object": "charge"})
	first := u.charges[key] == 1 && u.requests[key] == 1
	u.mu.Unlock()

	switch r.URL.Path {
	case "/v1/reset":
		if first {
			// The answer is the upstream's before the reset reaches the
			// proxy, so that a retry never finds the key still in flight.
			u.forget(ikey)
			resetConnection(w)
			return
		}
	case "/v1/slow":
		<-u.release
	case "/v1/hang":
		u.mu.Lock()
		if u.honour && ikey != "" {
			u.answers[ikey] = body
			delete(u.inFlight, ikey)
		}
		u.mu.Unlock()
		<-u.release
	case "/v1/bad-gateway":
		u.forget(ikey)
		http.Error(w, "bad gateway", http.StatusBadGateway)
		return
	}
	u.mu.Lock()
	if u.honour && ikey != "" {
		u.answers[ikey] = body
		delete(u.inFlight, ikey)
	}
	u.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/v1/charges/"+id)
	w.Header().Set("Connection", "X-Hop")
	w.Header().Set("X-Hop", "dropped by the proxy")
	w.WriteHeader(http.StatusCreated)
	w.Write(body)
}

// status is the status URL of an honouring upstream, by the probe
// contract: for the key's own client, 200 with the stored answer when there
// is one, 202 while the key is in flight, and 404 "not-received" when the
// key was never recorded (or belongs to another client, for whom it was
// never received).
func (u *upstream) status(w http.ResponseWriter, r *http.Request, key string) {
	u.mu.Lock()
	u.probes[key]++
	started, gate := u.probeStarted, u.probeGate
	u.mu.Unlock()
	if started != nil {
		started <- key
	}
	if gate != nil {
		<-gate
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	mine := u.owner[key] == r.Header.Get("Authorization")
	switch {
	case !u.honour:
		http.Error(w, "no such endpoint", http.StatusNotFound)
	case mine && u.answers[key] != nil:
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set(ProbeStatusHeader, ProbeStatusCompleted)
		w.Write(u.answers[key])
	case mine && u.inFlight[key]:
		w.Header().Set(ProbeStatusHeader, "in-progress")
		w.Header().Set("Retry-After", "3")
		w.WriteHeader(http.StatusAccepted)
	default:
		w.Header().Set(ProbeStatusHeader, ProbeStatusNotReceived)
		http.Error(w, "never received", http.StatusNotFound)
	}
}

// probeCount is how often the status URL was asked about a key.
func (u *upstream) probeCount(key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.probes[key]
}

// forget stores, for an honouring upstream, that a key's effect happened
// with a lost answer: the next request with it gets a fresh answer stored,
// with no second charge.
func (u *upstream) forget(key string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.honour && key != "" {
		body, _ := json.Marshal(map[string]any{"id": "ch_lost_" + key, "object": "charge"})
		u.answers[key] = body
		delete(u.inFlight, key)
	}
}

// resetConnection closes the connection under w with a TCP reset.
func resetConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	conn.Close()
}

// maxChargesPerClientKey is the most charges any client's forwarded key
// caused, and how many such keys there were.
func (u *upstream) maxChargesPerClientKey() (most, keys int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, n := range u.perClientKey {
		most = max(most, n)
	}
	return most, len(u.perClientKey)
}
