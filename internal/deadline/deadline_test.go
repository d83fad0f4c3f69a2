package deadline

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// wait is how long a test waits for what must happen: long enough for the
// slowest machine, and never waited out when the code is right.
const wait = 30 * time.Second

// waitDone fails t unless ctx is done within wait.
func waitDone(t *testing.T, ctx context.Context) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(wait):
		t.Fatalf("not done after %s", wait)
	}
}

// isDone reports whether ctx is done, without waiting.
func isDone(ctx context.Context) bool { return isClosed(ctx.Done()) }

// isClosed reports whether ch is closed, without waiting.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// queued returns the number of contexts in q.
func queued(q *Queue) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for c := q.head; c != nil; c = c.next {
		n++
	}
	return n
}

func TestExpires(t *testing.T) {
	const timeout = 20 * time.Millisecond
	q := NewQueue(timeout)
	before := time.Now()
	c := q.WithTimeout(context.Background())
	after := time.Now()
	d, ok := c.Deadline()
	if !ok || d.Before(before.Add(timeout)) || d.After(after.Add(timeout)) {
		t.Fatalf("Deadline() = %v, %v; want between %v and %v", d, ok, before.Add(timeout), after.Add(timeout))
	}
	// Done before its deadline is wrong; after it, a slow machine's.
	if err := c.Err(); err != nil && time.Now().Before(d) {
		t.Fatalf("Err() before the deadline = %v", err)
	}
	waitDone(t, c)
	if now := time.Now(); now.Before(d) {
		t.Fatalf("done at %v, before its deadline %v", now, d)
	}
	if err := c.Err(); err != context.DeadlineExceeded {
		t.Fatalf("Err() = %v, want context.DeadlineExceeded", err)
	}
	if err := context.Cause(c); err != context.DeadlineExceeded {
		t.Fatalf("context.Cause = %v, want context.DeadlineExceeded", err)
	}
	c.Stop() // a no-op once done
	if err := c.Err(); err != context.DeadlineExceeded {
		t.Fatalf("Err() after Stop = %v, want context.DeadlineExceeded", err)
	}
	if n := queued(q); n != 0 {
		t.Fatalf("%d contexts left queued", n)
	}
}

// TestExpiresWithoutDone shows that a context whose Done was never asked
// for is done at its deadline all the same.
func TestExpiresWithoutDone(t *testing.T) {
	q := NewQueue(time.Millisecond)
	c := q.WithTimeout(context.Background())
	deadline := time.Now().Add(wait)
	for c.Err() == nil {
		if time.Now().After(deadline) {
			t.Fatalf("Err() still nil after %s", wait)
		}
		time.Sleep(time.Millisecond)
	}
	if err := c.Err(); err != context.DeadlineExceeded {
		t.Fatalf("Err() = %v, want context.DeadlineExceeded", err)
	}
	if !isDone(c) {
		t.Fatal("Done() not closed once Err() is set")
	}
}

func TestStop(t *testing.T) {
	q := NewQueue(time.Hour)
	c := q.WithTimeout(context.Background())
	done := c.Done()
	if n := queued(q); n != 1 {
		t.Fatalf("%d contexts queued, want 1", n)
	}
	c.Stop()
	if !isClosed(done) {
		t.Fatal("Done() not closed by Stop")
	}
	if err := c.Err(); err != context.Canceled {
		t.Fatalf("Err() = %v, want context.Canceled", err)
	}
	if n := queued(q); n != 0 {
		t.Fatalf("%d contexts left queued", n)
	}
	// A context stopped before Done was asked for is done too.
	c = q.WithTimeout(context.Background())
	c.Stop()
	if !isDone(c) {
		t.Fatal("Done() of a stopped context not closed")
	}
}

func TestParent(t *testing.T) {
	q := NewQueue(time.Hour)
	type key struct{}
	parent, cancel := context.WithCancelCause(context.WithValue(context.Background(), key{}, "v"))
	watched := q.WithTimeout(parent)
	_ = watched.Done()
	unwatched := q.WithTimeout(parent)
	if v := watched.Value(key{}); v != "v" {
		t.Fatalf("Value = %v, want the parent's", v)
	}
	cancel(errors.New("client went away"))
	waitDone(t, watched)
	for _, c := range []*Context{watched, unwatched} {
		if err := c.Err(); err != context.Canceled {
			t.Fatalf("Err() = %v, want context.Canceled", err)
		}
	}
	if n := queued(q); n != 0 {
		t.Fatalf("%d contexts left queued", n)
	}

	// A parent already done: the context is done as soon as it is asked.
	c := q.WithTimeout(parent)
	if !isDone(c) {
		t.Fatal("Done() of a context whose parent is done is not closed")
	}
	if err := c.Err(); err != context.Canceled {
		t.Fatalf("Err() = %v, want context.Canceled", err)
	}

	// A parent's earlier deadline is the context's.
	early, cancelEarly := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancelEarly()
	c = q.WithTimeout(early)
	d, _ := c.Deadline()
	if pd, _ := early.Deadline(); !d.Equal(pd) {
		t.Fatalf("Deadline() = %v, want the parent's %v", d, pd)
	}
	waitDone(t, c)
	if err := c.Err(); err != context.DeadlineExceeded {
		t.Fatalf("Err() = %v, want context.DeadlineExceeded", err)
	}

	// A parent that is never canceled (context.WithoutCancel's) is not
	// watched.
	c = q.WithTimeout(context.WithoutCancel(parent))
	_ = c.Done()
	if c.stopParent != nil {
		t.Fatal("watches a parent that is never canceled")
	}
	c.Stop()
}

