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
//   - forget-declines: the key of a declined payment is deleted right
//     after its 402 commits: a retry charges the card again.
//   - unlocked-overdraft: a transfer checks its source's balance on a read
//     of its own, outside the key's transaction and without a row lock,
//     from a copy of the balances each instance refreshes at most every
//     staleBalances (as a read from a lagging replica is), then moves the
//     money without looking again; and the accounts table has no CHECK on
//     the balance (as on MySQL before 8.0.16, which parsed CHECK and
//     ignored it): transfers from one account that each fit the balance
//     read, but not together, all move, and the balance goes negative.
//   - debit-before-402: a transfer moves the money and records itself
//     first, and checks the balance it locked afterwards, answering 402
//     insufficient-funds when it was short, without undoing the move; the
//     402 is a definitive answer, stored with the key in the request's
//     transaction, and the move commits with it. The accounts table has no
//     CHECK either: with it, PostgreSQL refuses the debit.
//   - forward-held, probe-unknown-forwards, retry-new-key: break idemproxy
//     instead (cmd/idemproxy/broken.go): its hold routes forward a key
//     whose outcome was unknown again; its probe routes forward a key
//     whose status URL did not say "not received"; its retry routes
//     forward a retry under a key of its own.
//
// Never build paymentsd with the tag for anything but the harness's tests.
package brokenstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/cmd/internal/payments"
	"github.com/idemkit/idem/idempg"
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
	// ForgetDeclines deletes a key right after its 402 commits: a
	// declined payment's answer is not kept, and a retry runs it again.
	ForgetDeclines = "forget-declines"
	// ForwardHeld breaks idemproxy, not paymentsd (cmd/idemproxy/broken.go):
	// its hold routes release a key whose forward's outcome is unknown, and
	// forward it again. paymentsd's store stays whole.
	ForwardHeld = "forward-held"
	// UnlockedOverdraft checks a transfer's balance outside its
	// transaction, without a lock, on a schema without the balance's CHECK.
	UnlockedOverdraft = "unlocked-overdraft"
	// DebitBefore402 moves a transfer's money before it checks the
	// balance, and answers 402 without undoing the move, on a schema
	// without the balance's CHECK.
	DebitBefore402 = "debit-before-402"
	// ProbeUnknownForwards breaks idemproxy (cmd/idemproxy/broken.go): its
	// probe routes take any answer of the status URL other than
	// "completed", and no answer at all, for "not received", and forward.
	ProbeUnknownForwards = "probe-unknown-forwards"
	// RetryNewKey breaks idemproxy (cmd/idemproxy/broken.go): its retry
	// routes forward a retry after an unknown outcome under a key of its
	// own, not the first forward's.
	RetryNewKey = "retry-new-key"
)

// ProxyBreak reports whether a break is idemproxy's, leaving paymentsd
// whole.
func ProxyBreak(mode string) bool {
	return mode == ForwardHeld || mode == ProbeUnknownForwards || mode == RetryNewKey
}

