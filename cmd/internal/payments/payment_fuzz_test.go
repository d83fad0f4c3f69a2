package payments_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"unicode/utf8"

	"github.com/idemkit/idem/cmd/internal/database"
	"github.com/idemkit/idem/cmd/internal/payments"
	"github.com/idemkit/idem/internal/pgtest"
)

// parseFuzzed parses a fuzzed body, JSON or form, with parse, named name.
// It fails t unless a refusal is a *ParamError that names a parameter, and
// reports whether the body was accepted.
func parseFuzzed[P any](t *testing.T, name string, parse func(contentType string, body []byte) (P, error), form bool, body []byte) (P, bool) {
	t.Helper()
	ct := jsonType
	if form {
		ct = formType
	}
	params, err := parse(ct, body)
	if err != nil {
		var pe *payments.ParamError
		if !errors.As(err, &pe) || pe.Param == "" {
			t.Fatalf("%s(%q) = %v, want a *ParamError naming a parameter", name, body, err)
		}
		return params, false
	}
	return params, true
}

// FuzzParseParams: whatever the request parser accepts, JSON or form, is a
// valid payment that both stores keep and give back unchanged; whatever it
// refuses is refused with a *ParamError. A PostgreSQL text column cannot
// hold NUL, which SQLite stores: a parser that let one through would fail
// here on PostgreSQL only.
func FuzzParseParams(f *testing.F) {
	for _, seed := range []struct {
		form bool
		body string
	}{
		{false, `{"amount":4200,"currency":"usd","customer":"cus_123","description":"Order 7"}`},
		{false, `{"amount":4.2e3,"currency":"EUR","customer":"Zoë \ud83d\ude00","description":"line 1\nline 2"}`},
		{false, `{"amount":9007199254740991,"currency":"usd","customer":"a\u0000b"}`},
		{false, `{"amount":0.99999999999999999999,"currency":"usd","customer":"c"}`},
		{true, "amount=100&currency=eur&customer=cus_9&description=%E2%82%AC"},
		{true, "amount=1e3&currency=usd&customer=a%00b"},
	} {
		f.Add(seed.form, []byte(seed.body))
	}
	ctx := context.Background()
	var repos []payments.Repo
	for _, url := range []string{"sqlite:" + filepath.Join(f.TempDir(), "fuzz.db"), pgtest.NewDatabase(f)} {
		db, err := database.Open(ctx, url, &database.Config{Migrate: true, Logger: quiet})
		if err != nil {
			f.Fatal(err)
		}
		f.Cleanup(db.Close)
		repo, err := payments.NewRepo(ctx, db)
		if err != nil {
			f.Fatal(err)
		}
		repos = append(repos, repo)
	}
	f.Fuzz(func(t *testing.T, form bool, body []byte) {
		params, ok := parseFuzzed(t, "ParseParams", payments.ParseParams, form, body)
		if !ok {
			return
		}
		if params.Amount < 1 || params.Amount > payments.MaxAmount || len(params.Currency) != 3 ||
			!utf8.ValidString(params.Customer) || params.Customer == "" || !utf8.ValidString(params.Description) {
			t.Fatalf("ParseParams(%q) accepted %+v", body, params)
		}
		for _, repo := range repos {
			p := &payments.Payment{
				ID: payments.NewID(), Object: "payment", Amount: params.Amount, Currency: params.Currency,
				Customer: params.Customer, Description: params.Description, Status: "succeeded",
				Created: 1, ClientID: "fuzz", IdempotencyKey: "k",
			}
			if err := repo.Insert(ctx, p); err != nil {
				t.Fatalf("%T: insert %+v parsed from %q: %v", repo, params, body, err)
			}
			got, err := repo.Get(ctx, "fuzz", p.ID)
			if err != nil || *got != *p {
				t.Fatalf("%T: stored %+v, read back %+v (err %v)", repo, p, got, err)
			}
		}
	})
}
