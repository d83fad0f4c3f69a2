// Package pause waits for a duration or until a context is done, whichever
// comes first: the one timer loop that retries and paced work share.
package pause

import (
	"context"
	"time"
)

// For waits d, or until ctx is done, and returns ctx's error (nil when d
// passed first). A d of zero or less returns at once.
func For(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
