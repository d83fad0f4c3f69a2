package chaos

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// A run stalls when its operations stop reaching a final answer although
// the database should be up: the harness lost its primary, or every
// instance hangs. Faults slow the traffic down, never for long: a pause
// or a network fault holds one instance or link for seconds, and the
// clients go on with the others. A database fault stops every instance,
// so the watch counts from its end.
const (
	// stallTimeout is how long the traffic may go without an operation
	// reaching its final answer, while no database fault is under way,
	// before the run ends as stalled.
	stallTimeout = 90 * time.Second
	// dbFaultTimeout is how long one database fault may last before the
	// run ends as stalled: a failover on a loaded machine takes seconds to
	// a minute (a base backup, a promotion, a standby catching up).
	dbFaultTimeout = 5 * time.Minute
	// stallPoll is how often the watch looks at the history.
	stallPoll = 5 * time.Second
)

// stallWatch tells a stalled run from a slow one. The database faults
// report when they begin and end; the watch looks at how many operations
// have a final answer.
type stallWatch struct {
	mu      sync.Mutex
	dbKind  FaultKind // the database fault under way
	dbSince time.Time // when it began; zero when none is under way
	dbUp    time.Time // when the last database fault ended
	answers int       // operations with a final answer at the last look
	moved   time.Time // when answers last grew, or the traffic started
}

func (w *stallWatch) startAt(t time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.moved = t
}

// dbBegin records that a database fault of kind began at t.
func (w *stallWatch) dbBegin(kind FaultKind, t time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.dbKind, w.dbSince = kind, t
}

// dbEnd records that the database fault under way ended at t.
func (w *stallWatch) dbEnd(t time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.dbSince, w.dbUp = time.Time{}, t
}

// look records that answers operations have a final answer at now, and
// returns why the run is stalled, or "" while it is not.
func (w *stallWatch) look(now time.Time, answers int) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if answers > w.answers {
		w.answers, w.moved = answers, now
	}
	if !w.dbSince.IsZero() {
		if d := now.Sub(w.dbSince); d >= dbFaultTimeout {
			return fmt.Sprintf("a %s fault has been under way for %s", w.dbKind, d.Round(time.Second))
		}
		return ""
	}
	from := w.moved
	if w.dbUp.After(from) {
		from = w.dbUp
	}
	if d := now.Sub(from); d >= stallTimeout {
		return fmt.Sprintf("no operation reached a final answer for %s (%d so far, the last %s ago), and no database fault was under way",
			d.Round(time.Second), w.answers, now.Sub(w.moved).Round(time.Second))
	}
	return ""
}

// watchStall looks at the traffic every stallPoll until ctx is done, and
// returns an error when it has stalled, saying what the primary's link
// reaches then.
func (h *harness) watchStall(ctx context.Context, start time.Time) error {
	h.stall.startAt(start)
	t := time.NewTicker(stallPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		answers := 0
		for _, op := range h.history.Ops() {
			if _, final := op.snapshot(); final != nil {
				answers++
			}
		}
		why := h.stall.look(time.Now(), answers)
		if why == "" {
			continue
		}
		return fmt.Errorf("chaos: the run stalled at %s: %s; %s", since(start), why, h.describePrimary(ctx))
	}
}

// describePrimary says whether the primary's link reaches the primary,
// for the stall's error.
func (h *harness) describePrimary(ctx context.Context) string {
	if h.cluster == nil || h.mariadb != nil || h.net == nil || h.net.primary == nil {
		return "the database is not PostgreSQL"
	}
	if !h.dbMu.TryLock() {
		return "a database fault holds the primary"
	}
	defer h.dbMu.Unlock()
	where := fmt.Sprintf("the primary's link %s forwards to %s, the primary is 127.0.0.1:%d",
		h.net.primary.addr(), h.net.primaryTarget(), h.cluster.Port())
	if err := h.probePrimary(ctx); err != nil {
		return where + ", and a connection through the link fails: " + err.Error()
	}
	return where + ", and it answers through the link: the instances are stuck"
}
