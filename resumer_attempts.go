package idem

import (
	"time"

	"github.com/idemkit/idem/idemstore"
)

// attemptKey names a key, made anew or not, in Resumer.attempts.
type attemptKey struct {
	scope   idemstore.Scope
	created int64 // CreatedAt in Unix nanoseconds
}

func attemptKeyOf(rec *idemstore.Record) attemptKey {
	return attemptKey{rec.Scope, rec.CreatedAt.UnixNano()}
}

// gaveUp forgets the attempts at keys past retention, which the purge
// deletes, and returns the number of keys given up on.
func (c *Resumer) gaveUp(now time.Time) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for k, tries := range c.attempts {
		switch {
		case idemstore.Expired(time.Unix(0, k.created), now, c.cfg.Retention):
			delete(c.attempts, k)
		case c.cfg.Resume.MaxAttempts >= 0 && tries >= c.cfg.Resume.MaxAttempts:
			n++
		}
	}
	return n
}

// attempt counts a run of rec's phases that did not finish it and reports
// whether that was its last: the resumer gives up on it.
func (c *Resumer) attempt(rec *idemstore.Record) (tries int, last bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := attemptKeyOf(rec)
	c.attempts[k]++
	return c.attempts[k], c.cfg.Resume.MaxAttempts >= 0 && c.attempts[k] >= c.cfg.Resume.MaxAttempts
}

// givenUp reports whether the resumer gave up on rec.
func (c *Resumer) givenUp(rec *idemstore.Record) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cfg.Resume.MaxAttempts >= 0 && c.attempts[attemptKeyOf(rec)] >= c.cfg.Resume.MaxAttempts
}

// finished forgets the attempts at rec, which is finished or gone.
func (c *Resumer) finished(rec *idemstore.Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.attempts, attemptKeyOf(rec))
}

// tries returns the runs of rec's phases that did not finish it.
func (c *Resumer) tries(rec *idemstore.Record) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.attempts[attemptKeyOf(rec)]
}
