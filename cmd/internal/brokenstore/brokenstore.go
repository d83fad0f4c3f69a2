// Package brokenstore breaks paymentsd's database on purpose, in the ways a
// faulty idempotency layer breaks, so that the chaos harness can show that
// its checker catches each one. It is compiled into paymentsd only with the
// build tag chaosbroken, and only the IDEM_CHAOS_BREAK environment variable
// turns a break on:
//
//   - skip-fencing: a holder whose lease was taken over commits its
//     payment anyway, at the phase's checkpoint and at the completion, and
//     answers 201, as a store without a fencing check would: the key gets
//     two payments, and the stale holder's has no event.
//   - release-after-commit: the key is deleted right after its response
//     commits, as if it had been released: the next retry runs the payment
//     again.
//   - shared-cache: each instance keeps the responses it stored in a local
//     cache keyed by the Idempotency-Key alone, without the client, and
//     replays from it: a client whose key another client also used gets
//     that client's payment.
//   - unkeyed-debit: a transfer debits its source account in a statement
//     of its own, outside the key's transaction, before it moves the money
//     in it, as a handler with an effect outside its transaction does: a
//     run that is discarded (a duplicate answered from the key, a rerun
//     after a conflict) or rolled back still takes the money, and the
//     bank's total falls. (A cache of what a stale holder tried to
//     store no longer hurts: a payment's phases resume the same payment,
//     so a stale holder's answer is the stored one.)
//
// Never build paymentsd with the tag for anything but the harness's tests.
package brokenstore

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/cmd/internal/payments"
	"github.com/idemkit/idem/idemstore"
)

// EnvBreak names the environment variable that chooses the break.
const EnvBreak = "IDEM_CHAOS_BREAK"

// Breaks are the values EnvBreak takes.
const (
	SkipFencing        = "skip-fencing"
	ReleaseAfterCommit = "release-after-commit"
	SharedCache        = "shared-cache"
	UnkeyedDebit       = "unkeyed-debit"
	// ForwardHeld breaks idemproxy, not paymentsd (cmd/idemproxy/broken.go):
	// its hold routes release a key whose forward's outcome is unknown, and
	// forward it again. paymentsd's store stays whole.
	ForwardHeld = "forward-held"
)

// Wrap returns store and repo broken as getenv(EnvBreak) says; with the
// variable unset it returns them as they are. The breaks need PostgreSQL:
// pool is the store's.
func Wrap(st idemstore.Store, repo payments.Repo, ledger payments.LedgerRepo, pool *pgxpool.Pool, getenv func(string) string) (idemstore.Store, payments.Repo, payments.LedgerRepo, error) {
	mode := getenv(EnvBreak)
	if mode == "" || mode == ForwardHeld {
		return st, repo, ledger, nil
	}
	if pool == nil {
		return nil, nil, nil, errors.New("brokenstore: needs PostgreSQL")
	}
	switch mode {
	case SkipFencing, ReleaseAfterCommit, SharedCache:
	case UnkeyedDebit:
		return st, repo, &unkeyedLedger{LedgerRepo: ledger, pool: pool}, nil
	default:
		return nil, nil, nil, fmt.Errorf("brokenstore: unknown %s %q", EnvBreak, mode)
	}
	s := &store{inner: st, mode: mode, pool: pool, cache: map[string]*idemstore.Response{}}
	return s, &brokenRepo{inner: repo}, ledger, nil
}

// unkeyedLedger debits a transfer's source on the pool, in a transaction
// of its own, before the transfer moves the money in the key's.
type unkeyedLedger struct {
	payments.LedgerRepo
	pool *pgxpool.Pool
}

func (l *unkeyedLedger) Move(ctx context.Context, t *payments.Transfer) error {
	if _, err := l.pool.Exec(ctx, `UPDATE accounts SET balance = balance - $2 WHERE id = $1 AND balance >= $2`, t.From, t.Amount); err != nil {
		return err
	}
	return l.LedgerRepo.Move(ctx, t)
}

type store struct {
	inner idemstore.Store
	mode  string
	pool  *pgxpool.Pool

	mu    sync.Mutex
	cache map[string]*idemstore.Response // shared-cache: responses this process stored, by key alone
}

func (s *store) Claim(ctx context.Context, p idemstore.ClaimParams) (idemstore.ClaimResult, error) {
	res, err := s.inner.Claim(ctx, p)
	if err != nil {
		return res, err
	}
	if res.Lease != nil {
		res.Lease = &lease{Lease: res.Lease, s: s, scope: p.Scope}
		return res, nil
	}
	if s.mode == SharedCache && res.Record != nil {
		s.mu.Lock()
		cached := s.cache[p.Scope.Key]
		s.mu.Unlock()
		if cached != nil {
			rec := *res.Record
			rec.Status, rec.Response = idemstore.StatusCompleted, cached
			res.Record = &rec
		}
	}
	return res, nil
}

