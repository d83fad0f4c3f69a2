package idemgrpc_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/idemkit/idem"
	paymentsv1 "github.com/idemkit/idem/api/payments/v1"
	"github.com/idemkit/idem/idemrpc"
	"github.com/idemkit/idem/idemstore"
)

// processor charges once per key, and can lose its first answer.
type processor struct {
	mu       sync.Mutex
	attempts map[string]int // key -> charge requests
	loseNext atomic.Bool
}

func (p *processor) charge(key string) error {
	p.mu.Lock()
	p.attempts[key]++
	p.mu.Unlock()
	if p.loseNext.CompareAndSwap(true, false) {
		return errors.New("processor: the answer was lost")
	}
	return nil
}

// TestTwoPhaseResumesWithDerivedKeys runs a payment by phases: a row, a
// charge with a derived key whose answer is lost the first time, the
// answer. The retry resumes at the charge, with the same derived key, and
// the row is written once.
func TestTwoPhaseResumesWithDerivedKeys(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := setup(t, b, idem.Config{Mode: idem.ModeTwoPhase}, nil)
		proc := &processor{attempts: map[string]int{}}
		proc.loseNext.Store(true)
		e.svc.phases = idem.Phases{
			idemstore.RecoveryStarted: func(ctx context.Context, w http.ResponseWriter, st idem.State) (string, error) {
				scope, _ := idem.ScopeFromContext(ctx)
				id, err := e.db.Insert(ctx, scope.Key)
				st["id"] = "pay_" + strconv.FormatInt(id, 10)
				return "created", err
			},
			"created": func(ctx context.Context, w http.ResponseWriter, st idem.State) (string, error) {
				if err := proc.charge(idem.DeriveKey(ctx, "charge:"+st["id"])); err != nil {
					return "", err
				}
				return "charged", nil
			},
			"charged": func(ctx context.Context, w http.ResponseWriter, st idem.State) (string, error) {
				return idemstore.RecoveryFinished, idemrpc.WriteMessage(w, &paymentsv1.Payment{Id: st["id"], Status: "succeeded"})
			},
		}
		first := e.call(t, "alice", payment(4200), "phased")
		if d := detailsOf(t, first.err); d.code != codes.Unavailable || d.reason != "OPERATION_UNFINISHED" || d.retry <= 0 {
			t.Fatalf("lost charge answer: %v %+v, want UNAVAILABLE OPERATION_UNFINISHED with RetryInfo", first.err, d)
		}
		second := e.call(t, "alice", payment(4200), "phased")
		if second.err != nil || second.resp.GetStatus() != "succeeded" || second.replayed() {
			t.Fatalf("retry: %v %v replayed=%v, want the resumed payment", second.err, second.resp, second.replayed())
		}
		third := e.call(t, "alice", payment(4200), "phased")
		if third.err != nil || !third.replayed() || !equalMsg(third.resp, second.resp) {
			t.Fatalf("after it finished: %v %v replayed=%v, want the replay of %v", third.err, third.resp, third.replayed(), second.resp)
		}
		proc.mu.Lock()
		defer proc.mu.Unlock()
		if len(proc.attempts) != 1 {
			t.Errorf("charges with %d derived keys (%v), want 1", len(proc.attempts), proc.attempts)
		}
		for _, n := range proc.attempts {
			if n != 2 {
				t.Errorf("%d charge requests with the derived key, want 2 (the lost one and the resumed one)", n)
			}
		}
		if rows := e.db.Rows(t); rows != 1 {
			t.Errorf("%d rows, want 1", rows)
		}
	})
}
