package payments_test

import (
	"context"
	"errors"
	"net/url"
	"path/filepath"
	"testing"
	"unicode/utf8"

	"github.com/idemkit/idem/cmd/internal/database"
	"github.com/idemkit/idem/cmd/internal/payments"
	"github.com/idemkit/idem/internal/pgtest"
)

// ledgers opens the ledger on SQLite and on PostgreSQL.
func ledgers(f *testing.F) []payments.LedgerRepo {
	f.Helper()
	ctx := context.Background()
	var out []payments.LedgerRepo
	pg, err := url.Parse(pgtest.NewDatabase(f))
	if err != nil {
		f.Fatal(err)
	}
	q := pg.Query()
	q.Set("pool_max_conns", "2")
	pg.RawQuery = q.Encode()
	for _, u := range []string{"sqlite:" + filepath.Join(f.TempDir(), "fuzz.db"), pg.String()} {
		db, err := database.Open(ctx, u, &database.Config{Migrate: true, Logger: quiet})
		if err != nil {
			f.Fatal(err)
		}
		f.Cleanup(db.Close)
		l, err := payments.NewLedgerRepo(ctx, db)
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, l)
	}
	return out
}

// FuzzParseAccountParams: whatever the parser accepts is an account that
// both stores keep and give back unchanged; whatever it refuses is refused
// with a *ParamError.
func FuzzParseAccountParams(f *testing.F) {
	for _, seed := range []struct {
		form bool
		body string
	}{
		{false, `{"currency":"usd","balance":0}`},
		{false, `{"currency":"EUR","balance":9007199254740991}`},
		{false, `{"currency":"usd","balance":0e7}`},
		{false, `{"currency":"usd","balance":-0}`},
		{false, `{"currency":"usd","balance":1.5}`},
		{true, "currency=usd&balance=4.2e3"},
	} {
		f.Add(seed.form, []byte(seed.body))
	}
	ctx := context.Background()
	repos := ledgers(f)
	f.Fuzz(func(t *testing.T, form bool, body []byte) {
		params, ok := parseFuzzed(t, "ParseAccountParams", payments.ParseAccountParams, form, body)
		if !ok {
			return
		}
		if params.Balance < 0 || params.Balance > payments.MaxAmount || len(params.Currency) != 3 {
			t.Fatalf("ParseAccountParams(%q) accepted %+v", body, params)
		}
		for _, repo := range repos {
			a := &payments.Account{
				ID: payments.NewAccountID(), Object: "account", Currency: params.Currency, Balance: params.Balance,
				Created: 1, ClientID: "fuzz", IdempotencyKey: "k",
			}
			if err := repo.CreateAccount(ctx, a); err != nil {
				t.Fatalf("%T: create %+v parsed from %q: %v", repo, params, body, err)
			}
			if got, err := repo.Account(ctx, "fuzz", a.ID); err != nil || *got != *a {
				t.Fatalf("%T: stored %+v, read back %+v (err %v)", repo, a, got, err)
			}
		}
	})
}

// FuzzParseTransferParams: whatever the parser accepts can be looked up in
// both stores, which answer that the accounts are not found, never fail;
// whatever it refuses is refused with a *ParamError. A NUL or invalid
// UTF-8 in an account id would fail PostgreSQL's lookup with a 500.
func FuzzParseTransferParams(f *testing.F) {
	for _, seed := range []struct {
		form bool
		body string
	}{
		{false, `{"from":"acct_A","to":"acct_B","amount":1}`},
		{false, `{"from":"acct_A","to":"acct_A","amount":1}`},
		{false, `{"from":"a\u0000","to":"b","amount":1}`},
		{false, `{"from":"Zoë","to":"\ud83d\ude00","amount":4.2e3}`},
		{true, "from=acct_A&to=acct_B&amount=100"},
		{true, "from=%FF&to=b&amount=1"},
	} {
		f.Add(seed.form, []byte(seed.body))
	}
	ctx := context.Background()
	repos := ledgers(f)
	f.Fuzz(func(t *testing.T, form bool, body []byte) {
		params, ok := parseFuzzed(t, "ParseTransferParams", payments.ParseTransferParams, form, body)
		if !ok {
			return
		}
		if params.Amount < 1 || params.Amount > payments.MaxAmount || params.From == params.To ||
			!utf8.ValidString(params.From) || !utf8.ValidString(params.To) {
			t.Fatalf("ParseTransferParams(%q) accepted %+v", body, params)
		}
		for _, repo := range repos {
			tr := &payments.Transfer{
				ID: payments.NewTransferID(), From: params.From, To: params.To, Amount: params.Amount,
				Created: 1, ClientID: "fuzz", IdempotencyKey: "k",
			}
			var te *payments.TransferError
			if err := repo.Move(ctx, tr); !errors.As(err, &te) || !errors.Is(err, payments.ErrAccountNotFound) {
				t.Fatalf("%T: Move %+v parsed from %q = %v, want a TransferError for an account not found", repo, params, body, err)
			}
		}
	})
}