// paymentBox is what a lease's phases wrote to the payments table, for
// skip-fencing to commit anyway.
type paymentBox struct {
	p      *payments.Payment // inserted by this lease's request
	status string            // set by Settle
	saved  bool              // p is committed
}

type boxKey struct{}

type lease struct {
	idemstore.Lease
	s     *store
	scope idemstore.Scope
	box   paymentBox
}

var _ idemstore.RecoveryLease = (*lease)(nil)

// Recovery passes through: payments run by phases, which need it.
func (l *lease) Recovery(ctx context.Context) (idemstore.Recovery, error) {
	rl, ok := l.Lease.(idemstore.RecoveryLease)
	if !ok {
		return idemstore.Recovery{}, fmt.Errorf("brokenstore: recovery: %w", idemstore.ErrNoRecovery)
	}
	return rl.Recovery(ctx)
}

// Checkpoint is a phase's fence. skip-fencing ignores it: a phase whose
// checkpoint lost the lease commits its payment anyway, and the holder
// goes on as if it still held the key.
func (l *lease) Checkpoint(ctx context.Context, r idemstore.Recovery) error {
	rl, ok := l.Lease.(idemstore.RecoveryLease)
	if !ok {
		return fmt.Errorf("brokenstore: checkpoint: %w", idemstore.ErrNoRecovery)
	}
	err := rl.Checkpoint(ctx, r)
	switch {
	case err == nil:
		l.box.saved = l.box.p != nil
	case l.s.mode == SkipFencing && errors.Is(err, idemstore.ErrLeaseLost) && l.commitAnyway(ctx) == nil:
		return nil
	}
	return err
}

// commitAnyway writes the payment of the lease's request outside its
// rolled-back transaction: inserted if no checkpoint committed it, with
// the status Settle gave it.
func (l *lease) commitAnyway(ctx context.Context) error {
	b := &l.box
	if b.p == nil {
		return errors.New("brokenstore: no payment to commit")
	}
	ctx = context.WithoutCancel(ctx)
	p := *b.p
	if b.status != "" {
		p.Status = b.status
	}
	if !b.saved {
		if _, err := l.s.pool.Exec(ctx, payments.PostgresInsert,
			p.ID, p.ClientID, p.Amount, p.Currency, p.Customer, p.Description, p.Status, p.Created, p.IdempotencyKey); err != nil {
			return err
		}
		b.saved = true
		return nil
	}
	_, err := l.s.pool.Exec(ctx, `UPDATE payments SET status = $1 WHERE client_id = $2 AND id = $3`, p.Status, p.ClientID, p.ID)
	return err
}

func (l *lease) Context(ctx context.Context) context.Context {
	return l.Lease.Context(context.WithValue(ctx, boxKey{}, &l.box))
}

func (l *lease) Complete(ctx context.Context, resp *idemstore.Response) error {
	s := l.s
	err := l.Lease.Complete(ctx, resp)
	switch {
	case s.mode == SharedCache && err == nil:
		s.mu.Lock()
		s.cache[l.scope.Key] = resp
		s.mu.Unlock()
	case s.mode == SkipFencing && errors.Is(err, idemstore.ErrLeaseLost) && l.box.p != nil:
		// The fence said no; commit the payment as if it had said yes.
		if cerr := l.commitAnyway(ctx); cerr != nil {
			return err
		}
		return nil
	case s.mode == ReleaseAfterCommit && err == nil:
		_, _ = s.pool.Exec(context.WithoutCancel(ctx),
			`DELETE FROM idempotency_keys WHERE client_id = $1 AND idempotency_key = $2`, l.scope.ClientID, l.scope.Key)
	}
	return err
}

// repo remembers the payment a request inserts and settles, for
// skip-fencing.
type brokenRepo struct{ inner payments.Repo }

// settler is the part of payments' repositories that phases need.
type settler interface {
	Settle(ctx context.Context, clientID, id, status string) (*payments.Payment, error)
}

func (r *brokenRepo) Insert(ctx context.Context, p *payments.Payment) error {
	if box, ok := ctx.Value(boxKey{}).(*paymentBox); ok {
		box.p = p
	}
	return r.inner.Insert(ctx, p)
}

func (r *brokenRepo) Settle(ctx context.Context, clientID, id, status string) (*payments.Payment, error) {
	s, ok := r.inner.(settler)
	if !ok {
		return nil, fmt.Errorf("brokenstore: %T cannot settle a payment", r.inner)
	}
	p, err := s.Settle(ctx, clientID, id, status)
	if err != nil {
		return nil, err
	}
	if box, ok := ctx.Value(boxKey{}).(*paymentBox); ok && box.p != nil && box.p.ID == id {
		box.status = status
	}
	return p, nil
}

func (r *brokenRepo) Get(ctx context.Context, clientID, id string) (*payments.Payment, error) {
	return r.inner.Get(ctx, clientID, id)
}

func (r *brokenRepo) Count(ctx context.Context, clientID, key string) (int, error) {
	return r.inner.Count(ctx, clientID, key)
}
