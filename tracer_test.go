package idem_test

import (
	"testing"

	"github.com/idemkit/idem"
)

func TestOriginalTraceID(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ tc, want string }{
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "4bf92f3577b34da6a3ce929d0e0e4736"},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", "4bf92f3577b34da6a3ce929d0e0e4736"},
		{"", ""},
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", ""}, // the invalid all-zero id
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", ""}, // upper case is not a traceparent
		{"00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01", ""},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736", ""},
		{"00-4bf92f3577b34da6a3ce929d0e0e47<6-00f067aa0ba902b7-01", ""},
	} {
		if got := idem.OriginalTraceID(tt.tc); got != tt.want {
			t.Errorf("OriginalTraceID(%q) = %q, want %q", tt.tc, got, tt.want)
		}
	}
}
