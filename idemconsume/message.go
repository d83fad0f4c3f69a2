package idemconsume

import (
	"fmt"
	"net/http"
	"time"
)

// Message is one delivery of a message, as an adapter hands it to
// [Consumer.Handle].
type Message struct {
	// ID is the message's id, its idempotency key: the publisher's id
	// (Nats-Msg-Id, AMQP message-id), the same on every re-send of one
	// command. 1 to 255 printable ASCII characters; another id is
	// dead-lettered as malformed. Required.
	ID string
	// Body is the payload. A JSON payload is fingerprinted field by field,
	// so that a changed payload under one id is reported with the fields
	// that differ; any other payload byte for byte.
	Body []byte
	// ContentType is the payload's media type. Defaults to
	// "application/json".
	ContentType string
	// Header carries the message's metadata to the handler. It is not
	// fingerprinted.
	Header http.Header
	// Client is the client part of the key's scope. Defaults to the
	// consumer's name ([Config.Name]), so that two consumers of one
	// message each process it once. Set it to share a scope with HTTP
	// requests of one client (see docs/consumers.md).
	Client string
	// Redelivered is the broker's word that it delivered this message
	// before. It is reported to [Metrics]; the key decides, not the flag.
	Redelivered bool
}

// Action is what an adapter does with a message after [Consumer.Handle].
type Action int

const (
	// Ack acknowledges the message: its effects are committed, now or by
	// an earlier delivery.
	Ack Action = iota + 1
	// Nak asks the broker to deliver the message again after
	// [Result.Delay]; nothing of it is committed.
	Nak
	// DeadLetter removes the message from the queue to its dead-letter
	// path ([Result.Reason] says why): it can never be processed.
	DeadLetter
)

// String names the action: "ack", "nak" or "dead_letter".
func (a Action) String() string {
	switch a {
	case Ack:
		return "ack"
	case Nak:
		return "nak"
	case DeadLetter:
		return "dead_letter"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Outcome is what became of a message.
type Outcome string

// The outcomes of [Consumer.Handle], each with its [Action].
const (
	// OutcomeExecuted (Ack): the handler ran and its work committed with
	// the key.
	OutcomeExecuted Outcome = "executed"
	// OutcomeDuplicate (Ack): the key was completed by an earlier
	// delivery; the handler did not run. A duplicate absorbed.
	OutcomeDuplicate Outcome = "duplicate"
	// OutcomeInFlight (Nak, with the holder's lease as the delay): another
	// delivery of the id holds the key; the handler did not run.
	OutcomeInFlight Outcome = "in_flight"
	// OutcomeFailed (Nak): the handler returned an error or panicked; its
	// writes rolled back and the key was released, so the redelivery
	// runs it again.
	OutcomeFailed Outcome = "failed"
	// OutcomeUnavailable (Nak): the store failed, the outcome of the
	// commit is unknown, the lease was lost, or a phased operation
	// stopped at a recovery point. The redelivery finds out or resumes.
	OutcomeUnavailable Outcome = "unavailable"
	// OutcomeMismatch (DeadLetter): the id was first used with another
	// payload; [Result.Fields] lists the fields that differ.
	OutcomeMismatch Outcome = "mismatch"
	// OutcomeRejected (DeadLetter): the handler returned [Reject], or
	// wrote a 4xx answer (see [ResponseWriter]); the rejection is recorded
	// with the key, and a redelivery is dead-lettered again without
	// running. A 4xx by which a handler says it did not process the
	// message ([idem.NotProcessed]) releases the key instead, as over
	// HTTP; 408 and 429 nak the message rather than dead-letter it.
	OutcomeRejected Outcome = "rejected"
	// OutcomeMalformed (DeadLetter): the id or payload was refused before
	// any effect: a malformed id, a payload that does not parse as its
	// media type, or one over [idem.Config.MaxBodyBytes].
	OutcomeMalformed Outcome = "malformed"
)

// Outcomes returns every Outcome, in a new slice, for metrics adapters that
// create each series up front.
func Outcomes() []Outcome {
	return []Outcome{OutcomeExecuted, OutcomeDuplicate, OutcomeInFlight, OutcomeFailed,
		OutcomeUnavailable, OutcomeMismatch, OutcomeRejected, OutcomeMalformed}
}

// Action is the action of the outcome.
func (o Outcome) Action() Action {
	switch o {
	case OutcomeExecuted, OutcomeDuplicate:
		return Ack
	case OutcomeMismatch, OutcomeRejected, OutcomeMalformed:
		return DeadLetter
	}
	return Nak
}

// Result is what [Consumer.Handle] did with a message, and what the adapter
// must do with it.
type Result struct {
	Outcome Outcome
	Action  Action
	// Delay is how long to wait before the redelivery of a Nak.
	Delay time.Duration
	// Reason says why a message is not acknowledged, for the dead-letter
	// path and the log. It never holds the payload.
	Reason string
	// Fields are the top-level fields, as JSON pointers, that differ from
	// the payload first seen with the id (OutcomeMismatch only).
	Fields []string
	// Err is the handler's error (OutcomeFailed, OutcomeRejected).
	Err error
}

// RejectError is the error of [Reject].
type RejectError struct {
	Reason string
}

// Error says that the message was rejected, and why.
func (e *RejectError) Error() string { return "idemconsume: message rejected: " + e.Reason }

// Reject returns the error by which a handler says that the message can
// never be processed, such as a command that fails validation. Unlike any
// other error, which releases the key so that the redelivery runs the
// handler again, a rejection is recorded with the key and the message is
// dead-lettered with the reason. Return it before any write: in the atomic
// mode the writes made so far commit with the rejection.
func Reject(reason string) error { return &RejectError{Reason: reason} }
