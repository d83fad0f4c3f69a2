package idemtest

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/idemkit/idem/idemstore"
)

var _ idemstore.KeyAdmin = (*MemoryStore)(nil)

// GetKey implements [idemstore.KeyReader].
func (s *MemoryStore) GetKey(ctx context.Context, scope idemstore.Scope) (*idemstore.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.records[scope]
	if !ok {
		return nil, fmt.Errorf("idemtest: get key: %w", idemstore.ErrKeyNotFound)
	}
	return cloneRecord(rec), nil
}

// ListKeys implements [idemstore.KeyAdmin].
func (s *MemoryStore) ListKeys(ctx context.Context, p idemstore.ListKeysParams) ([]*idemstore.Record, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("idemtest: list keys: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p = p.WithDefaults()
	s.mu.Lock()
	var out []*idemstore.Record
	for _, rec := range s.records {
		if (p.ClientID == "" || rec.Scope.ClientID == p.ClientID) &&
			(p.Status == "" || rec.Status == p.Status) &&
			(p.CreatedBefore.IsZero() || rec.CreatedAt.Before(p.CreatedBefore)) {
			c := cloneRecord(rec)
			if c.Response != nil && !p.WithBody {
				c.Response.Body = []byte{}
			}
			out = append(out, c)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b *idemstore.Record) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.Scope.ClientID, b.Scope.ClientID), cmp.Compare(a.Scope.Key, b.Scope.Key))
	})
	if len(out) > p.Limit {
		out = out[:p.Limit]
	}
	return out, nil
}

// ReleaseKey implements [idemstore.KeyAdmin].
func (s *MemoryStore) ReleaseKey(ctx context.Context, p idemstore.ReleaseKeyParams) (*idemstore.Record, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("idemtest: release key: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.records[p.Scope]
	if !ok {
		return nil, fmt.Errorf("idemtest: release key: %w", idemstore.ErrKeyNotFound)
	}
	if err := p.Check(rec); err != nil {
		return nil, fmt.Errorf("idemtest: release key: %w", err)
	}
	before := cloneRecord(rec)
	rec.Token++
	rec.LockedAt, rec.LeaseExpires = time.Time{}, time.Time{}
	return before, nil
}

// DeleteKey implements [idemstore.KeyAdmin].
func (s *MemoryStore) DeleteKey(ctx context.Context, scope idemstore.Scope) (*idemstore.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.records[scope]
	if !ok {
		return nil, fmt.Errorf("idemtest: delete key: %w", idemstore.ErrKeyNotFound)
	}
	if err := idemstore.CheckDelete(rec); err != nil {
		return nil, fmt.Errorf("idemtest: delete key: %w", err)
	}
	delete(s.records, scope)
	before := cloneRecord(rec)
	before.Response.Body = nil
	return before, nil
}
