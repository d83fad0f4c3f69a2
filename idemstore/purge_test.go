package idemstore_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem/idemstore"
)

func TestPurgePause(t *testing.T) {
	t.Parallel()
	const took = 100 * time.Millisecond
	for _, tc := range []struct {
		took  time.Duration
		share float64
		want  time.Duration
	}{
		{took, 0, 4 * took}, // PurgeShareDefault, a fifth
		{took, 0.2, 4 * took},
		{took, 0.1, 9 * took},
		{took, 0.5, took},
		{took, 0.8, took / 4},
		{took, 1, 0},
		{0, 0.2, 0},
		{-time.Second, 0.2, 0}, // a clock that stepped back
	} {
		if got := idemstore.PurgePause(tc.took, tc.share); got != tc.want {
			t.Errorf("PurgePause(%s, %v) = %s, want %s", tc.took, tc.share, got, tc.want)
		}
	}
}

func TestPurgeWait(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if err := idemstore.PurgeWait(context.Background(), time.Second, 0.5); err != nil {
			t.Fatalf("PurgeWait = %v", err)
		}
		if d := time.Since(start); d != time.Second {
			t.Errorf("PurgeWait(1 s, 0.5) waited %s, want 1 s", d)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start = time.Now()
		if err := idemstore.PurgeWait(ctx, time.Second, 0.1); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("PurgeWait past its context's deadline = %v, want DeadlineExceeded", err)
		}
		if d := time.Since(start); d != time.Second {
			t.Errorf("PurgeWait returned %s after it began, want at its context's end (1 s)", d)
		}
		if err := idemstore.PurgeWait(ctx, 0, 0.2); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("PurgeWait without a pause on an ended context = %v, want its error", err)
		}
	})
}

func TestPurgeParamsShare(t *testing.T) {
	t.Parallel()
	before := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, share := range []float64{0, 0.01, 0.2, 1} {
		if err := (idemstore.PurgeParams{Before: before, Share: share}).Validate(); err != nil {
			t.Errorf("Validate with Share %v = %v, want nil", share, err)
		}
	}
	for _, share := range []float64{-0.01, 1.01, math.NaN(), math.Inf(1)} {
		if err := (idemstore.PurgeParams{Before: before, Share: share}).Validate(); err == nil {
			t.Errorf("Validate with Share %v = nil, want an error", share)
		}
	}
}
