package idemconnect_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/idemkit/idem"
	paymentsv1 "github.com/idemkit/idem/api/payments/v1"
	"github.com/idemkit/idem/idemrpc"
	"github.com/idemkit/idem/idemstore"
)

// TestTwoPhaseResumesWithDerivedKeys runs a payment by phases whose
// charge's answer is lost the first time: the retry resumes at the charge
// with the same derived key, and the row is written once.
func TestTwoPhaseResumesWithDerivedKeys(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := setup(t, b, idem.Config{Mode: idem.ModeTwoPhase})
		var mu sync.Mutex
		charges := map[string]int{} // derived key -> charge requests
		lose := true
		e.svc.phases = idem.Phases{
			idemstore.RecoveryStarted: func(ctx context.Context, w http.ResponseWriter, st idem.State) (string, error) {
				scope, _ := idem.ScopeFromContext(ctx)
				id, err := e.db.Insert(ctx, scope.Key)
				st["id"] = "pay_" + strconv.FormatInt(id, 10)
				return "created", err
			},
			"created": func(ctx context.Context, w http.ResponseWriter, st idem.State) (string, error) {
				mu.Lock()
				defer mu.Unlock()
				charges[idem.DeriveKey(ctx, "charge:"+st["id"])]++
				if lose {
					lose = false
					return "", errors.New("processor: the answer was lost")
				}
				return "charged", nil
			},
			"charged": func(ctx context.Context, w http.ResponseWriter, st idem.State) (string, error) {
				return idemstore.RecoveryFinished, idemrpc.WriteMessage(w, &paymentsv1.Payment{Id: st["id"], Status: "succeeded"})
			},
		}
		first := e.call(t, "alice", payment(4200), "phased")
		if d := detailsOf(t, first.err); d.code != connect.CodeUnavailable || d.reason != "OPERATION_UNFINISHED" || d.retry <= 0 {
			t.Fatalf("lost charge answer: %v %+v, want UNAVAILABLE OPERATION_UNFINISHED with RetryInfo", first.err, d)
		}
		second := e.call(t, "alice", payment(4200), "phased")
		third := e.call(t, "alice", payment(4200), "phased")
		if second.err != nil || second.msg().GetStatus() != "succeeded" || third.err != nil || !third.replayed() || !proto.Equal(second.msg(), third.msg()) {
			t.Fatalf("resumed: %v %v, then %v %v replayed=%v", second.err, second.msg(), third.err, third.msg(), third.replayed())
		}
		mu.Lock()
		defer mu.Unlock()
		if len(charges) != 1 {
			t.Errorf("charges with %d derived keys, want 1", len(charges))
		}
		for _, n := range charges {
			if n != 2 {
				t.Errorf("%d charge requests with the derived key, want 2", n)
			}
		}
		if rows := e.db.Rows(t); rows != 1 {
			t.Errorf("%d rows, want 1", rows)
		}
	})
}
