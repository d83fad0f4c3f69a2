// Package deadline bounds calls by a fixed timeout without a runtime
// timer for each: a Queue makes contexts whose deadline is its timeout
// after they were made, keeps them in the order they were made in, which
// is the order of their deadlines, and runs one timer, for the earliest.
//
// context.WithTimeout costs more than its allocations when requests come
// one after another: a timer that becomes the earliest of its scheduler's
// heap wakes the thread that waits in the network poller, so that it
// shortens its wait (a write to an eventfd, and a thread woken). Each
// request's first timer does, since the last request's were stopped and
// removed. A Queue's timer stays armed while contexts come and go: under
// load it fires about once a timeout, finds the head still in time (the
// contexts it was armed for are done), and is armed again for the head.
// See "Timers" in docs/benchmarks.md for what it saves.
//
// A Context is done when its parent is, when its deadline passes (Err is
// then context.DeadlineExceeded), or when it is stopped (context.Canceled).
// It implements the AfterFunc method that the context package looks for, so
// that contexts derived from it (context.WithCancel, context.AfterFunc, as
// pgx's connections use) start no goroutine to watch it.
package deadline

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Queue makes Contexts that are done its timeout after they are made.
type Queue struct {
	timeout time.Duration
	timer   *time.Timer // runs expire

	mu         sync.Mutex
	head, tail *Context // the queued contexts, earliest deadline first
	// armed reports that the timer is set, for the head's deadline or
	// earlier; whenever the queue holds a context, it is.
	armed bool
}

// NewQueue returns a Queue of contexts that are done timeout after they
// are made. A Queue's timer holds no reference to it while it is not
// armed, so an unused Queue is collected.
func NewQueue(timeout time.Duration) *Queue {
	q := &Queue{timeout: timeout}
	q.timer = time.AfterFunc(time.Hour, q.expire)
	q.timer.Stop()
	return q
}

// WithTimeout returns a context that is done when parent is, or q's timeout
// from now, or when it is stopped, whichever comes first. Stop it as soon
// as the call it bounds returns, as with context.WithTimeout's cancel.
func (q *Queue) WithTimeout(parent context.Context) *Context {
	c := &Context{parent: parent, q: q}
	q.mu.Lock()
	// Read under the lock, so that the queue's deadlines never decrease.
	c.deadline = time.Now().Add(q.timeout)
	c.prev = q.tail
	if q.tail != nil {
		q.tail.next = c
	} else {
		q.head = c
	}
	q.tail = c
	c.queued = true
	if !q.armed {
		// The queue was empty: c is its head.
		q.armed = true
		q.timer.Reset(q.timeout)
	}
	q.mu.Unlock()
	return c
}

// expire cancels the contexts whose deadline has passed, and arms the timer
// for the first that is still in time.
func (q *Queue) expire() {
	var due *Context // linked by next, once out of the queue
	q.mu.Lock()
	now := time.Now()
	for c := q.head; c != nil && !c.deadline.After(now); c = q.head {
		q.unlink(c)
		c.next = due
		due = c
	}
	q.armed = q.head != nil
	if q.armed {
		q.timer.Reset(q.head.deadline.Sub(now))
	}
	q.mu.Unlock()
	for due != nil {
		c := due
		due, c.next = c.next, nil
		c.cancel(context.DeadlineExceeded)
	}
}

// remove takes c out of the queue, if it is still there.
func (q *Queue) remove(c *Context) {
	q.mu.Lock()
	if c.queued {
		q.unlink(c)
	}
	q.mu.Unlock()
}

// unlink takes c, which is queued, out of the queue. It leaves the timer
// armed: when it fires, it is armed again for the head, if any.
func (q *Queue) unlink(c *Context) {
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		q.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		q.tail = c.prev
	}
	c.prev, c.next, c.queued = nil, nil, false
}

