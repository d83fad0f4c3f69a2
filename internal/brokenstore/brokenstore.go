// Package brokenstore breaks paymentsd's database on purpose, in the ways a
// faulty idempotency layer breaks, so that the chaos harness can show that
// its checker catches each one. It is compiled into paymentsd only with the
// build tag chaosbroken, and only the IDEM_CHAOS_BREAK environment variable
// turns a break on:
//
//   - skip-fencing: a holder whose lease was taken over commits its
//     payment anyway and answers 201, as a store without a fencing check
//     would: the key gets two payments.
//   - release-after-commit: the key is deleted right after its response
//     commits, as if it had been released: the next retry runs the payment
//     again.
//   - stale-replay: each instance replays the response it last tried to
//     store for a key from a local cache, read before its own commit lost
//     to a takeover: a replay that differs from the acknowledged answer.
//
// Never build paymentsd with the tag for anything but the harness's tests.
package brokenstore

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/payments"
)

// EnvBreak names the environment variable that chooses the break.
const EnvBreak = "IDEM_CHAOS_BREAK"

// Breaks are the values EnvBreak takes.
const (
	SkipFencing        = "skip-fencing"
	ReleaseAfterCommit = "release-after-commit"
	StaleReplay        = "stale-replay"
)

// Wrap returns store and repo broken as getenv(EnvBreak) says; with the
// variable unset it returns them as they are. The breaks need PostgreSQL:
// pool is the store's.
func Wrap(st idem.Store, repo payments.Repo, pool *pgxpool.Pool, getenv func(string) string) (idem.Store, payments.Repo, error) {
	mode := getenv(EnvBreak)
	if mode == "" {
		return st, repo, nil
	}
	if pool == nil {
		return nil, nil, errors.New("brokenstore: needs PostgreSQL")
	}
	switch mode {
	case SkipFencing, ReleaseAfterCommit, StaleReplay:
	default:
		return nil, nil, fmt.Errorf("brokenstore: unknown %s %q", EnvBreak, mode)
	}
	s := &store{inner: st, mode: mode, pool: pool, repo: repo, cache: map[idem.Scope]*idem.Response{}}
	return s, &brokenRepo{inner: repo}, nil
}

type store struct {
	inner idem.Store
	mode  string
	pool  *pgxpool.Pool
	repo  payments.Repo

	mu    sync.Mutex
	cache map[idem.Scope]*idem.Response // stale-replay: responses this process tried to store
}

func (s *store) Claim(ctx context.Context, p idem.ClaimParams) (idem.ClaimResult, error) {
	res, err := s.inner.Claim(ctx, p)
	if err != nil {
		return res, err
	}
	if res.Lease != nil {
		res.Lease = &lease{Lease: res.Lease, s: s, scope: p.Scope}
		return res, nil
	}
	if s.mode == StaleReplay && res.Record != nil {
		s.mu.Lock()
		cached := s.cache[p.Scope]
		s.mu.Unlock()
		if cached != nil {
			rec := *res.Record
			rec.Status, rec.Response = idem.StatusCompleted, cached
			res.Record = &rec
		}
	}
	return res, nil
}

type paymentBox struct{ p *payments.Payment }

type boxKey struct{}

type lease struct {
	idem.Lease
	s     *store
	scope idem.Scope
	box   paymentBox
}

func (l *lease) Context(ctx context.Context) context.Context {
	return l.Lease.Context(context.WithValue(ctx, boxKey{}, &l.box))
}

func (l *lease) Complete(ctx context.Context, resp *idem.Response) error {
	s := l.s
	if s.mode == StaleReplay {
		s.mu.Lock()
		s.cache[l.scope] = resp
		s.mu.Unlock()
	}
	err := l.Lease.Complete(ctx, resp)
	switch {
	case s.mode == SkipFencing && errors.Is(err, idem.ErrLeaseLost) && l.box.p != nil:
		// The fence said no; commit the payment as if it had said yes.
		if ierr := s.repo.Insert(context.WithoutCancel(ctx), l.box.p); ierr != nil {
			return err
		}
		return nil
	case s.mode == ReleaseAfterCommit && err == nil:
		_, _ = s.pool.Exec(context.WithoutCancel(ctx),
			`DELETE FROM idempotency_keys WHERE client_id = $1 AND idempotency_key = $2`, l.scope.ClientID, l.scope.Key)
	}
	return err
}

// repo remembers the payment a request inserts, for skip-fencing.
type brokenRepo struct{ inner payments.Repo }

func (r *brokenRepo) Insert(ctx context.Context, p *payments.Payment) error {
	if box, ok := ctx.Value(boxKey{}).(*paymentBox); ok {
		box.p = p
	}
	return r.inner.Insert(ctx, p)
}

func (r *brokenRepo) Get(ctx context.Context, clientID, id string) (*payments.Payment, error) {
	return r.inner.Get(ctx, clientID, id)
}

func (r *brokenRepo) Count(ctx context.Context, clientID, key string) (int, error) {
	return r.inner.Count(ctx, clientID, key)
}
