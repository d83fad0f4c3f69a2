package idem

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/idemkit/idem/idemstore"
)

// Phase is one atomic phase of an operation, run from a recovery point. Its
// database writes go through the transaction that ctx carries (the store's
// accessor, such as idempg.TxFromContext); they commit together with the
// recovery point it returns and the state it left, or not at all. A phase
// that calls another system passes it [DeriveKey](ctx, purpose), so that
// running the phase again after a crash does the work there once.
//
// The final phase writes the operation's answer to w and returns
// [idemstore.RecoveryFinished]; its writes commit with the stored response. What a
// phase that does not finish writes to w is discarded.
//
// An error leaves the key at the phase's recovery point with its writes
// rolled back: the operation is unfinished, not failed, and the next
// attempt resumes there. Return one for "outcome unknown" (a timeout, a 5xx
// or a lost connection from another system). A definitive outcome, such as
// a declined card, is no error: write its answer and finish.
type Phase func(ctx context.Context, w http.ResponseWriter, state State) (next string, err error)

// Phases is an operation made of atomic phases, each keyed by the recovery
// point it runs from; the first runs from [idemstore.RecoveryStarted]:
//
//	idem.Phases{
//		idem.RecoveryStarted: createPayment, // -> "payment_created"
//		"payment_created":    charge,        // -> "charge_created"
//		"charge_created":     finish,        // -> idem.RecoveryFinished
//	}
//
// A handler behind the middleware in [ModeTwoPhase] runs it with Run; a
// [Resumer] runs the phases after RecoveryStarted for keys whose client
// went away.
type Phases map[string]Phase

// PhaseError is the error of a phase, returned by [Phases.Run]: the key
// stays at recovery point Point.
type PhaseError struct {
	Point string
	Err   error
}

// Error names the recovery point the phase started from.
func (e *PhaseError) Error() string {
	return fmt.Sprintf("idem: phase from recovery point %q: %v", e.Point, e.Err)
}

// Unwrap returns the phase's error.
func (e *PhaseError) Unwrap() error { return e.Err }

// unfinishedRetryAfter is the Retry-After of the 503 for an unfinished
// operation, in seconds.
const unfinishedRetryAfter = 1

// Run runs the operation from the key's last committed recovery point to
// the end: each phase, then a checkpoint that commits its writes with the
// recovery point it returned, until a phase returns [idemstore.RecoveryFinished]. A
// phase that has committed is never run again for the key, by this request,
// a retry, a takeover or a [Resumer].
//
// ctx must be the context of a handler behind the middleware, or of a
// Resumer's run. When Run returns an error the operation is unfinished:
// Run has answered w with 503 [ProblemOperationUnfinished] and Retry-After,
// the middleware releases the key without storing that answer, keeping its
// recovery point, and the client's retry with the same key resumes it.
// The error is a [*PhaseError], or wraps [idemstore.ErrNoRecovery], [idemstore.ErrLeaseLost] or
// [idemstore.ErrOutcomeUnknown].
func (ph Phases) Run(ctx context.Context, w http.ResponseWriter) error {
	host, _ := ctx.Value(phaseHostKey{}).(*phaseHost)
	err := ph.run(ctx, host, w)
	if err != nil {
		base := ProblemTypeBaseDefault
		if host != nil {
			host.unfinished = true
			base = host.base
		}
		WriteProblem(w, ProblemOperationUnfinished.Kind().New(base,
			"The operation stopped before it finished; what it completed is recorded and is not done again. Retry with the same Idempotency-Key after Retry-After, never a new one: the retry resumes where it stopped."),
			unfinishedRetryAfter)
	}
	return err
}

