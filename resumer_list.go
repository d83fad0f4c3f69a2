package idem

import (
	"context"
	"time"

	"github.com/idemkit/idem/idemstore"
)

// startedWindow is how far back before the lock timeout a pass looks for
// keys that passed no recovery point: three intervals, a minute at least,
// so that a pass that was skipped or failed does not lose them, while each
// pass reads a bounded range of recent keys.
func startedWindow(interval time.Duration) time.Duration {
	return max(3*interval, time.Minute)
}

// sweepPasses is how many passes the sweep takes to read the keys within
// Retention, when that makes a span longer than the recent range.
const sweepPasses = 360

// listSweep lists the unfinished keys of the sweep's next span of creation
// times, up to recent, and moves the sweep on: past the span, or past the
// newest key listed when the listing was full; back to the start of
// Retention once it reached recent. A failed listing leaves it where it
// was.
func (c *Resumer) listSweep(ctx context.Context, now, recent time.Time, limit int) ([]*idemstore.Record, error) {
	floor := now.Add(-c.cfg.Retention)
	c.mu.Lock()
	after := c.sweep
	c.mu.Unlock()
	if after.Before(floor) || !after.Before(recent) {
		after = floor
	}
	until := after.Add(c.span)
	if until.After(recent) {
		until = recent
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.StoreTimeout)
	defer cancel()
	// Retention bounds the listing from below, at the span's start.
	keys, err := c.store.Unfinished(ctx, idemstore.UnfinishedParams{
		Now: now, LockTimeout: c.cfg.LockTimeout, Retention: now.Sub(after), Limit: limit,
		Started: c.started, CreatedUntil: until,
	})
	if err != nil {
		return nil, err
	}
	next := until
	if len(keys) >= limit && len(keys) > 0 {
		next = keys[len(keys)-1].CreatedAt
	}
	c.mu.Lock()
	c.sweep = next
	c.mu.Unlock()
	return keys, nil
}

// appendNew appends to keys the records of more that it does not hold.
func appendNew(keys, more []*idemstore.Record) []*idemstore.Record {
	type id struct {
		scope   idemstore.Scope
		created int64
	}
	seen := make(map[id]bool, len(keys))
	for _, k := range keys {
		seen[id{k.Scope, k.CreatedAt.UnixNano()}] = true
	}
	for _, k := range more {
		if !seen[id{k.Scope, k.CreatedAt.UnixNano()}] {
			keys = append(keys, k)
		}
	}
	return keys
}
