package idem

import (
	"net/http"
	"testing"
	"time"
)

func TestPreferredWait(t *testing.T) {
	t.Parallel()
	cases := []struct {
		prefer []string
		limit  time.Duration
		want   time.Duration
	}{
		{nil, time.Minute, 0},
		{[]string{"wait=5"}, time.Minute, 5 * time.Second},
		{[]string{"WAIT = 5"}, time.Minute, 5 * time.Second},
		{[]string{`wait="7"`}, time.Minute, 7 * time.Second},
		{[]string{"respond-async, wait=10"}, time.Minute, 10 * time.Second},
		{[]string{"return=minimal", "wait=3;x=y"}, time.Minute, 3 * time.Second},
		{[]string{"wait=100"}, 10 * time.Second, 10 * time.Second},
		{[]string{"wait=5"}, 2500 * time.Millisecond, 2 * time.Second},
		{[]string{"wait=5"}, 0, 0},
		{[]string{"wait=0"}, time.Minute, 0},
		{[]string{"wait=-1"}, time.Minute, 0},
		{[]string{"wait=soon"}, time.Minute, 0},
		{[]string{"waiting=5"}, time.Minute, 0},
	}
	for _, c := range cases {
		h := http.Header{"Prefer": c.prefer}
		if got := preferredWait(h, c.limit); got != c.want {
			t.Errorf("Prefer %q, limit %s: %s, want %s", c.prefer, c.limit, got, c.want)
		}
	}
}

// TestWaitPauseIsBounded checks each pause against its bound, which
// doubles from 10 ms to 250 ms: between half of it and all of it, and,
// over 100 draws of each, not always the same.
func TestWaitPauseIsBounded(t *testing.T) {
	t.Parallel()
	bound := waitPauseFirst
	for attempt := range 10 {
		pauses := map[time.Duration]bool{}
		for range 100 {
			d := waitPause(attempt)
			if d < bound/2 || d > bound {
				t.Fatalf("attempt %d: pause %s outside [%s, %s]", attempt, d, bound/2, bound)
			}
			pauses[d] = true
		}
		if len(pauses) < 2 {
			t.Errorf("attempt %d: 100 pauses of %v, want jitter", attempt, pauses)
		}
		bound = min(2*bound, waitPauseMax)
	}
}
