package idem

import (
	"time"

	"github.com/idemkit/idem/idemstore"
)

// attemptKey names a key, made anew or not, in Completer.attempts.
type attemptKey struct {
	scope   idemstore.Scope
	created int64 // CreatedAt in Unix nanoseconds
}

func attemptKeyOf(rec *idemstore.Record) attemptKey {
	return attemptKey{rec.Scope, rec.CreatedAt.UnixNano()}
}

// gaveUp forgets the attempts at keys past retention, which the purge
// deletes, and returns the number of keys given up on.
func (c *Completer) gaveUp(now time.Time) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for k, tries := range c.attempts {
		switch {
		case idemstore.Expired(time.Unix(0, k.created), now, c.cfg.Retention):
			delete(c.attempts, k)
		case c.cfg.MaxAttempts >= 0 && tries >= c.cfg.MaxAttempts:
			n++
		}
	}
	return n
}

// attempt counts a run of rec's phases that did not finish it and reports
// whether that was its last: the completer gives up on it.
func (c *Completer) attempt(rec *idemstore.Record) (tries int, last bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := attemptKeyOf(rec)
	c.attempts[k]++
	return c.attempts[k], c.cfg.MaxAttempts >= 0 && c.attempts[k] >= c.cfg.MaxAttempts
}

// givenUp reports whether the completer gave up on rec.
func (c *Completer) givenUp(rec *idemstore.Record) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cfg.MaxAttempts >= 0 && c.attempts[attemptKeyOf(rec)] >= c.cfg.MaxAttempts
}

// finished forgets the attempts at rec, which is finished or gone.
func (c *Completer) finished(rec *idemstore.Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.attempts, attemptKeyOf(rec))
}
