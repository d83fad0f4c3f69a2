package pause

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

func TestFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if err := For(context.Background(), time.Second); err != nil || time.Since(start) != time.Second {
			t.Errorf("For(1s) = %v after %s, want nil after 1s", err, time.Since(start))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		start = time.Now()
		if err := For(ctx, time.Hour); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != 100*time.Millisecond {
			t.Errorf("For(1h) under a 100ms deadline = %v after %s, want DeadlineExceeded after 100ms", err, time.Since(start))
		}
		if err := For(ctx, 0); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("For(0) on an ended context = %v, want its error", err)
		}
		if err := For(context.Background(), -time.Second); err != nil {
			t.Errorf("For(-1s) = %v, want nil at once", err)
		}
	})
}
