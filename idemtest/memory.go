package idemtest

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/idemkit/idem/idemoutbox"
	"github.com/idemkit/idem/idemstore"
)

var _ idemstore.Store = (*MemoryStore)(nil)

// MemoryStore is an [idemstore.Store] that keeps keys in memory. It has no
// business transactions; Lease.Context only carries the lease, so that
// outbox events enqueued in a handler (idemoutbox.Enqueue) are kept with
// Complete and dropped with Release, as a database store's would be. It is
// safe for concurrent use, and it follows the same rules as the database
// stores, including takeover of expired two-phase leases.
type MemoryStore struct {
	mu      sync.Mutex
	records map[idemstore.Scope]*idemstore.Record
	outbox  memoryOutbox // guarded by mu; see memory_outbox.go
	// purgeLocked is set while a PurgeLock of the store is held.
	purgeLocked bool
	// recovery holds the recovery point of started keys that passed one.
	recovery map[idemstore.Scope]idemstore.Recovery
}

// NewMemoryStore returns an empty store.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{records: make(map[idemstore.Scope]*idemstore.Record), recovery: make(map[idemstore.Scope]idemstore.Recovery)}
}

// Claim implements [idemstore.Store].
func (s *MemoryStore) Claim(ctx context.Context, p idemstore.ClaimParams) (idemstore.ClaimResult, error) {
	if err := ctx.Err(); err != nil {
		return idemstore.ClaimResult{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.records[p.Scope]
	if !ok || idemstore.Expired(rec.CreatedAt, p.Now, p.Retention) {
		// A key past retention is replaced as if new, but its token keeps
		// growing, so a holder of the old row can never complete the new one.
		token := int64(1)
		if ok {
			token = rec.Token + 1
		}
		buf := make([]byte, len(p.RequestHash)+len(p.RequestFields))
		rec = &idemstore.Record{
			Scope: p.Scope, Method: p.Method, Path: p.Path,
			RequestHash: carve(&buf, p.RequestHash), RequestFields: carve(&buf, p.RequestFields),
			Status: idemstore.StatusInFlight, CreatedAt: p.Now, LockedAt: p.Now, LeaseExpires: p.LeaseExpires(), Token: token,
			TraceContext: p.TraceContext,
		}
		s.records[p.Scope] = rec
		delete(s.recovery, p.Scope)
		return idemstore.ClaimResult{Lease: &memoryLease{store: s, scope: p.Scope, token: token, created: p.Now, twoPhase: p.TwoPhase}}, nil
	}
	if p.CanTakeOver(rec) {
		rec.Token++
		rec.LockedAt, rec.LeaseExpires, rec.TraceContext = p.Now, p.LeaseExpires(), p.TraceContext
		return idemstore.ClaimResult{Lease: &memoryLease{store: s, scope: p.Scope, token: rec.Token, created: rec.CreatedAt, takenOver: true, twoPhase: p.TwoPhase}}, nil
	}
	return idemstore.ClaimResult{Record: cloneRecord(rec)}, nil
}

// Purge deletes the keys that [idemstore.PurgeParams.Purges] and returns how
// many it deleted: those created before p.Before, except started keys
// whose lease may be live. It validates p as the database stores do; there
// are no batches.
func (s *MemoryStore) Purge(ctx context.Context, p idemstore.PurgeParams) (int64, error) {
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("idemtest: purge: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for scope, rec := range s.records {
		if p.Purges(rec) {
			delete(s.records, scope)
			delete(s.recovery, scope)
			n++
		}
	}
	return n, nil
}

// Get returns a copy of the record of a scope, for tests that inspect the store.
func (s *MemoryStore) Get(scope idemstore.Scope) (idemstore.Record, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.records[scope]
	if !ok {
		return idemstore.Record{}, false
	}
	return *cloneRecord(rec), true
}

// Len returns the number of keys held.
func (s *MemoryStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.records)
}

// cloneRecord copies r, so that neither the store nor its caller sees the
// other's changes. Its byte slices share one allocation, and its header
// values another (see cloneHeader).
func cloneRecord(r *idemstore.Record) *idemstore.Record {
	c := *r
	var body []byte
	if r.Response != nil {
		body = r.Response.Body
	}
	buf := make([]byte, len(r.RequestHash)+len(r.RequestFields)+len(body))
	c.RequestHash = carve(&buf, r.RequestHash)
	c.RequestFields = carve(&buf, r.RequestFields)
	if r.Response != nil {
		c.Response = &idemstore.Response{StatusCode: r.Response.StatusCode, Header: cloneHeader(r.Response.Header), Body: carve(&buf, body)}
	}
	return &c
}

func cloneResponse(r *idemstore.Response) *idemstore.Response {
	if r == nil {
		return nil
	}
	return &idemstore.Response{StatusCode: r.StatusCode, Header: cloneHeader(r.Header), Body: bytes.Clone(r.Body)}
}

// cloneHeader copies h, with the fields' values in one new slice, which
// has room for one value a field, as most fields have, and grows for
// those with more. Each field's values are capped, so that appending to
// one never writes into another's.
func cloneHeader(h http.Header) http.Header {
	values := make([]string, 0, len(h))
	c := make(http.Header, len(h))
	for name, v := range h {
		if v == nil {
			c[name] = nil
			continue
		}
		start := len(values)
		values = append(values, v...)
		c[name] = values[start:len(values):len(values)]
	}
	return c
}

// carve copies b to the front of *buf, which has room for it, and returns
// the copy, capped so that appending to it never writes into what follows,
// and nil when b is nil.
func carve(buf *[]byte, b []byte) []byte {
	if b == nil {
		return nil
	}
	n := copy(*buf, b)
	c := (*buf)[:n:n]
	*buf = (*buf)[n:]
	return c
}

type memoryLease struct {
	store *MemoryStore
	scope idemstore.Scope
	token int64
	// created is the CreatedAt of the record the lease claimed: with the
	// token, its fence, since a record made anew after this one was
	// deleted (purged, or by an operator) starts again at token 1.
	created   time.Time
	takenOver bool
	twoPhase  bool
	ended     bool // guarded by store.mu
	// events are the outbox events enqueued under the lease, kept by
	// Complete; guarded by store.mu.
	events []idemoutbox.Event
}

func (l *memoryLease) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, memoryLeaseKey{}, l)
}