// Context is a context.Context made by Queue.WithTimeout.
type Context struct {
	parent   context.Context
	q        *Queue
	deadline time.Time

	// The queue's list; under q.mu.
	prev, next *Context
	queued     bool

	mu   sync.Mutex
	done chan struct{} // made by the first Done; closed by cancel
	err  error         // set once, by cancel
	// afters are the functions that AfterFunc registered, run by cancel.
	afters []*afterFunc
	// watching reports that c watches its parent: Done or AfterFunc was
	// called. Until it does, Err asks the parent.
	watching   bool
	stopParent func() bool // stops the watch of the parent
}

// afterFunc is a function registered by Context.AfterFunc.
type afterFunc struct{ f func() }

// closedchan is the Done of a Context canceled before Done was called.
var closedchan = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// Deadline returns the earlier of c's deadline and its parent's.
func (c *Context) Deadline() (time.Time, bool) {
	if d, ok := c.parent.Deadline(); ok && d.Before(c.deadline) {
		return d, true
	}
	return c.deadline, true
}

// Done returns a channel that is closed when c is done.
func (c *Context) Done() <-chan struct{} {
	c.mu.Lock()
	if c.done == nil {
		c.done = make(chan struct{})
	}
	d := c.done
	watch := !c.watching && c.err == nil
	c.watching = true
	c.mu.Unlock()
	if watch {
		c.watch()
	}
	return d
}

// Err returns nil while c is not done, then why it is done.
func (c *Context) Err() error {
	c.mu.Lock()
	err, watching := c.err, c.watching
	c.mu.Unlock()
	if err != nil || watching {
		return err
	}
	if err := c.parent.Err(); err != nil {
		c.cancel(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Value returns the parent's value for key. It hides the parent's
// cancellation from the context package, as context.WithoutCancel's
// context does, so that context.Cause(c) is c's own (c.Err()) and a
// context derived from c watches c, not a context above it.
func (c *Context) Value(key any) any {
	if key == cancelCtxKey {
		return nil
	}
	return c.parent.Value(key)
}

// cancelCtxKey is the key under which the context package looks for the
// cancelable context that a context derives from, learnt from
// context.Cause, which asks a done context for it.
var cancelCtxKey = func() any {
	var p keyProbe
	_ = context.Cause(&p)
	return p.key
}()

// keyProbe is a done context that records the key it was asked a value
// for.
type keyProbe struct {
	context.Context
	key any
}

func (p *keyProbe) Value(key any) any { p.key = key; return nil }
func (*keyProbe) Err() error          { return context.Canceled }

// AfterFunc arranges to call f in its own goroutine once c is done, and
// returns a function that stops that, reporting whether it did. It is the
// method that context.AfterFunc, and the context package for a context
// derived from c, use in place of a goroutine of their own.
func (c *Context) AfterFunc(f func()) (stop func() bool) {
	a := &afterFunc{f: f}
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	c.afters = append(c.afters, a)
	watch := !c.watching
	c.watching = true
	c.mu.Unlock()
	if watch {
		c.watch()
	}
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		i := slices.Index(c.afters, a)
		if i < 0 {
			return false // run, or stopped before
		}
		c.afters = slices.Delete(c.afters, i, i+1)
		return true
	}
}

// watch cancels c when its parent is done.
func (c *Context) watch() {
	if c.parent.Done() == nil {
		return
	}
	if err := c.parent.Err(); err != nil {
		c.cancel(err) // at once, rather than from AfterFunc's goroutine
		return
	}
	stop := context.AfterFunc(c.parent, func() { c.cancel(c.parent.Err()) })
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		stop()
		return
	}
	c.stopParent = stop
	c.mu.Unlock()
}

// Stop cancels c, if it is not done yet, and takes it out of its queue.
func (c *Context) Stop() { c.cancel(context.Canceled) }

// cancel makes c done with err, unless it is done already.
func (c *Context) cancel(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	if c.done == nil {
		c.done = closedchan
	} else {
		close(c.done)
	}
	afters, stop := c.afters, c.stopParent
	c.afters, c.stopParent = nil, nil
	c.mu.Unlock()
	for _, a := range afters {
		go a.f()
	}
	if stop != nil {
		stop()
	}
	c.q.remove(c)
}
