package idemstore

import (
	"context"
	"time"
)

// KeyReader reads one key, for the key-status handler (idem.NewStatusHandler)
// and for operators. It is not part of [Store]: the request path never
// needs it.
type KeyReader interface {
	// GetKey returns the record of a scope, with its response body, or an
	// error wrapping [ErrKeyNotFound].
	GetKey(ctx context.Context, scope Scope) (*Record, error)
}

// KeyAdmin is what an operator needs to find and free stuck keys. idempg,
// idemsqlite and idemtest's memory store implement it; the conformance
// cases in idemtest.RunAdminTests check every rule.
type KeyAdmin interface {
	KeyReader

	// ListKeys returns keys, oldest first, without response bodies unless
	// p.WithBody is set.
	ListKeys(ctx context.Context, p ListKeysParams) ([]*Record, error)

	// ReleaseKey frees a started key so that the next request with it
	// runs: the key's fencing token grows and its lease ends, so the next
	// claim of the same request takes it over, and the old holder, should
	// it still be running, can no longer store its response. It refuses a
	// completed key ([ErrKeyCompleted]: freeing it would let the operation
	// run a second time) and, unless p.Force is set, a key whose lease is
	// live ([LeaseLiveError]). It returns the record as it was before the
	// release.
	ReleaseKey(ctx context.Context, p ReleaseKeyParams) (*Record, error)

	// DeleteKey deletes a completed key, so that the next request with it
	// runs as new: the operation may then happen twice. It refuses a
	// started key ([ErrKeyInFlight]); release that one instead, which keeps
	// its fencing token growing. It returns the record as it was, without
	// its response body.
	DeleteKey(ctx context.Context, scope Scope) (*Record, error)
}

// ListKeysLimitDefault is the default of [ListKeysParams.Limit].
const ListKeysLimitDefault = 100

// ListKeysParams are the inputs of [KeyAdmin.ListKeys]. The zero value lists
// the oldest ListKeysLimitDefault keys of every client.
type ListKeysParams struct {
	// ClientID lists one client's keys. "" lists every client's.
	ClientID string
	// Status lists only keys in this state. "" lists both.
	Status Status
	// CreatedBefore lists only keys created before it. The zero time lists
	// keys of any age.
	CreatedBefore time.Time
	// Limit is the most keys returned. 0 means ListKeysLimitDefault; a
	// negative limit is an error.
	Limit int
	// WithBody returns the response bodies too. Defaults to false.
	WithBody bool
}

// WithDefaults returns p with a zero Limit replaced by ListKeysLimitDefault.
func (p ListKeysParams) WithDefaults() ListKeysParams {
	if p.Limit == 0 {
		p.Limit = ListKeysLimitDefault
	}
	return p
}

// ReleaseKeyParams are the inputs of [KeyAdmin.ReleaseKey].
type ReleaseKeyParams struct {
	Scope Scope
	// Now is the time the lease is judged at. Required.
	Now time.Time
	// LockTimeout is the service's lease length (idem.Config.LockTimeout),
	// for a key whose store recorded no lease expiry (its lease was taken by
	// a build of the store that did not record it): such a lease taken less
	// than this before Now is live. A lease with a recorded expiry
	// ([Record.LeaseExpires]) is live until that expiry, whatever this is.
	// Required.
	LockTimeout time.Duration
	// Force releases a key whose lease is live: its holder may still be
	// running, and when it finishes its response is refused
	// ([ErrLeaseLost]) and its writes in the store roll back, but whatever
	// it did elsewhere stands.
	Force bool
}

// Readier reports whether a store can serve requests, for idem.NewReadyHandler.
// idempg and idemsqlite implement it.
type Readier interface {
	// Ready returns nil when the store answers and its schema is at the
	// version this build needs, an error wrapping [ErrSchemaVersion] when it
	// is not, and another error when the store cannot be reached.
	Ready(ctx context.Context) error
}
