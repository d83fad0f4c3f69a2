package idempg

import (
	"reflect"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

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
