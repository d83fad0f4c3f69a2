package payments

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemoutbox"
)

// Event types of the payments service.
const (
	EventPaymentSucceeded = "payment.succeeded"
	EventPaymentDeclined  = "payment.declined"
	EventPaymentFailed    = "payment.failed"
)

// Bounds of GET /v1/events.
const (
	EventsLimitDefault = 20
	EventsLimitMax     = 100
)

// ErrDeclined is returned, wrapped, by a Processor that refused the
// charge: a definitive answer, unlike a failure to reach it.
var ErrDeclined = errors.New("payments: the card was declined")

// ProblemDeclined is the answer to a declined payment: stored with the key
// and replayed.
var ProblemDeclined = idem.ProblemKind{Code: "payment-declined", Status: http.StatusPaymentRequired, Title: "Payment declined",
	About: "The card processor declined the charge. The payment was recorded with status \"declined\" (its address is in Location) and a payment.declined event was sent. A retry with the same Idempotency-Key replays this answer; a new attempt, with another card, needs a new key."}

// ProblemFailed is the answer to a payment whose charge request the card
// processor refused (a *RefusedError): stored with the key and replayed.
var ProblemFailed = idem.ProblemKind{Code: "payment-failed", Status: http.StatusFailedDependency, Title: "Payment failed",
	About: "The card processor refused the charge request itself; this is not a decline of the card. Nothing was charged. The payment was recorded with status \"failed\" (its address is in Location) and a payment.failed event was sent. A retry with the same Idempotency-Key replays this answer; try again later with a new key, and contact support if it persists: the operator is alerted."}

// enqueuePaymentEvent writes the event that describes p in the request's
// transaction: payment.succeeded, payment.declined or payment.failed, with the payment as
// its data. The event commits with the payment or not at all, so a
// request has one event whatever its outcome. The purpose names the
// payment: a key reused after its retention makes a new payment, whose
// event must not collide with the first payment's.
func (s *Service) enqueuePaymentEvent(ctx context.Context, p *Payment) error {
	typ := EventPaymentSucceeded
	switch p.Status {
	case StatusDeclined:
		typ = EventPaymentDeclined
	case StatusFailed:
		typ = EventPaymentFailed
	}
	return s.enqueueEvent(ctx, "payment-event:"+p.ID, typ, p)
}

// enqueueEvent writes an event of type typ with data, as JSON, in the
// request's transaction, once per request and purpose. Without an outbox
// it does nothing.
func (s *Service) enqueueEvent(ctx context.Context, purpose, typ string, data any) error {
	if s.cfg.Outbox == nil {
		return nil
	}
	payload, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("payments: encode event: %w", err)
	}
	_, err = idemoutbox.Enqueue(ctx, s.cfg.Outbox, idemoutbox.EventParams{
		Purpose: purpose, Type: typ, Payload: payload, Now: s.cfg.Now(),
	})
	return err
}

// eventView is an event as GET /v1/events shows it.
type eventView struct {
	ID       string          `json:"id"`
	Object   string          `json:"object"`
	Type     string          `json:"type"`
	Created  int64           `json:"created"`
	Data     json.RawMessage `json:"data"`
	Delivery eventDelivery   `json:"delivery"`
}

type eventDelivery struct {
	Status   idemoutbox.Status `json:"status"`
	Attempts int               `json:"attempts"`
}

type eventList struct {
	Object     string      `json:"object"`
	Data       []eventView `json:"data"`
	HasMore    bool        `json:"has_more"`
	NextCursor string      `json:"next_cursor,omitempty"`
}

// listEvents is GET /v1/events: the calling client's events, newest first,
// limit per page (1 to 100, default 20), continued with ?cursor= from the
// previous page's next_cursor. Other clients' events are never listed.
func (s *Service) listEvents(w http.ResponseWriter, r *http.Request) {
	client, _ := ClientFromContext(r.Context())
	q := r.URL.Query()
	limit := EventsLimitDefault
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > EventsLimitMax {
			WriteParamProblem(w, &ParamError{Param: "limit", Reason: fmt.Sprintf("must be an integer from 1 to %d", EventsLimitMax)})
			return
		}
		limit = n
	}
	var after *idemoutbox.Cursor
	if v := q.Get("cursor"); v != "" {
		c, ok := decodeCursor(v)
		if !ok {
			WriteParamProblem(w, &ParamError{Param: "cursor", Reason: "is not a next_cursor of this API"})
			return
		}
		after = &c
	}
	events, err := s.cfg.Outbox.ListEvents(r.Context(), idemoutbox.ListParams{ClientID: client, Limit: limit + 1, After: after})
	if err != nil {
		s.cfg.Logger.ErrorContext(r.Context(), "payments: list events failed", "client_id", client, "err", err)
		problem(w, ProblemInternal, "The events could not be read; retry.")
		return
	}
	out := eventList{Object: "list", Data: []eventView{}}
	if len(events) > limit {
		events, out.HasMore = events[:limit], true
		out.NextCursor = encodeCursor(events[limit-1].Cursor())
	}
	for _, e := range events {
		out.Data = append(out.Data, eventView{
			ID: e.ID, Object: "event", Type: e.Type, Created: e.CreatedAt.Unix(), Data: e.Payload,
			Delivery: eventDelivery{Status: e.Status, Attempts: e.Attempts},
		})
	}
	writeJSON(w, http.StatusOK, out)
}

// A cursor is the base64url of "<created, Unix microseconds>.<event id>";
// it reveals nothing the client does not see in the listing.
func encodeCursor(c idemoutbox.Cursor) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.CreatedAt.UnixMicro(), 10) + "." + c.ID))
}

func decodeCursor(s string) (idemoutbox.Cursor, bool) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return idemoutbox.Cursor{}, false
	}
	at, id, ok := strings.Cut(string(b), ".")
	micros, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil || !strings.HasPrefix(id, "evt_") {
		return idemoutbox.Cursor{}, false
	}
	return idemoutbox.Cursor{CreatedAt: time.UnixMicro(micros).UTC(), ID: id}, true
}

// Payment statuses.
const (
	StatusSucceeded = "succeeded"
	StatusDeclined  = "declined"
	// StatusFailed is a payment whose charge request the processor refused
	// (a *RefusedError): nothing was charged.
	StatusFailed = "failed"
)
