package idemmysql_test

import (
	"net/http"
	"testing"

	"github.com/idemkit/idem/idemmysql"
	"github.com/idemkit/idem/idemstore"
)

// TestRoundTrips counts the statements, one round trip each, that a new
// key, a replay and a conflict cost, from the claim to the stored response
// (a handler that writes nothing of its own; each business statement adds
// one). The figures are the package documentation's (Round trips).
func TestRoundTrips(t *testing.T) {
	t.Parallel()
	store := openStore(t)
	ctx := testCtx(t)
	var n int
	scope := func() idemstore.Scope {
		n++
		return idemstore.Scope{ClientID: "alice", Key: "rt-" + string(rune('a'+n))}
	}
	count := func(f func()) int64 {
		before := idemmysql.RoundTrips(store)
		f()
		return idemmysql.RoundTrips(store) - before
	}
	resp := &idemstore.Response{StatusCode: 201, Header: http.Header{}, Body: []byte(`{}`)}
	completeNew := func(p idemstore.ClaimParams) {
		res := claim(t, store, p)
		if res.Lease == nil {
			t.Fatalf("claim of a new key found %+v", res.Record)
		}
		if err := res.Lease.Complete(ctx, resp); err != nil {
			t.Fatalf("Complete: %v", err)
		}
	}
	answered := func(p idemstore.ClaimParams, want idemstore.Status) {
		res := claim(t, store, p)
		if res.Record == nil || res.Record.Status != want {
			t.Fatalf("claim = %+v, want a record %s", res, want)
		}
	}
	type figure struct {
		name string
		got  int64
		want int64
	}
	var figures []figure
	for _, twoPhase := range []bool{false, true} {
		mode := "atomic"
		if twoPhase {
			mode = "two-phase"
		}
		for _, speculative := range []bool{true, false} {
			if twoPhase && !speculative {
				continue // a two-phase claim inserts first either way
			}
			label := mode
			if !twoPhase && speculative {
				label += " (speculative, the middleware's default)"
			} else if !twoPhase {
				label += " (a key the middleware claimed lately)"
			}
			p := params(scope(), "a", twoPhase)
			p.Speculative = speculative
			newKey := count(func() { completeNew(p) })
			replay := count(func() { answered(p, idemstore.StatusCompleted) })

			held := params(scope(), "a", twoPhase)
			res := claim(t, store, held)
			if res.Lease == nil {
				t.Fatal("no lease")
			}
			held.Speculative = speculative
			conflict := count(func() { answered(held, idemstore.StatusInFlight) })
			res.Lease.Release(ctx)

			want := map[[2]bool][3]int64{
				{false, true}:  {4, 4, 3}, // BEGIN, INSERT, UPDATE, COMMIT; BEGIN, INSERT (1062), ROLLBACK, SELECT; BEGIN, INSERT (1205), ROLLBACK
				{false, false}: {5, 1, 4}, // SELECT first, then as above; SELECT; SELECT, BEGIN, INSERT (1205), ROLLBACK
				{true, true}:   {2, 2, 2}, // INSERT, UPDATE (autocommit); INSERT (1062), SELECT; the same
			}[[2]bool{twoPhase, speculative}]
			figures = append(figures,
				figure{label + ": new key", newKey, want[0]},
				figure{label + ": replay", replay, want[1]},
				figure{label + ": conflict (409)", conflict, want[2]})
		}
	}
	for _, f := range figures {
		t.Logf("%-60s %d round trips", f.name, f.got)
		if f.got != f.want {
			t.Errorf("%s: %d round trips, want %d", f.name, f.got, f.want)
		}
	}
}
