package idempg

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// rewriter is a pgx.QueryRewriter for TestDeferrable.
type rewriter struct{}

// RewriteQuery returns sql and args unchanged.
func (rewriter) RewriteQuery(_ context.Context, _ *pgx.Conn, sql string, args []any) (string, []any, error) {
	return sql, args, nil
}

// amount is an argument type of the application's own for TestDeferrable.
type amount int64

// TestDeferrable: an Exec goes out with BEGIN unless it has no arguments
// or its first is one of pgx's options, whichever case of the type switch
// the first argument meets.
func TestDeferrable(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []any
		want bool
	}{
		{"none", nil, false},
		{"exec mode", []any{pgx.QueryExecModeSimpleProtocol, "a"}, false},
		{"rewriter", []any{rewriter{}, "a"}, false},
		{"rewriter pointer", []any{&rewriter{}, "a"}, false},
		{"named args", []any{pgx.NamedArgs{"a": 1}}, false},
		{"string", []any{"a"}, true},
		{"bytes", []any{[]byte("a")}, true},
		{"int64", []any{int64(1)}, true},
		{"int", []any{1}, true},
		{"int32", []any{int32(1)}, true},
		{"bool", []any{true}, true},
		{"float64", []any{1.5}, true},
		{"time", []any{time.Unix(0, 0)}, true},
		{"own type", []any{amount(1)}, true},
		{"nil", []any{nil}, true},
		{"typed arg", []any{(*textArg)(new(string))}, true},
	} {
		if got := deferrable(tc.args); got != tc.want {
			t.Errorf("%s: deferrable = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// BenchmarkDeferrable is deferrable of a string, the usual first argument,
// for instruction counts.
func BenchmarkDeferrable(b *testing.B) {
	args := []any{"pay_1", 4200}
	n := 0
	for b.Loop() {
		if deferrable(args) {
			n++
		}
	}
	if n == 0 {
		b.Fatal("not deferrable")
	}
}
