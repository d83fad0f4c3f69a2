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

func TestWaitPauseIsBounded(t *testing.T) {
	t.Parallel()
	for attempt := range 100 {
		d := waitPause(attempt)
		if d < waitPauseFirst/2 || d > waitPauseMax {
			t.Fatalf("attempt %d: pause %s outside [%s, %s]", attempt, d, waitPauseFirst/2, waitPauseMax)
		}
	}
}
