package idemstore

import (
	"context"
	"net/http"
	"time"
)

// Scope identifies a key: the authenticated client and the key it sent.
// Keys of different clients never meet.
type Scope struct {
	ClientID string // from Config.ClientID
	Key      string // the parsed Idempotency-Key, unquoted
}

// Status is the state of a stored key.
type Status string

// Response is a stored response: what a replay sends back.
type Response struct {
	StatusCode int
	Header     http.Header // only the headers allowed by the replay list
	Body       []byte      // byte for byte as the handler wrote it
}

// Record is a key as a store holds it.
type Record struct {
	Scope  Scope
	Method string
	// Path is the first request's, as the middleware fingerprints it: the
	// escaped path with each segment's escapes spelled one way
	// ("/v1/payments" for POST /v1/%70ayments).
	Path string

	// RequestHash is the idemfingerprint.Fingerprint Hash of the first request.
	RequestHash []byte
	// RequestFields are the first request's idemfingerprint.Fingerprint
	// Fields, opaque to stores. It may be empty.
	RequestFields []byte

	Status   Status
	Response *Response // set when Status is StatusCompleted

	CreatedAt time.Time
	// LockedAt is when the current holder claimed the key. It is zero when
	// the store cannot see it, as for an atomic claim whose transaction is
	// still open.
	LockedAt time.Time
	// LeaseExpires is when the current holder's lease expires, as the store
	// recorded it when the holder claimed the key or took it over
	// ([ClaimParams.LeaseExpires]). It is zero when the store recorded none:
	// a key without a holder, or a lease taken by a build of the store that
	// did not record it. [Record.LeaseEnd] falls back to a lock timeout
	// then.
	LeaseExpires time.Time
	// Token is the fencing token of the current lease. It grows by one on
	// every takeover.
	Token int64
	// TraceContext is the W3C trace context (a traceparent field value)
	// of the request that claimed the key last, as
	// [ClaimParams.TraceContext] gave it: of the request that ran it, for
	// a completed key. Empty when that claim carried none.
	TraceContext string
}

// ClaimParams are the inputs of [Store.Claim].
type ClaimParams struct {
	Scope  Scope
	Method string
	Path   string

	// RequestHash and RequestFields are the request's
	// idemfingerprint.Fingerprint: the middleware's, or one from
	// idemfingerprint.New.
	RequestHash   []byte
	RequestFields []byte

	// TwoPhase asks for a lease that commits the claim at once, with a
	// fencing token, and runs the handler's writes in transactions of its
	// own (idem's ModeTwoPhase). False asks for one transaction from the
	// claim to the stored response (ModeAtomic).
	TwoPhase bool
	// Now is the time of the claim, from the middleware's clock. Stores use
	// it, not their own clock, for created_at, locked_at and every expiry
	// test, so that tests can move time.
	Now time.Time
	// LockTimeout is how long a two-phase lease lasts. A started key whose
	// lease is older than this is taken over by the next request with the
	// same request hash. Stores record the lease's expiry from it
	// ([ClaimParams.LeaseExpires]).
	LockTimeout time.Duration
	// Retention is how long a key lives. A claim that finds a key older than
	// this replaces it, as if the key had been purged.
	Retention time.Duration

	// Speculative lets the store return, in ModeAtomic, a lease that has
	// not claimed the key yet, to claim it in the same round trip as the
	// lease transaction's first statement. A store may ignore it and claim
	// at once. When such a lease's claim finds the key held or completed,
	// the statement fails without running, and the lease's Complete and
	// Release return an error wrapping an [*ExistsError] that carries the
	// key, to be answered as a claim that found it would be, never with
	// the handler's response. The middleware sets it in ModeAtomic, unless
	// the request prefers to wait for a key in flight, or the middleware
	// claimed the same key lately itself (a retry or a duplicate, which is
	// likely to find the key and is then answered without running its
	// handler).
	Speculative bool

	// TraceContext is the request's W3C trace context, a traceparent field
	// value of at most 512 bytes, or empty. A store keeps it with the key,
	// replacing the previous holder's on a takeover, and returns it in
	// [Record.TraceContext], so that a replay, a 409 or a resume can point
	// to the trace of the request that ran the key. Opaque to stores.
	TraceContext string
}

