// Package deadline is the context of the store calls of a request: that of
// context.WithDeadline, without its timer for the calls that never wait.
package deadline

import (
	"context"
	"sync"
	"time"
)

// Context is the context of [context.WithDeadline], for the store
// calls of a request, made cheap for the calls that never wait on it.
// context.WithDeadline starts a timer and allocates it with the context,
// on every request; most store calls (an in-memory store, a claim that
// finds a replay) only ask Err, which needs no timer: it compares the
// clock with the deadline. Context makes the real context, with its
// timer, only when Done or Value is first called, and until then answers
// Err itself.
//
// Value makes the real context too, so that context.Cause, which finds
// the nearest canceller through Value, sees this context's own rather
// than its parent's, and contexts derived from it (WithCancel, AfterFunc)
// register with the real one instead of starting a goroutine.
//
// Err is sticky: once it has returned an error it returns that error, and
// Done is closed (or is made closed) from then on.
type Context struct {
	parent   context.Context
	deadline time.Time

	mu     sync.Mutex
	real   context.Context    // made by materialize
	cancel context.CancelFunc // cancels real
	err    error              // the first error Err returned; see Stop
}

// New returns a context that parent's cancellation and the
// deadline end, as context.WithDeadline(parent, deadline) does. Call Stop
// when the work under it is done.
func New(parent context.Context, deadline time.Time) *Context {
	return &Context{parent: parent, deadline: deadline}
}

// Start makes c, a zero Context that the caller allocated with something
// else, what New(parent, deadline) returns. It must not be called on a
// Context that was started or used.
func (c *Context) Start(parent context.Context, deadline time.Time) *Context {
	c.parent, c.deadline = parent, deadline
	return c
}

// Deadline returns the earlier of the parent's deadline and its own.
func (c *Context) Deadline() (time.Time, bool) {
	if d, ok := c.parent.Deadline(); ok && d.Before(c.deadline) {
		return d, true
	}
	return c.deadline, true
}

func (c *Context) Done() <-chan struct{} { return c.materialize().Done() }

func (c *Context) Value(key any) any { return c.materialize().Value(key) }

func (c *Context) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = c.check()
	}
	return c.err
}

// check returns the error that ends the context now, or nil. The caller
// holds mu.
func (c *Context) check() error {
	if c.real != nil {
		return c.real.Err()
	}
	if err := c.parent.Err(); err != nil {
		return err
	}
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// materialize returns the real context, made on the first call: one
// already ended with the error Err returned, when it returned one, and
// otherwise context.WithDeadline's. It carries the parent's values.
func (c *Context) materialize() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.real != nil {
		return c.real
	}
	if c.err != nil {
		// Ended with c.err, whatever the parent does: without its
		// cancellation, which may have come since and says otherwise.
		real, cancel := context.WithCancelCause(context.WithoutCancel(c.parent))
		cancel(c.err)
		c.real, c.cancel = real, func() {}
		return real
	}
	c.real, c.cancel = context.WithDeadline(c.parent, c.deadline)
	return c.real
}

// Stop ends the context, as the CancelFunc of context.WithTimeout does,
// and releases the real context's timer if it was made.
func (c *Context) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.real != nil:
		c.cancel()
	case c.err == nil:
		c.err = context.Canceled
	}
}