// TestDerived shows that contexts derived from a Context are done with it,
// with its error as their cause, and start no goroutine to watch it.
func TestDerived(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	const n = 200
	// A context that outlives the count: none of its children may start
	// a goroutine.
	long := NewQueue(time.Hour).WithTimeout(parent)
	defer long.Stop()
	before := runtime.NumGoroutine()
	for range n {
		_, cancel := context.WithCancel(long)
		defer cancel()
	}
	if grown := runtime.NumGoroutine() - before; grown >= n/2 {
		t.Fatalf("%d derived contexts started %d goroutines", n, grown)
	}
	c := NewQueue(10 * time.Millisecond).WithTimeout(parent)
	children := make([]context.Context, n)
	for i := range children {
		child, cancel := context.WithCancel(c)
		defer cancel()
		children[i] = child
	}
	for _, child := range children {
		waitDone(t, child)
		if err := child.Err(); err != context.DeadlineExceeded {
			t.Fatalf("child's Err() = %v, want context.DeadlineExceeded", err)
		}
		if err := context.Cause(child); err != context.DeadlineExceeded {
			t.Fatalf("child's cause = %v, want context.DeadlineExceeded", err)
		}
	}
}

func TestAfterFunc(t *testing.T) {
	q := NewQueue(time.Hour)
	c := q.WithTimeout(context.Background())
	var ran atomic.Int32
	stopped := make(chan struct{})
	stop := context.AfterFunc(c, func() { ran.Add(100) })
	if !stop() {
		t.Fatal("stop() before c is done = false, want true")
	}
	if stop() {
		t.Fatal("second stop() = true, want false")
	}
	stop = context.AfterFunc(c, func() { ran.Add(1); close(stopped) })
	c.Stop()
	select {
	case <-stopped:
	case <-time.After(wait):
		t.Fatalf("AfterFunc's function not run after %s", wait)
	}
	if stop() {
		t.Fatal("stop() after the function ran = true, want false")
	}
	if got := ran.Load(); got != 1 {
		t.Fatalf("functions ran %d (hundreds: stopped ones), want 1", got)
	}
	// Registered once c is done: runs at once.
	late := make(chan struct{})
	if context.AfterFunc(c, func() { close(late) })() {
		t.Fatal("stop() of a function registered after c was done = true")
	}
	select {
	case <-late:
	case <-time.After(wait):
		t.Fatalf("AfterFunc's function not run after %s", wait)
	}
}

// TestConcurrent makes contexts from many goroutines at once, stops most
// and lets the rest expire, then checks each ended as it should and the
// queue is empty. Run it with -race.
func TestConcurrent(t *testing.T) {
	q := NewQueue(5 * time.Millisecond)
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	const goroutines, each = 8, 300
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			var expiring []*Context
			for range each {
				c := q.WithTimeout(parent)
				switch r.IntN(4) {
				case 0: // left to expire, watched
					_ = c.Done()
					expiring = append(expiring, c)
				case 1: // left to expire, with a derived context
					context.AfterFunc(c, func() {})
					expiring = append(expiring, c)
				default:
					if r.IntN(2) == 0 {
						_ = c.Done()
					}
					c.Stop()
					// On a slow machine it may have expired first.
					d, _ := c.Deadline()
					if err := c.Err(); err != context.Canceled && (err != context.DeadlineExceeded || time.Now().Before(d)) {
						errs <- errors.New("a stopped context's Err() is neither context.Canceled nor, after its deadline, context.DeadlineExceeded")
						return
					}
				}
			}
			for _, c := range expiring {
				select {
				case <-c.Done():
				case <-time.After(wait):
					errs <- errors.New("a context not done long after its deadline")
					return
				}
				d, _ := c.Deadline()
				if time.Now().Before(d) {
					errs <- errors.New("a context done before its deadline")
					return
				}
				if err := c.Err(); err != context.DeadlineExceeded {
					errs <- errors.New("an expired context's Err() is not context.DeadlineExceeded")
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := queued(q); n != 0 {
		t.Fatalf("%d contexts left queued", n)
	}
}

// TestIdle shows that a queue left empty disarms its timer, and arms it
// again for the next context.
func TestIdle(t *testing.T) {
	q := NewQueue(time.Millisecond)
	for range 3 {
		c := q.WithTimeout(context.Background())
		waitDone(t, c)
		deadline := time.Now().Add(wait)
		for {
			q.mu.Lock()
			armed := q.armed
			q.mu.Unlock()
			if !armed {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("timer still armed %s after the queue emptied", wait)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

func TestCancelCtxKeyLearnt(t *testing.T) {
	if cancelCtxKey == nil {
		t.Fatal("the context package's key was not learnt")
	}
}

// BenchmarkWithTimeout compares a Context with context.WithTimeout's, for
// a call that does not block: made, its Done asked for, stopped.
func BenchmarkWithTimeout(b *testing.B) {
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.Run("queue", func(b *testing.B) {
		q := NewQueue(10 * time.Second)
		b.ReportAllocs()
		for b.Loop() {
			c := q.WithTimeout(parent)
			_ = c.Done()
			c.Stop()
		}
	})
	b.Run("context", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c, cancel := context.WithTimeout(parent, 10*time.Second)
			_ = c.Done()
			cancel()
		}
	})
}