func (ph Phases) run(ctx context.Context, host *phaseHost, w http.ResponseWriter) error {
	if host == nil {
		return fmt.Errorf("idem: run phases: not behind the middleware in ModeTwoPhase, nor run by a Resumer: %w", idemstore.ErrNoRecovery)
	}
	lease, ok := host.lease.(idemstore.RecoveryLease)
	if !ok {
		return fmt.Errorf("idem: run phases: the store's lease (%T) does not keep recovery points: %w", host.lease, idemstore.ErrNoRecovery)
	}
	at, err := host.recovery(ctx, lease)
	if err != nil {
		return fmt.Errorf("idem: run phases: read the recovery point: %w", err)
	}
	point, state := at.Point, State(at.State).Clone()
	created := claimCreated(lease, point, state)
	delete(state, stateClaimCreated) // the library's, not the phases'
	// Each phase runs at most once per run: more steps than phases is a
	// cycle.
	for range len(ph) {
		phase := ph[point]
		if phase == nil {
			return fmt.Errorf("idem: run phases: no phase runs from recovery point %q", point)
		}
		if state == nil {
			state = State{}
		}
		pctx := ctx
		if point != idemstore.RecoveryStarted && created != "" {
			pctx = context.WithValue(ctx, claimCreatedKey{}, created)
		}
		buf := &recorder{header: make(http.Header)}
		next, err := phase(pctx, buf, state)
		switch {
		case err != nil:
			return &PhaseError{Point: point, Err: err}
		case next == idemstore.RecoveryFinished:
			buf.writeTo(w, nil)
			return nil
		case next == "" || next == point || next == idemstore.RecoveryStarted:
			return &PhaseError{Point: point, Err: fmt.Errorf("the phase returned recovery point %q, which is no step forward", next)}
		}
		saved := state.Clone()
		delete(saved, stateClaimCreated)
		if created != "" {
			if saved == nil {
				saved = State{}
			}
			saved[stateClaimCreated] = created
		}
		if err := host.checkpoint(ctx, lease, idemstore.Recovery{Point: next, State: saved}); err != nil {
			return fmt.Errorf("idem: run phases: checkpoint %q: %w", next, err)
		}
		point = next
	}
	return fmt.Errorf("idem: run phases: the phases from %q never reached %q", at.Point, idemstore.RecoveryFinished)
}

// stateClaimCreated names the entry of an operation's state that holds
// the creation of its key's row, saved with the first recovery point, from
// which the later phases derive their keys (see [DeriveKey]).
const stateClaimCreated = "idem.claim_created"

// claimCreated returns what the later phases of an operation at recovery
// point point, with state, derive their keys from: the creation of the
// lease's row for an operation that has not passed its first recovery
// point, which that point saves; what it saved for one that has; "" for an
// operation whose first recovery point an earlier version saved, or whose
// store does not report the creation, whose phases derive as before.
func claimCreated(lease idemstore.RecoveryLease, point string, state State) string {
	if point != idemstore.RecoveryStarted {
		return state[stateClaimCreated]
	}
	created := lease.Info().CreatedAt
	if created.IsZero() {
		return ""
	}
	return created.UTC().Format(time.RFC3339Nano)
}

type phaseHostKey struct{}

// phaseHost is what Run needs from the code that holds the lease: the
// middleware or a Resumer.
type phaseHost struct {
	lease idemstore.Lease
	base  string // ProblemTypeBase
	// storeTimeout bounds each store call Run makes (Config.StoreTimeout):
	// reading the recovery point and each checkpoint.
	storeTimeout time.Duration
	// unfinished is set when Run returned an error: the holder releases the
	// key, keeping its recovery point, whatever the response's status.
	unfinished bool
}

// recovery reads the lease's recovery point under the store's timeout.
func (h *phaseHost) recovery(ctx context.Context, lease idemstore.RecoveryLease) (idemstore.Recovery, error) {
	ctx, cancel := h.storeContext(ctx)
	defer cancel()
	return lease.Recovery(ctx)
}

// checkpoint commits a recovery point under the store's timeout.
func (h *phaseHost) checkpoint(ctx context.Context, lease idemstore.RecoveryLease, at idemstore.Recovery) error {
	ctx, cancel := h.storeContext(ctx)
	defer cancel()
	return lease.Checkpoint(ctx, at)
}

func (h *phaseHost) storeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if h.storeTimeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, h.storeTimeout)
}

func contextWithPhaseHost(ctx context.Context, h *phaseHost) context.Context {
	return context.WithValue(ctx, phaseHostKey{}, h)
}
