package idemstore

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"time"
)

// The key's state machine, and every rule a store decides by. Each store
// (idempg, idemsqlite, idemtest's memory store) calls these predicates, in
// Go or in SQL that says the same, and never restates them; the
// conformance suites in idemtest check that it does.
//
//	                 claim (insert, token 1)
//	   (no row) ───────────────────────────────▶ started ──── Complete (fenced) ───▶ completed
//	      ▲                                      │   ▲                                 │
//	      │   Release (token matches)            │   │ takeover: lease expired,        │ replay on every
//	      ├──────────────────────────────────────┘   │ same request hash, token+1      │ matching retry
//	      │                                          └─────────                        │
//	      │   retention passed (claim replaces the row, or the purge deletes it)       │
//	      └────────────────────────────────────────────────────────────────────────────┘
//
// A key is [StatusInFlight] ("started" in the stores' rows) from its claim
// until its response is stored, then [StatusCompleted]. Its recovery
// point ([RecoveryStarted], then the phases' own names) is another thing:
// how far a phased operation under a started key has come.
//
//   - Retention: a key past it is gone, whatever a store still holds
//     ([Expired]); a claim replaces it ([ClaimParams.MayReplace]) and the
//     purge deletes it ([PurgeParams.Purges]).
//   - Leases: a holder's lease ends at [Record.LeaseEnd]; a claim of the
//     same request takes over a started key whose lease expired
//     ([ClaimParams.CanTakeOver]), with the next fencing token.
//   - Resuming: the keys a resumer picks up ([UnfinishedParams.Lists]).
//   - Operators: which keys a release may free ([ReleaseKeyParams.Check])
//     and which a delete may remove ([CheckDelete]).

// Expired reports whether a record created at created is past retention at now.
// Stores use it for the expiry rule of [ClaimParams.Retention].
func Expired(created, now time.Time, retention time.Duration) bool {
	return retention > 0 && !now.Before(created.Add(retention))
}

// LeaseExpired reports whether a lease taken at locked is past the lock
// timeout at now.
func LeaseExpired(locked, now time.Time, timeout time.Duration) bool {
	return !now.Before(locked.Add(timeout))
}

// MayReplace reports whether the claim p may have the key instead of
// answering with rec, the key it found: rec is past retention (see
// [Expired]), so the claim replaces it as if it were new, or p takes it
// over (see [ClaimParams.CanTakeOver]). Every store asks it, and answers
// with rec when it is false.
func (p ClaimParams) MayReplace(rec *Record) bool {
	return Expired(rec.CreatedAt, p.Now, p.Retention) || p.CanTakeOver(rec)
}

// CanTakeOver reports whether the claim p takes over rec, the key it found:
// in ModeTwoPhase, a started key whose lease expired at p.Now is taken over
// by a claim of the same request (the same request hash), which gets the
// next fencing token. A key past retention is not taken over but replaced
// (see [Expired]).
func (p ClaimParams) CanTakeOver(rec *Record) bool {
	return p.TwoPhase && rec.Status == StatusInFlight &&
		LeaseExpired(rec.LockedAt, p.Now, p.LockTimeout) && bytes.Equal(rec.RequestHash, p.RequestHash)
}

// LeaseExpires is when the lease that p takes expires: p.Now plus
// p.LockTimeout, or the zero time when p.LockTimeout is not positive.
// Stores record it with the claim, in the statement that sets the key's
// LockedAt, so that operators judge a lease by what its holder was given
// ([Record.LeaseExpires]).
func (p ClaimParams) LeaseExpires() time.Time {
	if p.LockTimeout <= 0 {
		return time.Time{}
	}
	return p.Now.Add(p.LockTimeout)
}

// LeaseEnd is when the lease of rec's current holder expires: the expiry
// the store recorded, or, for a lease without one (taken by a build of the
// store that did not record it), LockedAt plus lockTimeout. It is the zero
// time for a key without a holder.
func (r *Record) LeaseEnd(lockTimeout time.Duration) time.Time {
	switch {
	case r.LockedAt.IsZero():
		return time.Time{}
	case !r.LeaseExpires.IsZero():
		return r.LeaseExpires
	}
	return r.LockedAt.Add(lockTimeout)
}

// Validate reports whether a store can purge with p. Every store calls it
// first and returns its error, wrapped, without deleting anything.
func (p PurgeParams) Validate() error {
	switch {
	case p.Before.IsZero():
		return errPurgeNoBefore
	case p.BatchSize < 0:
		return errPurgeNegativeBatch
	case !ValidPurgeShare(p.Share):
		return errPurgeShare
	}
	return nil
}

// Purges reports whether a purge with p deletes rec, a key as its store
// keeps it: a key created before p.Before that is completed, started with
// a lease taken before p.Before (and so expired, since retention is longer
// than the lease), or started with no holder at all (LockedAt zero: it was
// released at a recovery point and its client never came back). Claims
// already treat such a key as absent. Stores use it for the rule of
// [PurgeLock.PurgeBatch].
func (p PurgeParams) Purges(rec *Record) bool {
	if !rec.CreatedAt.Before(p.Before) {
		return false
	}
	return rec.Status == StatusCompleted || rec.LockedAt.IsZero() || rec.LockedAt.Before(p.Before)
}

// Lists reports whether a store's Unfinished lists rec at p.Now, given its
// recovery point ("" for none): the rule every store follows.
func (p UnfinishedParams) Lists(rec *Record, point string) bool {
	if rec.Status != StatusInFlight || Expired(rec.CreatedAt, p.Now, p.Retention) ||
		!p.CreatedUntil.IsZero() && rec.CreatedAt.After(p.CreatedUntil) {
		return false
	}
	if point == RecoveryStarted || point == "" {
		return !rec.LockedAt.IsZero() && LeaseExpired(rec.LockedAt, p.Now, p.LockTimeout) &&
			rec.CreatedAt.After(p.StartedAfter) && slices.Contains(p.Started, rec.Method+" "+rec.Path)
	}
	return rec.LockedAt.IsZero() || LeaseExpired(rec.LockedAt, p.Now, p.LockTimeout)
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
