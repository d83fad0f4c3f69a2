package payments

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/idemstore"
)

// The recovery points of POST /v1/payments with a processor, which always
// runs by phases in two-phase mode: started -> payment_created (a pending
// payment row) -> charge_created (the processor charged or declined, with
// the derived key) -> finished (the payment succeeded or declined; the
// answer stored).
const (
	pointPaymentCreated = "payment_created"
	pointChargeCreated  = "charge_created"
)

// Keys of the operation's state, saved with its recovery points.
const (
	statePayment   = "payment_id"
	stateChargeKey = "charge_key" // the processor's idempotency key; see ChargeKey
	stateCharge    = "charge_id"
	stateOutcome   = "outcome" // StatusSucceeded, StatusDeclined or StatusFailed
	stateRefusal   = "refusal" // the processor's status that refused the request, for StatusFailed
)

// StatusPending is the status of a payment whose charge has not
// finished: the phases' first recovery point.
const StatusPending = "pending"

// settler is a Repo that can settle a pending payment in the request's
// transaction.
type settler interface {
	// Settle sets the status of a pending payment in the request's
	// transaction and returns the payment. It reads nothing outside that
	// transaction: a handler that holds a pooled connection for its
	// transaction and waits for a second one deadlocks once every
	// connection is held that way.
	Settle(ctx context.Context, clientID, id, status string) (*Payment, error)
}

// createPhases are the phases of POST /v1/payments for params.
func (s *Service) createPhases(params Params) idem.Phases {
	return s.createPhasesAnswering(params, answerHTTP)
}

// createPhasesAnswering are the phases of a payment for params, whose
// final phase writes the payment's answer with answer: the HTTP API's, or
// the RPC API's (rpc.go).
func (s *Service) createPhasesAnswering(params Params, answer paymentAnswer) idem.Phases {
	ph := s.resumePhasesAnswering(answer)
	ph[idemstore.RecoveryStarted] = s.hooked(idemstore.RecoveryStarted, func(ctx context.Context, w http.ResponseWriter, st idem.State) (string, error) {
		scope, _ := idem.ScopeFromContext(ctx)
		p := &Payment{
			ID: NewID(), Object: "payment", Amount: params.Amount, Currency: params.Currency,
			Customer: params.Customer, Description: params.Description, Status: StatusPending,
			Created: s.cfg.Now().Unix(), ClientID: scope.ClientID, IdempotencyKey: scope.Key,
		}
		if err := s.cfg.Repo.Insert(ctx, p); err != nil {
			return "", err
		}
		st[statePayment], st[stateChargeKey] = p.ID, ChargeKey(ctx, p.ID)
		return pointPaymentCreated, nil
	})
	return ph
}

// ResumePhases are the phases of POST /v1/payments after its first, which
// need no request: a resumer runs them for payments whose client went
// away.
func (s *Service) ResumePhases() idem.Phases {
	return s.resumePhasesAnswering(answerHTTP)
}

// resumePhasesAnswering are the phases of a payment after its first, whose
// final phase writes the payment's answer with answer.
func (s *Service) resumePhasesAnswering(answer paymentAnswer) idem.Phases {
	return idem.Phases{
		pointPaymentCreated: s.hooked(pointPaymentCreated, s.charge),
		pointChargeCreated: s.hooked(pointChargeCreated, func(ctx context.Context, w http.ResponseWriter, st idem.State) (string, error) {
			return s.settle(ctx, w, st, answer)
		}),
	}
}

// paymentAnswer writes the answer of a settled payment; refusal is the
// processor's status that refused a failed payment's charge request.
type paymentAnswer func(w http.ResponseWriter, p *Payment, refusal string)

// hooked is phase, after Config.BeforePhase when there is one.
func (s *Service) hooked(point string, phase idem.Phase) idem.Phase {
	if s.cfg.BeforePhase == nil {
		return phase
	}
	return func(ctx context.Context, w http.ResponseWriter, st idem.State) (string, error) {
		s.cfg.BeforePhase(ctx, point)
		return phase(ctx, w, st)
	}
}

// ChargeKey is the processor's idempotency key for the payment id, in the
// context of the request that created it: derived from the client's key
// and the payment, which the first recovery point commits with the key.
// Every rerun and takeover charges with it, so the processor charges
// once; a client's key reused after its retention makes a new payment,
// and so a new charge. Derived from the client's key alone, it would be
// the first payment's key again, which the processor remembers: it would
// answer with the first payment's charge, or refuse other parameters.
//
// It is made in the first phase, where idem.DeriveKey derives from the
// client's key alone (a later phase's would be unique per claim of the key
// without the payment's id), and recovery points already saved carry keys
// made so: it stays as it is.
func ChargeKey(ctx context.Context, paymentID string) string {
	return idem.DeriveKey(ctx, "charge:"+paymentID)
}

