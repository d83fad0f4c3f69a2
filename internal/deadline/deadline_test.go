package deadline

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// checkEnded fails unless ctx has ended with want: Err and Cause return
// it and Done is closed.
func checkEnded(t *testing.T, ctx context.Context, want error) {
	t.Helper()
	if err := ctx.Err(); err != want {
		t.Errorf("Err = %v, want %v", err, want)
	}
	if err := context.Cause(ctx); err != want {
		t.Errorf("Cause = %v, want %v", err, want)
	}
	select {
	case <-ctx.Done():
	default:
		t.Error("Done is not closed")
	}
}

// checkLive fails unless ctx has not ended.
func checkLive(t *testing.T, ctx context.Context) {
	t.Helper()
	if err := ctx.Err(); err != nil {
		t.Errorf("Err = %v, want nil", err)
	}
	select {
	case <-ctx.Done():
		t.Error("Done is closed")
	default:
	}
}

func TestDeadlineCtx(t *testing.T) {
	t.Parallel()

	type valueKey struct{}
	tests := []struct {
		name string
		// run gets a context with a timeout of 1 s whose parent cancel
		// cancels.
		run func(t *testing.T, ctx *Context, cancelParent context.CancelFunc)
	}{
		{"LiveBeforeDeadline", func(t *testing.T, ctx *Context, _ context.CancelFunc) {
			time.Sleep(999 * time.Millisecond)
			checkLive(t, ctx)
		}},
		{"ErrAtDeadlineWithoutDone", func(t *testing.T, ctx *Context, _ context.CancelFunc) {
			time.Sleep(time.Second)
			if err := ctx.Err(); err != context.DeadlineExceeded {
				t.Fatalf("Err = %v, want DeadlineExceeded", err)
			}
			checkEnded(t, ctx, context.DeadlineExceeded)
		}},
		{"DoneClosesAtDeadline", func(t *testing.T, ctx *Context, _ context.CancelFunc) {
			done := ctx.Done()
			checkLive(t, ctx)
			start := time.Now()
			<-done
			if waited := time.Since(start); waited != time.Second {
				t.Errorf("Done closed after %s, want 1s", waited)
			}
			checkEnded(t, ctx, context.DeadlineExceeded)
		}},
		{"ParentCancelledBeforeDone", func(t *testing.T, ctx *Context, cancelParent context.CancelFunc) {
			cancelParent()
			checkEnded(t, ctx, context.Canceled)
		}},
		{"ParentCancelledAfterDone", func(t *testing.T, ctx *Context, cancelParent context.CancelFunc) {
			done := ctx.Done()
			cancelParent()
			<-done
			checkEnded(t, ctx, context.Canceled)
		}},
		{"StopBeforeDone", func(t *testing.T, ctx *Context, _ context.CancelFunc) {
			ctx.Stop()
			checkEnded(t, ctx, context.Canceled)
		}},
		{"StopAfterDone", func(t *testing.T, ctx *Context, _ context.CancelFunc) {
			done := ctx.Done()
			ctx.Stop()
			<-done
			checkEnded(t, ctx, context.Canceled)
		}},
		{"StopAfterDeadlineKeepsDeadlineExceeded", func(t *testing.T, ctx *Context, _ context.CancelFunc) {
			time.Sleep(time.Second)
			ctx.Err()
			ctx.Stop()
			checkEnded(t, ctx, context.DeadlineExceeded)
		}},
		{"ErrIsSticky", func(t *testing.T, ctx *Context, cancelParent context.CancelFunc) {
			time.Sleep(time.Second)
			if err := ctx.Err(); err != context.DeadlineExceeded {
				t.Fatalf("Err = %v, want DeadlineExceeded", err)
			}
			cancelParent()
			ctx.Stop()
			checkEnded(t, ctx, context.DeadlineExceeded)
		}},
		{"DerivedWithCancelEndsAtDeadline", func(t *testing.T, ctx *Context, _ context.CancelFunc) {
			child, cancel := context.WithCancel(ctx)
			defer cancel()
			checkLive(t, child)
			<-child.Done()
			checkEnded(t, child, context.DeadlineExceeded)
			checkEnded(t, ctx, context.DeadlineExceeded)
		}},
		{"DerivedWithCancelEndsOnStop", func(t *testing.T, ctx *Context, _ context.CancelFunc) {
			child, cancel := context.WithCancel(ctx)
			defer cancel()
			ctx.Stop()
			<-child.Done()
			checkEnded(t, child, context.Canceled)
		}},
		{"DerivedAfterDeadlineStartsEnded", func(t *testing.T, ctx *Context, _ context.CancelFunc) {
			time.Sleep(time.Second)
			ctx.Err()
			child, cancel := context.WithCancel(ctx)
			defer cancel()
			checkEnded(t, child, context.DeadlineExceeded)
		}},
		{"AfterFuncRunsAtDeadline", func(t *testing.T, ctx *Context, _ context.CancelFunc) {
			ran := make(chan time.Time, 1)
			start := time.Now()
			context.AfterFunc(ctx, func() { ran <- time.Now() })
			if at := <-ran; at.Sub(start) != time.Second {
				t.Errorf("AfterFunc ran after %s, want 1s", at.Sub(start))
			}
			checkEnded(t, ctx, context.DeadlineExceeded)
		}},
		{"AfterFuncStoppedDoesNotRun", func(t *testing.T, ctx *Context, _ context.CancelFunc) {
			ran := false
			stop := context.AfterFunc(ctx, func() { ran = true })
			if !stop() {
				t.Error("stop = false, want true")
			}
			time.Sleep(2 * time.Second)
			synctest.Wait()
			if ran {
				t.Error("the stopped func ran")
			}
		}},
		{"AfterFuncAfterStopRuns", func(t *testing.T, ctx *Context, _ context.CancelFunc) {
			ctx.Stop()
			ran := make(chan struct{})
			context.AfterFunc(ctx, func() { close(ran) })
			<-ran
		}},
		{"CarriesParentValues", func(t *testing.T, ctx *Context, _ context.CancelFunc) {
			if v := ctx.Value(valueKey{}); v != "v" {
				t.Errorf("Value = %v, want v", v)
			}
			checkLive(t, ctx)
		}},
		{"Deadline", func(t *testing.T, ctx *Context, _ context.CancelFunc) {
			d, ok := ctx.Deadline()
			if want := time.Now().Add(time.Second); !ok || !d.Equal(want) {
				t.Errorf("Deadline = %v, %v; want %v, true", d, ok, want)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				parent, cancel := context.WithCancel(context.WithValue(context.Background(), valueKey{}, "v"))
				defer cancel()
				ctx := New(parent, time.Now().Add(time.Second))
				defer ctx.Stop()
				tt.run(t, ctx, cancel)
			})
		})
	}
}

