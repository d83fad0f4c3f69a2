package chaos

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/idemkit/idem/idemoutbox"
)

// Receiver schedule: the share of an event's first deliveries answered
// 500, and the most 500s one event gets, so that every event is retried
// now and then and still arrives well within paymentsd's attempts.
const (
	receiverFailPercent = 25
	receiverMaxFailures = 2
)

// receiver is the webhook endpoint of a run: every paymentsd instance
// delivers its outbox's events to it. It verifies each delivery's
// signature, answers some deliveries 500 on a schedule drawn from the seed
// (so that the relays retry), and records which events arrived, for which
// payment, and how often.
type receiver struct {
	secret string
	seed   uint64
	srv    *http.Server
	url    string

	mu       sync.Mutex
	tries    map[string]int            // deliveries per event id, refused ones included
	accepted map[string]*receivedEvent // by event id
	refused  int                       // deliveries answered 500 on the schedule
	invalid  []string                  // why each rejected delivery was rejected
}

// receivedEvent is an event the receiver accepted at least once.
type receivedEvent struct {
	ID        string
	Type      string
	PaymentID string
	Count     int // accepted deliveries: more than 1 is at-least-once at work
}

// startReceiver listens on 127.0.0.1 and serves webhooks signed with
// secret until close.
func startReceiver(secret string, seed uint64) (*receiver, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("chaos: start the webhook receiver: %w", err)
	}
	r := &receiver{
		secret: secret, seed: seed, url: "http://" + l.Addr().String() + "/webhooks",
		tries: map[string]int{}, accepted: map[string]*receivedEvent{},
	}
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	go r.srv.Serve(l)
	return r, nil
}

func (r *receiver) close() { r.srv.Close() }

// ServeHTTP verifies a delivery, then answers 500 if the schedule says so,
// or records the event and answers 204. A delivery that fails verification
// or cannot be read is answered 401 or 400 and counted as invalid.
func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := idemoutbox.VerifyRequest(r.secret, req, nil)
	id := req.Header.Get(idemoutbox.HeaderID)
	if err != nil {
		r.reject(id, err.Error())
		status := http.StatusBadRequest
		if errors.Is(err, idemoutbox.ErrVerification) {
			status = http.StatusUnauthorized
		}
		http.Error(w, "invalid webhook", status)
		return
	}
	var event struct {
		Type string `json:"type"`
		Data struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &event); err != nil || event.Data.ID == "" {
		r.reject(id, "a signed body that is not an event with a payment")
		http.Error(w, "not an event", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tries[id]++
	if r.refuse(id, r.tries[id]) {
		r.refused++
		http.Error(w, "scheduled failure", http.StatusInternalServerError)
		return
	}
	e := r.accepted[id]
	if e == nil {
		e = &receivedEvent{ID: id, Type: event.Type, PaymentID: event.Data.ID}
		r.accepted[id] = e
	}
	e.Count++
	w.WriteHeader(http.StatusNoContent)
}

func (r *receiver) reject(id, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.invalid = append(r.invalid, fmt.Sprintf("delivery of %q: %s", id, why))
}

// refuse reports whether the n-th delivery (from 1) of event id is
// answered 500: a draw from the seed and the event id, for the first
// receiverMaxFailures deliveries only.
func (r *receiver) refuse(id string, n int) bool {
	if n > receiverMaxFailures {
		return false
	}
	h := fnv.New64a()
	binary.Write(h, binary.LittleEndian, r.seed)
	binary.Write(h, binary.LittleEndian, uint64(n))
	h.Write([]byte(id))
	return h.Sum64()%100 < receiverFailPercent
}

// receiverStats is what the receiver saw.
type receiverStats struct {
	// ByPayment holds the accepted events per payment id.
	ByPayment map[string][]receivedEvent
	Delivered int // distinct event ids accepted
	Duplicate int // event ids accepted more than once
	Refused   int
	Invalid   []string
}

func (r *receiver) stats() receiverStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := receiverStats{ByPayment: map[string][]receivedEvent{}, Refused: r.refused, Invalid: append([]string(nil), r.invalid...)}
	for _, e := range r.accepted {
		s.ByPayment[e.PaymentID] = append(s.ByPayment[e.PaymentID], *e)
		s.Delivered++
		if e.Count > 1 {
			s.Duplicate++
		}
	}
	return s
}