// ClaimResult is the output of [Store.Claim]: exactly one of Lease and
// Record is set.
type ClaimResult struct {
	// Lease is set when the caller now owns the key.
	Lease Lease
	// Record is set when the key exists and the caller does not own it.
	// The caller compares the request hash and either replays the stored
	// response, answers 422, or answers 409 while the key is in flight.
	Record *Record
}

// Store keeps idempotency keys.
//
// Claim must elect exactly one owner among any number of concurrent claims of
// one scope, across goroutines and processes. It must never block on another
// owner's open transaction: a key that is in flight is reported at once as a
// Record with Status StatusInFlight. Errors from the database are returned
// wrapped; the middleware answers them with 503 and never runs the handler.
//
// The conformance suite in package idemtest checks every rule; run it against
// any new store.
type Store interface {
	Claim(ctx context.Context, p ClaimParams) (ClaimResult, error)
}

// Lease is the ownership of a key, returned by a successful claim. Exactly
// one of Complete and Release must be called, once; the one exception is
// Release after a Complete that failed with an error other than
// ErrLeaseLost, which frees a two-phase key whose response could not be
// stored. Release never frees a key that another request took over, nor
// one whose response was committed (after a Complete that failed with
// [ErrOutcomeUnknown], it frees the key only if the commit did not happen).
// Any other call after the lease ended, and the store's transaction
// accessor after it ended, return an error wrapping [ErrLeaseEnded].
type Lease interface {
	// Context returns a context derived from ctx that carries the lease's
	// transaction, for the handler. Each store has an accessor for it, such
	// as idemsqlite.TxFromContext.
	Context(ctx context.Context) context.Context

	// Complete stores the response and commits it together with the
	// handler's business writes. It returns an error wrapping
	// [ErrLeaseLost] when another request took the key over, in which case
	// the handler's writes were rolled back, and one wrapping
	// [ErrOutcomeUnknown] when the commit was sent but its answer was lost,
	// so the writes and the response may or may not have been committed.
	// Any other error means that nothing was committed.
	Complete(ctx context.Context, resp *Response) error

	// Release rolls back the handler's writes and frees the key, so the
	// client can retry with the same key. A speculative lease (see
	// [ClaimParams.Speculative]) whose claim found the key held or
	// completed returns an error wrapping an [*ExistsError] instead.
	// In ModeTwoPhase the key's row stays, with no holder, when it passed a
	// recovery point, for the next claim to take over at once; one that
	// passed none is deleted. A store fences a lease by its row as well as
	// its token, so that a row made anew, whose tokens start again at 1,
	// never takes an earlier holder's writes.
	Release(ctx context.Context) error

	// Info describes the lease.
	Info() LeaseInfo
}

// ConflictReporter is implemented by leases whose transaction can fail
// with a serialization failure or a deadlock, which a rerun may fix. After
// the handler returns, the middleware asks Conflicted; in ModeAtomic it then
// releases the lease and runs the whole request again, claim included, up
// to idem.Config.MaxConflictRetries times.
type ConflictReporter interface {
	Conflicted() bool
}

// LeaseInfo describes a lease.
type LeaseInfo struct {
	// Token is the fencing token, 1 for a first claim.
	Token int64
	// TakenOver is true when the claim took the key over from a holder
	// whose lease had expired.
	TakenOver bool
	// CreatedAt is the created_at of the key's row as the store keeps it
	// (the Record's CreatedAt): the claim's Now for a row it made, the
	// row's for a takeover. A takeover keeps it; a row made anew, after
	// the key was released before any recovery point, purged, deleted or
	// replaced past retention, has a new one. idem.Phases derive the keys of
	// their later phases from it (see idem.DeriveKey). Zero when the store
	// does not report it.
	CreatedAt time.Time
}

const (
	// StatusInFlight means a request holds the key and has not finished:
	// a duplicate gets [ProblemKeyInFlight], counted as [ResultInFlight].
	// Stores keep it as "started".
	StatusInFlight Status = "started"
	// StatusCompleted means the response is stored and will be replayed.
	StatusCompleted Status = "completed"
)
