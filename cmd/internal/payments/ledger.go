package payments

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/internal/database"
)

// Account is a ledger account of one client, in one currency.
type Account struct {
	ID       string `json:"id"`
	Object   string `json:"object"`
	Currency string `json:"currency"`
	// Balance is in the currency's minor unit, from 0 to MaxAmount.
	Balance int64 `json:"balance"`
	Created int64 `json:"created"`

	ClientID       string `json:"-"`
	IdempotencyKey string `json:"-"`
}

// Transfer is money moved from one account of a client to another.
type Transfer struct {
	ID       string `json:"id"`
	Object   string `json:"object"`
	From     string `json:"from"`
	To       string `json:"to"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	Created  int64  `json:"created"`

	ClientID       string `json:"-"`
	IdempotencyKey string `json:"-"`
}

// AccountParams are the validated inputs of a new account.
type AccountParams struct {
	Currency string
	// Balance is the opening balance, from 0 to MaxAmount.
	Balance int64
}

// TransferParams are the validated inputs of a new transfer.
type TransferParams struct {
	From   string
	To     string
	Amount int64
}

// LedgerRepo stores accounts and transfers. Every method is scoped to a
// client: another client's accounts and transfers do not exist for it.
// Writes run in the transaction that the idem middleware opened for the
// request, so they commit together with the stored response.
type LedgerRepo interface {
	// CreateAccount records a.
	CreateAccount(ctx context.Context, a *Account) error
	// Account returns an account of the client, or ErrAccountNotFound.
	Account(ctx context.Context, clientID, id string) (*Account, error)
	// Move locks both accounts, the lower id first, checks them, moves
	// t.Amount and records t, with t.Currency set from the accounts. It
	// fails with a *TransferError (wrapping ErrAccountNotFound,
	// ErrCurrencyMismatch or ErrBalanceLimit) or ErrInsufficientFunds,
	// having changed nothing.
	Move(ctx context.Context, t *Transfer) error
	// Transfer returns a transfer of the client, or ErrTransferNotFound.
	Transfer(ctx context.Context, clientID, id string) (*Transfer, error)
	// TransfersByKey returns the transfers made with a client's key, for
	// tests and operators checking that a key moved money at most once.
	TransfersByKey(ctx context.Context, clientID, key string) ([]*Transfer, error)
}

// NewLedgerRepo returns the ledger repository in db, creating its tables
// if needed.
func NewLedgerRepo(ctx context.Context, db *database.DB) (LedgerRepo, error) {
	switch {
	case db.SQLite != nil:
		return NewSQLiteLedger(ctx, db.SQLite)
	case db.MySQL != nil:
		return NewMySQLLedger(ctx, db.MySQL)
	}
	return NewPostgresLedger(ctx, db.Pool, db.NoAdvisoryLocks)
}

// Errors of the ledger.
var (
	ErrAccountNotFound   = errors.New("payments: account not found")
	ErrTransferNotFound  = errors.New("payments: transfer not found")
	ErrCurrencyMismatch  = errors.New("payments: the accounts hold different currencies")
	ErrBalanceLimit      = errors.New("payments: the balance would exceed its limit")
	ErrInsufficientFunds = errors.New("payments: insufficient funds")
)

// TransferError says which parameter of a transfer made Move refuse it.
type TransferError struct {
	Param string // "from", "to" or "amount"
	Err   error
}

func (e *TransferError) Error() string {
	return fmt.Sprintf("payments: transfer %s: %v", e.Param, e.Err)
}
func (e *TransferError) Unwrap() error { return e.Err }

// Event types of the ledger.
const EventTransferCreated = "transfer.created"

// ProblemInsufficientFunds answers a transfer whose source account holds
// less than the amount. It is 402, not 409: in this API 409 means that a
// request with the key is still in flight, which clients (idemclient among
// them) retry; an insufficient balance is a definitive outcome, stored
// with the key and replayed, as a declined payment's 402 is.
var ProblemInsufficientFunds = idem.ProblemKind{Code: "insufficient-funds", Status: http.StatusPaymentRequired, Title: "Insufficient funds",
	About: "The source account holds less than the amount. Nothing was moved and no transfer was recorded. A retry with the same Idempotency-Key replays this answer, even if the account has been credited since; a new attempt needs a new key."}

// Parameter names of the ledger's requests.
var (
	accountNames  = map[string]bool{"currency": true, "balance": true}
	transferNames = map[string]bool{"from": true, "to": true, "amount": true}
)

// ParseAccountParams reads the parameters of a new account from a JSON or
// form-encoded body: a three-letter currency and an opening balance, an
// integer from 0 to MaxAmount read exactly.
func ParseAccountParams(contentType string, body []byte) (AccountParams, error) {
	src, err := readBody(contentType, body, accountNames)
	if err != nil {
		return AccountParams{}, err
	}
	var p AccountParams
	if p.Currency, err = currencyParam(src); err != nil {
		return AccountParams{}, err
	}
	balance, ok, err := src.number("balance")
	switch {
	case err != nil:
		return AccountParams{}, err
	case !ok:
		return AccountParams{}, &ParamError{Param: "balance", Reason: "is required"}
	}
	if p.Balance, err = parseBalance(balance); err != nil {
		return AccountParams{}, err
	}
	return p, nil
}

// ParseTransferParams reads the parameters of a new transfer from a JSON or
// form-encoded body: two different account ids and an amount, an integer
// from 1 to MaxAmount read exactly.
func ParseTransferParams(contentType string, body []byte) (TransferParams, error) {
	src, err := readBody(contentType, body, transferNames)
	if err != nil {
		return TransferParams{}, err
	}
	var p TransferParams
	if p.From, err = accountParam(src, "from"); err != nil {
		return TransferParams{}, err
	}
	if p.To, err = accountParam(src, "to"); err != nil {
		return TransferParams{}, err
	}
	if p.From == p.To {
		return TransferParams{}, &ParamError{Param: "to", Reason: "must be another account than from"}
	}
	amount, ok, err := src.number("amount")
	switch {
	case err != nil:
		return TransferParams{}, err
	case !ok:
		return TransferParams{}, &ParamError{Param: "amount", Reason: "is required"}
	}
	if p.Amount, err = parseAmount(amount); err != nil {
		return TransferParams{}, err
	}
	return p, nil
}

func currencyParam(src source) (string, error) {
	cur, ok, err := src.text("currency")
	switch {
	case err != nil:
		return "", err
	case !ok:
		return "", &ParamError{Param: "currency", Reason: "is required"}
	case len(cur) != 3 || !isLetters(cur):
		return "", &ParamError{Param: "currency", Reason: "must be a three-letter ISO 4217 code"}
	}
	return strings.ToLower(cur), nil
}

// accountIDMax is the longest account id a request may name; the ids this
// service makes are 31 characters.
const accountIDMax = 64

func accountParam(src source, name string) (string, error) {
	id, ok, err := src.text(name)
	switch {
	case err != nil:
		return "", err
	case !ok:
		return "", &ParamError{Param: name, Reason: "is required"}
	}
	if reason := checkString(id, 1, accountIDMax, false); reason != "" {
		return "", &ParamError{Param: name, Reason: reason}
	}
	return id, nil
}

// parseBalance reads an opening balance exactly: 0 or an amount.
func parseBalance(s string) (int64, error) {
	if digits, _, ok := decimal(s); ok && digits == "" {
		return 0, nil
	}
	n, err := parseAmount(s)
	if err != nil {
		return 0, &ParamError{Param: "balance", Reason: fmt.Sprintf("must be an integer from 0 to %d in the currency's minor unit", int64(MaxAmount))}
	}
	return n, nil
}

// NewAccountID returns a new account id: "acct_" and 26 random base32
// characters (128 bits).
func NewAccountID() string { return "acct_" + rand.Text() }

// NewTransferID returns a new transfer id: "tr_" and 26 random base32
// characters (128 bits).
func NewTransferID() string { return "tr_" + rand.Text() }

// ledgerRow is what Move reads of a locked account.
type ledgerRow struct {
	currency string
	balance  int64
}

// lockInOrder locks t's two accounts with lock, the lower id first, and
// returns them as from and to. Every transfer takes its locks in this one
// order, so two transfers between the same accounts, in either direction,
// wait for each other instead of deadlocking.
func lockInOrder(t *Transfer, lock func(id string) (ledgerRow, error)) (from, to ledgerRow, err error) {
	first, second := t.From, t.To
	if second < first {
		first, second = second, first
	}
	rows := make(map[string]ledgerRow, 2)
	for _, id := range []string{first, second} {
		row, err := lock(id)
		if errors.Is(err, ErrAccountNotFound) {
			param := "from"
			if id == t.To {
				param = "to"
			}
			return ledgerRow{}, ledgerRow{}, &TransferError{Param: param, Err: err}
		}
		if err != nil {
			return ledgerRow{}, ledgerRow{}, err
		}
		rows[id] = row
	}
	return rows[t.From], rows[t.To], nil
}

// checkMove refuses a transfer between accounts in different currencies,
// one that would overdraw from, and one that would take to's balance
// beyond MaxAmount.
func checkMove(t *Transfer, from, to ledgerRow) error {
	switch {
	case from.currency != to.currency:
		return &TransferError{Param: "to", Err: ErrCurrencyMismatch}
	case from.balance < t.Amount:
		return ErrInsufficientFunds
	case to.balance > MaxAmount-t.Amount:
		return &TransferError{Param: "amount", Err: ErrBalanceLimit}
	}
	return nil
}