// charge charges the payment at the processor with the key its first
// recovery point saved. A decline is an outcome, and so is a refusal of the
// request itself (a *RefusedError: nothing was charged), which fails the
// payment; any other error leaves the payment pending, and the phase is
// run again.
func (s *Service) charge(ctx context.Context, w http.ResponseWriter, st idem.State) (string, error) {
	scope, _ := idem.ScopeFromContext(ctx)
	p, err := s.cfg.Repo.Get(ctx, scope.ClientID, st[statePayment])
	if err != nil {
		return "", err
	}
	key := st[stateChargeKey]
	if key == "" {
		// The recovery point was saved by a version that derived the key
		// from the client's key alone, and the processor may have charged
		// with it: charge with that key again, never with a new one. Its
		// state has no claim's creation either, so DeriveKey derives it
		// as that version did.
		key = idem.DeriveKey(ctx, "charge")
	}
	params := Params{Amount: p.Amount, Currency: p.Currency, Customer: p.Customer, Description: p.Description}
	id, err := s.cfg.Processor.Charge(ctx, key, params)
	var refused *RefusedError
	switch {
	case errors.Is(err, ErrDeclined):
		st[stateOutcome] = StatusDeclined
	case errors.As(err, &refused):
		s.cfg.Logger.ErrorContext(ctx, "payments: the processor refused the charge request; the payment failed, nothing was charged",
			"client_id", scope.ClientID, "payment_id", p.ID, "status", refused.Status, "err", err)
		st[stateOutcome], st[stateRefusal] = StatusFailed, strconv.Itoa(refused.Status)
	case err != nil:
		s.cfg.Logger.WarnContext(ctx, "payments: the processor did not confirm the charge; the payment stays pending", "client_id", scope.ClientID, "err", err)
		return "", err
	default:
		st[stateOutcome], st[stateCharge] = StatusSucceeded, id
	}
	return pointChargeCreated, nil
}

// settle records the outcome on the payment, with its event, and answers
// it with answer.
func (s *Service) settle(ctx context.Context, w http.ResponseWriter, st idem.State, answer paymentAnswer) (string, error) {
	scope, _ := idem.ScopeFromContext(ctx)
	p, err := s.cfg.Repo.(settler).Settle(ctx, scope.ClientID, st[statePayment], st[stateOutcome])
	if err != nil {
		return "", err
	}
	if err := s.enqueuePaymentEvent(ctx, p); err != nil {
		return "", err
	}
	answer(w, p, st[stateRefusal])
	return idemstore.RecoveryFinished, nil
}

// answerHTTP is the HTTP API's answer of a settled payment.
func answerHTTP(w http.ResponseWriter, p *Payment, refusal string) {
	w.Header().Set("Location", "/v1/payments/"+p.ID)
	switch p.Status {
	case StatusDeclined:
		problem(w, ProblemDeclined, "The card processor declined the charge; payment "+p.ID+" was recorded as declined.")
		return
	case StatusFailed:
		problem(w, ProblemFailed, "The card processor refused the charge request (it answered HTTP "+refusal+"), "+
			"which is not a decline of the card: nothing was charged, and payment "+p.ID+" was recorded as failed. "+
			"Try again later with a new Idempotency-Key; contact support if it persists.")
		return
	}
	writeJSON(w, http.StatusCreated, p)
}

// settleReturning is the columns of a payment that Settle returns.
const settleReturning = `RETURNING id, amount, currency, customer, description, status, created, idempotency_key`

// Settle implements settler.
func (r *SQLiteRepo) Settle(ctx context.Context, clientID, id, status string) (*Payment, error) {
	tx, err := idemsqlite.TxFromContext(ctx)
	if err != nil {
		return nil, err
	}
	p := &Payment{Object: "payment", ClientID: clientID}
	err = tx.QueryRowContext(ctx, `UPDATE payments SET status = ? WHERE client_id = ? AND id = ? AND status = 'pending' `+settleReturning,
		status, clientID, id).Scan(&p.ID, &p.Amount, &p.Currency, &p.Customer, &p.Description, &p.Status, &p.Created, &p.IdempotencyKey)
	return settled(p, id, err, errors.Is(err, sql.ErrNoRows))
}

// Settle implements settler.
func (r *PostgresRepo) Settle(ctx context.Context, clientID, id, status string) (*Payment, error) {
	tx, err := idempg.TxFromContext(ctx)
	if err != nil {
		return nil, err
	}
	p := &Payment{Object: "payment", ClientID: clientID}
	err = tx.QueryRow(ctx, `UPDATE payments SET status = $1 WHERE client_id = $2 AND id = $3 AND status = 'pending' `+settleReturning,
		status, clientID, id).Scan(&p.ID, &p.Amount, &p.Currency, &p.Customer, &p.Description, &p.Status, &p.Created, &p.IdempotencyKey)
	return settled(p, id, err, errors.Is(err, pgx.ErrNoRows))
}

// settled is Settle's answer after its statement returned err; none says
// that no pending payment matched.
func settled(p *Payment, id string, err error, none bool) (*Payment, error) {
	switch {
	case none:
		return nil, fmt.Errorf("payments: settle %s: no pending payment", id)
	case err != nil:
		return nil, fmt.Errorf("payments: settle: %w", err)
	}
	return p, nil
}

// SimulatedProcessor is an in-process card processor, for running the
// service with nothing else: it charges once per idempotency key, and
// declines amounts whose last two digits are 02, as processord does.
type SimulatedProcessor struct {
	mu      sync.Mutex
	charges map[string]string // key -> charge id
}

var _ Processor = (*SimulatedProcessor)(nil)

// NewSimulatedProcessor returns a processor with no charges.
func NewSimulatedProcessor() *SimulatedProcessor {
	return &SimulatedProcessor{charges: map[string]string{}}
}

// Charge implements Processor.
func (p *SimulatedProcessor) Charge(ctx context.Context, key string, params Params) (string, error) {
	if key == "" {
		return "", errors.New("payments: simulated processor: a charge needs an idempotency key")
	}
	if params.Amount%100 == 2 {
		return "", fmt.Errorf("payments: simulated processor: amount %d: %w", params.Amount, ErrDeclined)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	id, ok := p.charges[key]
	if !ok {
		id = "ch_" + rand.Text()
		p.charges[key] = id
	}
	return id, nil
}

// Charges returns the number of distinct charges made.
func (p *SimulatedProcessor) Charges() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.charges)
}
