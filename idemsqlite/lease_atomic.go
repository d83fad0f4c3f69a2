package idemsqlite

import (
	"context"
	"fmt"

	"github.com/idemkit/idem/idemstore"
)

var _ idemstore.Lease = (*atomicLease)(nil)

// atomicLease holds a key by the claim's transaction, left open for the
// handler on the write connection: the claimed row lives in it, so
// Complete stores the response and commits the row, the handler's writes
// and the response together, and Release rolls everything back. It keeps
// no recovery points: it is not an idemstore.RecoveryLease.
//
// Until the lease ends, the store's in-flight mark of the key answers its
// duplicates, since the claim's row is not visible outside the
// transaction.
type atomicLease struct {
	lease
}

// claimAtomic is the claim of ModeAtomic: claimKey's transaction stays
// open, with the lease; the in-flight mark stays with it (see landed).
func (s *Store) claimAtomic(ctx context.Context, p idemstore.ClaimParams) (idemstore.ClaimResult, error) {
	tx, l, rec, err := s.claimKey(ctx, p)
	if l == nil {
		s.landed(p.Scope)
		return idemstore.ClaimResult{Record: rec}, err
	}
	l.tx = &leaseTx{store: s, tx: tx}
	return idemstore.ClaimResult{Lease: &atomicLease{lease: *l}}, nil
}

// Complete implements [idemstore.Lease]: it stores resp in the claim's
// transaction and commits it.
func (l *atomicLease) Complete(ctx context.Context, resp *idemstore.Response) error {
	tx, ended := l.tx.end()
	if ended {
		return fmt.Errorf("idemsqlite: complete key: %w", idemstore.ErrLeaseEnded)
	}
	defer l.store.landed(l.scope)
	return l.complete(ctx, tx, resp)
}

// Release implements [idemstore.Lease]: it rolls the claim's transaction
// back, the claim with it.
func (l *atomicLease) Release(ctx context.Context) error {
	tx, ended := l.tx.end()
	if ended {
		return fmt.Errorf("idemsqlite: release key: %w", idemstore.ErrLeaseEnded)
	}
	defer l.store.landed(l.scope)
	return rollBack(tx)
}