func (l *memoryLease) Info() idemstore.LeaseInfo {
	return idemstore.LeaseInfo{Token: l.token, TakenOver: l.takenOver, CreatedAt: l.created}
}

// held returns the record if this lease still owns it. The caller holds mu.
func (l *memoryLease) held() *idemstore.Record {
	rec, ok := l.store.records[l.scope]
	if !ok || rec.Token != l.token || !rec.CreatedAt.Equal(l.created) || rec.Status != idemstore.StatusInFlight {
		return nil
	}
	return rec
}

func (l *memoryLease) Complete(ctx context.Context, resp *idemstore.Response) error {
	l.store.mu.Lock()
	defer l.store.mu.Unlock()
	if l.ended {
		return fmt.Errorf("idemtest: complete key: %w", idemstore.ErrLeaseEnded)
	}
	l.ended = true
	rec := l.held()
	if rec == nil {
		return idemstore.ErrLeaseLost
	}
	rec.Status = idemstore.StatusCompleted
	rec.Response = cloneResponse(resp)
	l.store.outbox.commit(l.events)
	delete(l.store.recovery, l.scope)
	return nil
}

func (l *memoryLease) Release(ctx context.Context) error {
	l.store.mu.Lock()
	defer l.store.mu.Unlock()
	if l.ended {
		return fmt.Errorf("idemtest: release key: %w", idemstore.ErrLeaseEnded)
	}
	l.ended = true
	if rec := l.held(); rec != nil {
		if _, passed := l.store.recovery[l.scope]; passed {
			// Keep the recovery point; the key has no holder now.
			rec.LockedAt, rec.LeaseExpires = time.Time{}, time.Time{}
			return nil
		}
		delete(l.store.records, l.scope)
	}
	return nil
}
