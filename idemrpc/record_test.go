package idemrpc_test

import (
	"testing"

	"google.golang.org/genproto/googleapis/rpc/code"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemrpc"
)

// TestHTTPStatusFollowsTheOutcomePolicy checks which error statuses the
// default outcome policy stores: only ALREADY_EXISTS, a definitive
// outcome; the others say the call was not processed, or did not finish.
func TestHTTPStatusFollowsTheOutcomePolicy(t *testing.T) {
	for c := range code.Code_name {
		cc := code.Code(c)
		if cc == code.Code_OK {
			continue
		}
		got := idem.DefaultOutcomePolicy(idemrpc.HTTPStatus(cc))
		want := idem.OutcomeRelease
		if cc == code.Code_ALREADY_EXISTS {
			want = idem.OutcomeStore
		}
		if got != want {
			t.Errorf("%s: HTTP %d, outcome %d, want %d", cc, idemrpc.HTTPStatus(cc), got, want)
		}
	}
	if s := idemrpc.HTTPStatus(code.Code_OK); s != 200 {
		t.Errorf("OK: %d", s)
	}
}

func TestReason(t *testing.T) {
	if r := idemrpc.Reason(idem.ProblemKeyReused); r != "IDEMPOTENCY_KEY_REUSED" {
		t.Errorf("Reason = %q", r)
	}
}