// Wrap returns store and repo broken as getenv(EnvBreak) says; with the
// variable unset it returns them as they are. The breaks need PostgreSQL:
// pool is the store's.
func Wrap(st idemstore.Store, repo payments.Repo, ledger payments.LedgerRepo, pool *pgxpool.Pool, getenv func(string) string) (idemstore.Store, payments.Repo, payments.LedgerRepo, error) {
	mode := getenv(EnvBreak)
	if mode == "" || ProxyBreak(mode) {
		return st, repo, ledger, nil
	}
	if pool == nil {
		return nil, nil, nil, errors.New("brokenstore: needs PostgreSQL")
	}
	switch mode {
	case SkipFencing, ReleaseAfterCommit, SharedCache, ForgetDeclines:
	case UnkeyedDebit:
		return st, repo, &unkeyedLedger{LedgerRepo: ledger, pool: pool}, nil
	case UnlockedOverdraft, DebitBefore402:
		if err := dropBalanceCheck(pool); err != nil {
			return nil, nil, nil, err
		}
		return st, repo, &overdraftLedger{LedgerRepo: ledger, pool: pool, debitFirst: mode == DebitBefore402, read: map[string]balanceRead{}}, nil
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

// dropBalanceCheck removes the accounts table's CHECK on the balance, the
// database's last guard against an overdraft: a schema that never had it.
func dropBalanceCheck(pool *pgxpool.Pool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := pool.Exec(ctx, `ALTER TABLE accounts DROP CONSTRAINT IF EXISTS accounts_balance_check`); err != nil {
		return fmt.Errorf("brokenstore: drop the balance's CHECK: %w", err)
	}
	return nil
}

// overdraftLedger moves a transfer's money in the key's transaction, but
// checks the balance wrongly: unlocked-overdraft on a read outside the
// transaction, before anything is locked, at most staleBalances old;
// debit-before-402 after the move.
type overdraftLedger struct {
	payments.LedgerRepo
	pool       *pgxpool.Pool
	debitFirst bool

	mu   sync.Mutex
	read map[string]balanceRead // unlocked-overdraft: by account id
}

// staleBalances is how old a balance unlocked-overdraft checks may be.
const staleBalances = time.Second

type balanceRead struct {
	currency string
	balance  int64
	at       time.Time
}

// readBalance returns the source's currency and balance as read outside
// the transaction, again only when the last read is staleBalances old.
func (l *overdraftLedger) readBalance(ctx context.Context, t *payments.Transfer) (string, int64, error) {
	key := t.ClientID + "\x00" + t.From
	l.mu.Lock()
	b, ok := l.read[key]
	l.mu.Unlock()
	if ok && time.Since(b.at) < staleBalances {
		return b.currency, b.balance, nil
	}
	err := l.pool.QueryRow(ctx, `SELECT currency, balance FROM accounts WHERE client_id = $1 AND id = $2`, t.ClientID, t.From).Scan(&b.currency, &b.balance)
	if err != nil {
		return "", 0, err
	}
	b.at = time.Now()
	l.mu.Lock()
	l.read[key] = b
	l.mu.Unlock()
	return b.currency, b.balance, nil
}

func (l *overdraftLedger) Move(ctx context.Context, t *payments.Transfer) error {
	tx, err := idempg.TxFromContext(ctx)
	if err != nil {
		return err
	}
	var balance int64
	if l.debitFirst {
		err = tx.QueryRow(ctx, `SELECT currency, balance FROM accounts WHERE client_id = $1 AND id = $2 FOR UPDATE`, t.ClientID, t.From).Scan(&t.Currency, &balance)
	} else {
		t.Currency, balance, err = l.readBalance(ctx, t)
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return &payments.TransferError{Param: "from", Err: payments.ErrAccountNotFound}
	case err != nil:
		return err
	case balance < t.Amount && !l.debitFirst:
		return payments.ErrInsufficientFunds
	}
	// The rows in id order, as the ledger locks them, so that two
	// transfers in opposite directions do not deadlock.
	first, firstBy, second, secondBy := t.From, -t.Amount, t.To, t.Amount
	if second < first {
		first, firstBy, second, secondBy = second, secondBy, first, firstBy
	}
	for _, u := range []struct {
		id string
		by int64
	}{{first, firstBy}, {second, secondBy}} {
		if _, err := tx.Exec(ctx, `UPDATE accounts SET balance = balance + $3 WHERE client_id = $1 AND id = $2`, t.ClientID, u.id, u.by); err != nil {
			return err
		}
	}
	if _, err := tx.Exec(ctx, `INSERT INTO transfers (id, client_id, from_account, to_account, amount, currency, created, idempotency_key)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, t.ID, t.ClientID, t.From, t.To, t.Amount, t.Currency, t.Created, t.IdempotencyKey); err != nil {
		return err
	}
	if balance < t.Amount {
		return payments.ErrInsufficientFunds // debit-before-402: moved already
	}
	return nil
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
	case s.mode == ReleaseAfterCommit && err == nil,
		s.mode == ForgetDeclines && err == nil && resp != nil && resp.StatusCode == 402:
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
