package openapicheck

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/internal/database"
	"github.com/idemkit/idem/cmd/internal/payments"
	"github.com/idemkit/idem/internal/bearer"
)

// service serves paymentsd's routes on SQLite, as paymentsd does, and
// returns its URL and the database, which a test may close to make the
// store fail.
func service(t *testing.T) (string, *database.DB) {
	t.Helper()
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	db, err := database.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "p.db"), &database.Config{Migrate: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	repo, err := payments.NewRepo(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	ledger, err := payments.NewLedgerRepo(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := bearer.Parse("sk_a=alice,sk_b=bob")
	if err != nil {
		t.Fatal(err)
	}
	svc, err := payments.NewService(payments.Config{
		Repo: repo, Store: db.Store(), Ledger: ledger, Tokens: tokens, Logger: quiet, Idem: idem.Config{Logger: quiet},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(svc.Handler())
	t.Cleanup(srv.Close)
	return srv.URL, db
}

// exchange is one request of the tour and the status it must get.
type exchange struct {
	name    string
	method  string
	path    string
	headers map[string]string
	body    string
	status  int
}

func TestTourMatchesOpenAPIDocument(t *testing.T) {
	base, db := service(t)
	res, err := http.Get(base + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := io.ReadAll(res.Body)
	res.Body.Close()
	doc, err := libopenapi.NewDocument(spec)
	if err != nil {
		t.Fatalf("libopenapi cannot read /openapi.json: %v", err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatalf("validator: %v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Errorf("/openapi.json: %s: %s", e.Message, e.Reason)
		}
	}

	json := map[string]string{"Content-Type": "application/json", "Authorization": "Bearer sk_a"}
	with := func(h map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range h {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "" {
				delete(out, kv[i])
			} else {
				out[kv[i]] = kv[i+1]
			}
		}
		return out
	}
	body := `{"amount":4200,"currency":"usd","customer":"cus_123"}`
	tour := []exchange{
		{"Create", "POST", "/v1/payments", with(json, "Idempotency-Key", `"tour-1"`), body, 201},
		{"Replay", "POST", "/v1/payments", with(json, "Idempotency-Key", `"tour-1"`), body, 201},
		{"KeyReusedWithAnotherBody", "POST", "/v1/payments", with(json, "Idempotency-Key", `"tour-1"`), `{"amount":4300,"currency":"usd","customer":"cus_123"}`, 422},
		{"MissingKey", "POST", "/v1/payments", json, body, 400},
		{"MalformedKey", "POST", "/v1/payments", with(json, "Idempotency-Key", `"`+strings.Repeat("k", 300)+`"`), body, 400},
		{"NoCredentials", "POST", "/v1/payments", with(json, "Idempotency-Key", `"tour-2"`, "Authorization", ""), body, 401},
		{"InvalidParameter", "POST", "/v1/payments", with(json, "Idempotency-Key", `"tour-3"`), `{"amount":-1,"currency":"usd","customer":"cus_123"}`, 400},
		{"UnsupportedMediaType", "POST", "/v1/payments", with(json, "Idempotency-Key", `"tour-4"`, "Content-Type", "text/plain"), body, 415},
		{"TooLarge", "POST", "/v1/payments", with(json, "Idempotency-Key", `"tour-5"`), `{"pad":"` + strings.Repeat("x", 2<<20) + `"}`, 413},
		{"UnknownPayment", "GET", "/v1/payments/pay_unknown", map[string]string{"Authorization": "Bearer sk_a"}, "", 404},
		{"Health", "GET", "/healthz", nil, "", 200},
	}
	var created string
	for _, x := range tour {
		res := check(t, v, base, x)
		if x.name == "Create" {
			created = res.Header.Get("Location")
		}
	}
	if created == "" {
		t.Fatalf("the create answered no Location")
	}
	check(t, v, base, exchange{"GetPayment", "GET", created, map[string]string{"Authorization": "Bearer sk_a"}, "", 200})
	check(t, v, base, exchange{"OtherClientsPayment", "GET", created, map[string]string{"Authorization": "Bearer sk_b"}, "", 404})
	check(t, v, base, exchange{"KeyStatus", "GET", "/v1/idempotency-keys/tour-1", map[string]string{"Authorization": "Bearer sk_a"}, "", 200})
	check(t, v, base, exchange{"OtherClientsKeyStatus", "GET", "/v1/idempotency-keys/tour-1", map[string]string{"Authorization": "Bearer sk_b"}, "", 404})
	check(t, v, base, exchange{"Ready", "GET", "/readyz", nil, "", 200})

	// The ledger: two accounts, a transfer, its replay, an overdraft and
	// refused parameters.
	accountIDs := make([]string, 2)
	for i := range accountIDs {
		res := check(t, v, base, exchange{"OpenAccount", "POST", "/v1/accounts", with(json, "Idempotency-Key", fmt.Sprintf(`"acct-%d"`, i)), `{"currency":"usd","balance":1000}`, 201})
		accountIDs[i] = strings.TrimPrefix(res.Header.Get("Location"), "/v1/accounts/")
	}
	transfer := fmt.Sprintf(`{"from":%q,"to":%q,"amount":300}`, accountIDs[0], accountIDs[1])
	tr := check(t, v, base, exchange{"Transfer", "POST", "/v1/transfers", with(json, "Idempotency-Key", `"tr-1"`), transfer, 201})
	check(t, v, base, exchange{"TransferReplay", "POST", "/v1/transfers", with(json, "Idempotency-Key", `"tr-1"`), transfer, 201})
	check(t, v, base, exchange{"GetTransfer", "GET", tr.Header.Get("Location"), map[string]string{"Authorization": "Bearer sk_a"}, "", 200})
	check(t, v, base, exchange{"GetAccount", "GET", "/v1/accounts/" + accountIDs[0], map[string]string{"Authorization": "Bearer sk_a"}, "", 200})
	check(t, v, base, exchange{"OtherClientsAccount", "GET", "/v1/accounts/" + accountIDs[0], map[string]string{"Authorization": "Bearer sk_b"}, "", 404})
	check(t, v, base, exchange{"InsufficientFunds", "POST", "/v1/transfers", with(json, "Idempotency-Key", `"tr-2"`),
		fmt.Sprintf(`{"from":%q,"to":%q,"amount":5000}`, accountIDs[0], accountIDs[1]), 402})
	check(t, v, base, exchange{"TransferToItself", "POST", "/v1/transfers", with(json, "Idempotency-Key", `"tr-3"`),
		fmt.Sprintf(`{"from":%q,"to":%q,"amount":1}`, accountIDs[0], accountIDs[0]), 400})
	check(t, v, base, exchange{"TransferKeyReused", "POST", "/v1/transfers", with(json, "Idempotency-Key", `"tr-1"`),
		fmt.Sprintf(`{"from":%q,"to":%q,"amount":301}`, accountIDs[0], accountIDs[1]), 422})

	// The store fails: 503 with a problem document.
	db.Close()
	check(t, v, base, exchange{"StoreUnavailable", "POST", "/v1/payments", with(json, "Idempotency-Key", `"tour-6"`), body, 503})
	check(t, v, base, exchange{"NotReady", "GET", "/readyz", nil, "", 503})
}

// check sends x, checks its status, and validates the request and the
// response against the document.
func check(t *testing.T, v validator.Validator, base string, x exchange) *http.Response {
	t.Helper()
	newReq := func() *http.Request {
		req, err := http.NewRequest(x.method, base+x.path, strings.NewReader(x.body))
		if err != nil {
			t.Fatal(err)
		}
		if x.body == "" {
			req.Body = http.NoBody
		}
		for k, val := range x.headers {
			req.Header.Set(k, val)
		}
		return req
	}
	res, err := http.DefaultClient.Do(newReq())
	if err != nil {
		t.Fatalf("%s: %v", x.name, err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != x.status {
		t.Errorf("%s: status %d, want %d: %s", x.name, res.StatusCode, x.status, body)
	}
	res.Body = io.NopCloser(bytes.NewReader(body))
	req := newReq()
	res.Request = req
	// Requests that the service must refuse need not match the document;
	// their responses must.
	if x.status < 400 {
		if ok, errs := v.ValidateHttpRequest(req); !ok {
			for _, e := range errs {
				t.Errorf("%s: request: %s: %s", x.name, e.Message, e.Reason)
			}
		}
		req = newReq()
	}
	if ok, errs := v.ValidateHttpResponse(req, res); !ok {
		for _, e := range errs {
			t.Errorf("%s: response %d: %s: %s", x.name, res.StatusCode, e.Message, e.Reason)
		}
	}
	res.Body = io.NopCloser(bytes.NewReader(body))
	return res
}