// TestDeadlineCtxEarlierParentDeadline checks that a parent's earlier
// deadline ends the context, with or without Done.
func TestDeadlineCtxEarlierParentDeadline(t *testing.T) {
	t.Parallel()
	for _, callDone := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			parent, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			ctx := New(parent, time.Now().Add(time.Hour))
			defer ctx.Stop()
			if d, _ := ctx.Deadline(); !d.Equal(time.Now().Add(time.Second)) {
				t.Errorf("Deadline = %v, want the parent's", d)
			}
			if callDone {
				ctx.Done()
			}
			time.Sleep(time.Second)
			synctest.Wait()
			checkEnded(t, ctx, context.DeadlineExceeded)
		})
	}
}

// TestDeadlineCtxConcurrent checks, under the race detector, that Err and
// Done agree when the deadline, the parent's cancellation and Stop race
// with them: once Err returns an error, Done is closed and Err keeps
// returning that error.
func TestDeadlineCtxConcurrent(t *testing.T) {
	t.Parallel()
	for range 50 {
		parent, cancel := context.WithCancel(context.Background())
		ctx := New(parent, time.Now().Add(time.Millisecond))
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				var first error
				for {
					if g%2 == 0 {
						ctx.Done()
					}
					err := ctx.Err()
					if err == nil {
						continue
					}
					if first == nil {
						first = err
					} else if err != first {
						t.Errorf("Err = %v after %v", err, first)
					}
					select {
					case <-ctx.Done():
					default:
						t.Errorf("Err = %v with Done open", err)
					}
					if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("Err = %v", err)
					}
					return
				}
			})
		}
		wg.Go(cancel)
		wg.Go(ctx.Stop)
		wg.Wait()
	}
}
