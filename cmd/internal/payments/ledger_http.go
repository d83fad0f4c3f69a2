package payments

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
)

// newLedgerMiddleware returns the idem middleware of the ledger routes:
// the service's, in idem.ModeAtomic whatever ic.Mode says. A transfer is
// pure database work, so the money, the transfer row, its event and the
// stored response commit in one transaction or not at all, and a
// transaction conflict reruns the whole request.
func newLedgerMiddleware(store idemstore.Store, ic idem.Config) (*idem.Middleware, error) {
	ic.Mode = idem.ModeAtomic
	return idem.New(store, &ic)
}

// ledgerRoutes serves the accounts and transfers API on mux.
func (s *Service) ledgerRoutes(mux *http.ServeMux, auth Authenticator) {
	mux.Handle("POST /v1/accounts", auth.Wrap(routePath(s.ledgerMW.Wrap(http.HandlerFunc(s.createAccount)))))
	mux.Handle("GET /v1/accounts/{id}", auth.Wrap(http.HandlerFunc(s.getAccount)))
	mux.Handle("POST /v1/transfers", auth.Wrap(routePath(s.ledgerMW.Wrap(http.HandlerFunc(s.createTransfer)))))
	mux.Handle("GET /v1/transfers/{id}", auth.Wrap(http.HandlerFunc(s.getTransfer)))
}

// createAccount is POST /v1/accounts: an account of the calling client
// with an opening balance.
func (s *Service) createAccount(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		problem(w, idem.ProblemBodyMalformed.Kind(), "The request body could not be read; no account was created.")
		return
	}
	params, err := ParseAccountParams(r.Header.Get("Content-Type"), body)
	if err != nil {
		WriteParamProblem(w, err)
		return
	}
	client, _ := ClientFromContext(r.Context())
	scope, _ := idem.ScopeFromContext(r.Context())
	a := &Account{
		ID: NewAccountID(), Object: "account", Currency: params.Currency, Balance: params.Balance,
		Created: s.cfg.Now().Unix(), ClientID: client, IdempotencyKey: scope.Key,
	}
	if err := s.cfg.Ledger.CreateAccount(r.Context(), a); claimRefused(err) {
		w.WriteHeader(http.StatusConflict) // the middleware answers from the key
		return
	} else if err != nil {
		s.cfg.Logger.ErrorContext(r.Context(), "payments: create account failed", "client_id", client, "err", err)
		writeFailure(w, err, "The account could not be created, and nothing was recorded. Retry with the same Idempotency-Key.")
		return
	}
	w.Header().Set("Location", "/v1/accounts/"+a.ID)
	writeJSON(w, http.StatusCreated, a)
}

// createTransfer is POST /v1/transfers. In the request's transaction it
// locks both accounts, moves the amount, records the transfer and enqueues
// transfer.created; the middleware stores the response in the same
// transaction. Insufficient funds is answered 402 and stored; a refused
// parameter is answered 400 and not stored; a failure is answered 503
// when the database could not be used and 500 otherwise, and everything
// rolls back.
func (s *Service) createTransfer(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		problem(w, idem.ProblemBodyMalformed.Kind(), "The request body could not be read; nothing was moved.")
		return
	}
	client, _ := ClientFromContext(r.Context())
	scope, _ := idem.ScopeFromContext(r.Context())
	s.applyTransfer(r.Context(), w, client, scope.Key, r.Header.Get("Content-Type"), body)
}

// applyTransfer applies the transfer that body asks for, for the client
// and under the key, and answers w: the work of POST /v1/transfers, and of
// a transfer command taken from a queue (see TransferConsumer). ctx is the
// middleware's or the consumer's, which carries the transaction.
func (s *Service) applyTransfer(ctx context.Context, w http.ResponseWriter, client, key, contentType string, body []byte) {
	params, err := ParseTransferParams(contentType, body)
	if err != nil {
		WriteParamProblem(w, err)
		return
	}
	t := &Transfer{
		ID: NewTransferID(), Object: "transfer", From: params.From, To: params.To, Amount: params.Amount,
		Created: s.cfg.Now().Unix(), ClientID: client, IdempotencyKey: key,
	}
	err = s.cfg.Ledger.Move(ctx, t)
	if err == nil {
		err = s.enqueueEvent(ctx, "transfer-event:"+t.ID, EventTransferCreated, t)
	}
	var te *TransferError
	switch {
	case claimRefused(err):
		w.WriteHeader(http.StatusConflict) // the middleware answers from the key
		return
	case errors.As(err, &te):
		WriteParamProblem(w, &ParamError{Param: te.Param, Reason: transferReason(te)})
		return
	case errors.Is(err, ErrInsufficientFunds):
		problem(w, ProblemInsufficientFunds, fmt.Sprintf("Account %s holds less than %d; nothing was moved and no transfer was recorded.", t.From, t.Amount))
		return
	case err != nil:
		s.cfg.Logger.ErrorContext(ctx, "payments: transfer failed", "client_id", client, "err", err)
		writeFailure(w, err, "The transfer failed and was rolled back: no money was moved. Retry with the same Idempotency-Key.")
		return
	}
	w.Header().Set("Location", "/v1/transfers/"+t.ID)
	writeJSON(w, http.StatusCreated, t)
}

// transferReason says why Move refused a parameter.
func transferReason(te *TransferError) string {
	switch {
	case errors.Is(te.Err, ErrAccountNotFound):
		return "names no account of yours"
	case errors.Is(te.Err, ErrCurrencyMismatch):
		return "must be an account in the currency of from"
	case errors.Is(te.Err, ErrBalanceLimit):
		return fmt.Sprintf("would take the balance of to beyond %d", int64(MaxAmount))
	}
	return "is invalid"
}

func (s *Service) getAccount(w http.ResponseWriter, r *http.Request) {
	client, _ := ClientFromContext(r.Context())
	a, err := s.cfg.Ledger.Account(r.Context(), client, r.PathValue("id"))
	switch {
	case errors.Is(err, ErrAccountNotFound):
		problem(w, ProblemNotFound, "You have no account with this id.")
	case err != nil:
		s.cfg.Logger.ErrorContext(r.Context(), "payments: read account failed", "client_id", client, "err", err)
		problem(w, ProblemInternal, "The account could not be read; retry.")
	default:
		writeJSON(w, http.StatusOK, a)
	}
}

func (s *Service) getTransfer(w http.ResponseWriter, r *http.Request) {
	client, _ := ClientFromContext(r.Context())
	t, err := s.cfg.Ledger.Transfer(r.Context(), client, r.PathValue("id"))
	switch {
	case errors.Is(err, ErrTransferNotFound):
		problem(w, ProblemNotFound, "You have no transfer with this id.")
	case err != nil:
		s.cfg.Logger.ErrorContext(r.Context(), "payments: read transfer failed", "client_id", client, "err", err)
		problem(w, ProblemInternal, "The transfer could not be read; retry.")
	default:
		writeJSON(w, http.StatusOK, t)
	}
}
