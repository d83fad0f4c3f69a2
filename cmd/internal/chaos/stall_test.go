package chaos

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestStallWatch(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }

	t.Run("answers keep coming", func(t *testing.T) {
		var w stallWatch
		w.startAt(t0)
		for i := 1; i <= 100; i++ {
			if why := w.look(at(time.Duration(i)*stallTimeout/2), i); why != "" {
				t.Fatalf("look %d: %s", i, why)
			}
		}
	})
	t.Run("no answer while the database is up", func(t *testing.T) {
		var w stallWatch
		w.startAt(t0)
		if why := w.look(at(10*time.Second), 5); why != "" {
			t.Fatal(why)
		}
		if why := w.look(at(10*time.Second+stallTimeout-time.Second), 5); why != "" {
			t.Fatalf("stalled before stallTimeout: %s", why)
		}
		why := w.look(at(10*time.Second+stallTimeout), 5)
		if !strings.Contains(why, "no operation reached a final answer") {
			t.Fatalf("after stallTimeout without an answer: %q", why)
		}
	})
	t.Run("a database fault is not a stall", func(t *testing.T) {
		var w stallWatch
		w.startAt(t0)
		w.dbBegin(Failover, at(time.Second))
		if why := w.look(at(dbFaultTimeout), 0); why != "" {
			t.Fatalf("stalled during a failover shorter than dbFaultTimeout: %s", why)
		}
		w.dbEnd(at(dbFaultTimeout))
		// The watch counts from the end of the fault.
		if why := w.look(at(dbFaultTimeout+stallTimeout-time.Second), 0); why != "" {
			t.Fatalf("stalled less than stallTimeout after the fault: %s", why)
		}
		if why := w.look(at(dbFaultTimeout+stallTimeout), 0); why == "" {
			t.Fatal("no stall stallTimeout after the fault ended, without an answer")
		}
	})
	t.Run("a database fault that never ends", func(t *testing.T) {
		var w stallWatch
		w.startAt(t0)
		w.dbBegin(DBRestart, at(time.Second))
		why := w.look(at(time.Second+dbFaultTimeout), 100)
		if !strings.Contains(why, "db-restart fault has been under way") {
			t.Fatalf("a db-restart of dbFaultTimeout: %q", why)
		}
	})
}

// A fault that fails ends the injection at once: the other kinds stop,
// instead of running the rest of the schedule with the error held back.
func TestInjectStopsAtTheFirstFailedFault(t *testing.T) {
	t.Parallel()
	h := &harness{cfg: Config{}.withDefaults(), net: newNetwork(), start: time.Now()}
	defer h.net.close()
	// The clock file cannot be written: the skew fails.
	h.instances = []*process{{name: "paymentsd-0", clockFile: t.TempDir() + "/missing/clock"}}
	events := []Event{
		{At: 0, Kind: ClockSkew, Skew: time.Second, Hold: time.Second},
		{At: time.Hour, Kind: Network, Link: LinkProcessor, Toxic: ToxicLatency, Hold: time.Second},
	}
	done := make(chan error, 1)
	go func() { done <- h.inject(context.Background(), h.start, events) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "skew a clock") {
			t.Fatalf("inject returned %v, want the skew's error", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("inject still waiting for an event an hour away a minute after a fault failed")
	}
}
