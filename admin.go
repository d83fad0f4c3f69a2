package idem

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// KeyReader reads one key, for the key-status handler ([NewStatusHandler])
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

// Validate reports whether a store can list keys with p.
func (p ListKeysParams) Validate() error {
	switch {
	case p.Limit < 0:
		return errors.New("idem: ListKeysParams.Limit must not be negative")
	case p.Status != "" && p.Status != StatusInFlight && p.Status != StatusCompleted:
		return fmt.Errorf("idem: unknown ListKeysParams.Status %q: want %q or %q", p.Status, StatusInFlight, StatusCompleted)
	}
	return nil
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
	// LockTimeout is the service's lease length ([Config.LockTimeout]),
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

// Validate reports whether a store can release a key with p.
func (p ReleaseKeyParams) Validate() error {
	switch {
	case p.Now.IsZero():
		return errors.New("idem: ReleaseKeyParams.Now is required")
	case p.LockTimeout <= 0:
		return errors.New("idem: ReleaseKeyParams.LockTimeout must be positive")
	}
	return nil
}

// Check decides a release of rec, the key as the store read it: nil when
// the release may go ahead. Stores call it between reading the key and
// changing it, and change it only if its token is still rec.Token.
func (p ReleaseKeyParams) Check(rec *Record) error {
	switch {
	case rec.Status == StatusCompleted:
		return ErrKeyCompleted
	case p.Force || rec.LockedAt.IsZero():
		return nil
	}
	if expires := rec.LeaseEnd(p.LockTimeout); p.Now.Before(expires) {
		return &LeaseLiveError{LockedAt: rec.LockedAt, Expires: expires}
	}
	return nil
}

// CheckDelete reports whether an operator may delete rec
// ([KeyAdmin.DeleteKey]): only a completed key, never one in flight, whose
// holder may still be running the request. Every store asks it.
func CheckDelete(rec *Record) error {
	if rec.Status != StatusCompleted {
		return ErrKeyInFlight
	}
	return nil
}

// Errors of [KeyReader] and [KeyAdmin].
var (
	// ErrKeyNotFound means the store holds no key for the scope.
	ErrKeyNotFound = errors.New("idem: no such key")
	// ErrKeyCompleted means a release found the key completed: freeing it
	// would let the operation run a second time.
	ErrKeyCompleted = errors.New("idem: the key is completed; releasing it would allow a second execution")
	// ErrKeyInFlight means a delete found the key started: release it.
	ErrKeyInFlight = errors.New("idem: the key is in flight; release it instead of deleting it")
	// ErrKeyChanged means the key changed between the store's read and its
	// write, as when a request took it over or completed it: look again.
	ErrKeyChanged = errors.New("idem: the key changed while it was being released")
	// ErrLeaseLive is wrapped by [LeaseLiveError].
	ErrLeaseLive = errors.New("idem: the key's lease is live")
)

// LeaseLiveError is returned by a release without Force of a key whose
// holder's lease has not expired: its holder may still be running.
type LeaseLiveError struct {
	LockedAt time.Time // when the holder claimed the key
	Expires  time.Time // when its lease expires
}

func (e *LeaseLiveError) Error() string {
	return fmt.Sprintf("idem: the key's lease is live: claimed at %s, expires at %s", e.LockedAt.Format(time.RFC3339), e.Expires.Format(time.RFC3339))
}

// Unwrap returns ErrLeaseLive.
func (e *LeaseLiveError) Unwrap() error { return ErrLeaseLive }

// KeyDigest is the short digest of a key that idem writes to logs in place
// of the key: operators find a key's log lines by it.
func KeyDigest(key string) string { return keyDigest(key) }

// Readier reports whether a store can serve requests, for [NewReadyHandler].
// idempg and idemsqlite implement it.
type Readier interface {
	// Ready returns nil when the store answers and its schema is at the
	// version this build needs, an error wrapping [ErrSchemaVersion] when it
	// is not, and another error when the store cannot be reached.
	Ready(ctx context.Context) error
}

// ErrSchemaVersion is wrapped by [SchemaVersionError].
var ErrSchemaVersion = errors.New("idem: the store's schema is not at the version this build needs")

// SchemaVersionError says that a store's schema is older than this build
// needs: migrations have not been applied.
type SchemaVersionError struct {
	Have, Want int
}

func (e *SchemaVersionError) Error() string {
	return fmt.Sprintf("idem: the store's schema is at version %d and this build needs %d: apply the migrations", e.Have, e.Want)
}

// Unwrap returns ErrSchemaVersion.
func (e *SchemaVersionError) Unwrap() error { return ErrSchemaVersion }
