package idempg

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/idemstore"
)

// TestBatchAdd: add queues what Batch.Queue would, in order, in the
// batch's own QueuedQuery values while they last and by Queue after; a
// reset batch starts empty, with nothing left of the previous round trip.
func TestBatchAdd(t *testing.T) {
	b := &batch{}
	for round := 0; round < 2; round++ {
		b.reset()
		if len(b.QueuedQueries) != 0 {
			t.Fatalf("round %d: reset left %d queries", round, len(b.QueuedQueries))
		}
		b.BeginTx(pgx.TxOptions{BeginQuery: "guard"})
		want := []string{"guard"}
		for i := 0; i < 5; i++ {
			sql := string(rune('a'+round)) + string(rune('0'+i))
			b.add(sql, i, round)
			want = append(want, sql)
		}
		var got []string
		for i, qq := range b.QueuedQueries {
			got = append(got, qq.SQL)
			if i == 0 {
				continue
			}
			if !reflect.DeepEqual(qq.Arguments, []any{i - 1, round}) {
				t.Errorf("round %d: query %d arguments %v", round, i, qq.Arguments)
			}
			want := i < len(b.qq) // the first four are the batch's own
			if own := want && qq == &b.qq[i]; own != want {
				t.Errorf("round %d: query %d in the batch's own array: %v, want %v", round, i, own, want)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("round %d: queued %q, want %q", round, got, want)
		}
	}
}

// TestBatchAddAllocs: a reset batch queues its first four queries without
// allocating.
func TestBatchAddAllocs(t *testing.T) {
	b := &batch{}
	args := []any{1}
	if n := testing.AllocsPerRun(100, func() {
		b.reset()
		b.add("a", args...)
		b.add("b")
		b.add("c", args...)
		b.add("d")
	}); n != 0 {
		t.Errorf("%v allocations, want 0", n)
	}
}

// TestInsertFirstArgs: insertFirst's arguments are insertNew's at token 1
// without the token, typed and plain, NULL trace context included.
func TestInsertFirstArgs(t *testing.T) {
	resp := &idemstore.Response{StatusCode: 201, Body: []byte(`{"id":"pay_1"}`)}
	header := []byte(`{"Content-Type":["application/json"]}`)
	for _, typed := range []bool{true, false} {
		for _, trace := range []string{"", "00-abc"} {
			l := &lease{store: &Store{typedArgs: typed}, scope: idemstore.Scope{ClientID: "c", Key: "k"},
				claimedAt: time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC), start: time.Now()}
			r := &pendingRow{method: "POST", path: "/payments", hash: []byte{1, 2}, fields: []byte("f"), trace: trace}
			q, args := r.insertNew(l, 1, resp, header)
			if q != queryInsertCompletedNew || len(args) != 13 {
				t.Fatalf("insertNew: %d arguments", len(args))
			}
			all := deref(args)
			q, args = r.insertFirst(l, resp, header)
			if q != queryInsertCompletedFirst {
				t.Fatalf("insertFirst: wrong query")
			}
			first := deref(args)
			want := slices.Delete(slices.Clone(all), 6, 7) // without the token
			// The completion time is read again by each call.
			want[10], first[10] = nil, nil
			if !reflect.DeepEqual(first, want) {
				t.Errorf("typed %v, trace %q: insertFirst %#v, want %#v", typed, trace, first, want)
			}
			if all[6] != int64(1) {
				t.Errorf("typed %v: token %#v", typed, all[6])
			}
		}
	}
}

// deref returns args with the types of arg.go replaced by the values they
// point to (nil for NULL), so that two calls' arguments compare by value.
func deref(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		switch a := a.(type) {
		case *textArg:
			if a != nil {
				out[i] = string(*a)
			}
		case *bytesArg:
			out[i] = []byte(*a)
		case *intArg:
			out[i] = int64(*a)
		case *timeArg:
			out[i] = time.Time(*a)
		case *string:
			if a != nil {
				out[i] = *a
			}
		default:
			out[i] = a
		}
	}
	return out
}

// TestBeginGuard: beginGuard queues what BeginTx with the guard as begin
// query would, arguments set on it, in the batch's own first QueuedQuery,
// round after round; the queries added after it follow it.
func TestBeginGuard(t *testing.T) {
	b := &batch{}
	for round := 0; round < 3; round++ {
		args := []any{int64(round), "client", "key"}
		b.reset()
		b.beginGuard(args)
		b.add(queryBegin)
		want := &batch{}
		want.reset()
		want.BeginTx(pgx.TxOptions{BeginQuery: queryClaimGuard})
		want.QueuedQueries[0].Arguments = args
		want.Queue(queryBegin)
		if !reflect.DeepEqual(b.Batch, want.Batch) {
			t.Fatalf("round %d: beginGuard queued %+v, want %+v", round, b.Batch, want.Batch)
		}
		if b.QueuedQueries[0] != &b.qq[0] || b.QueuedQueries[1] != &b.qq[1] {
			t.Errorf("round %d: queries not in the batch's own array", round)
		}
	}
	if len(claimBegin.QueuedQueries) != 1 || claimBegin.QueuedQueries[0].Arguments != nil {
		t.Errorf("claimBegin changed: %+v", claimBegin.QueuedQueries)
	}
}

// TestBeginGuardAllocs: queuing the claim's guard and BEGIN on a reset
// batch does not allocate.
func TestBeginGuardAllocs(t *testing.T) {
	b := &batch{}
	args := []any{1}
	if n := testing.AllocsPerRun(100, func() {
		b.reset()
		b.beginGuard(args)
		b.add(queryBegin)
	}); n != 0 {
		t.Errorf("%v allocations, want 0", n)
	}
}
