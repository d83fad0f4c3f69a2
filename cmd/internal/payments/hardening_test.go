package payments_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/internal/payments"
)

const formType = "application/x-www-form-urlencoded"

// TestNULCustomerChargesNothing: a customer that a store cannot hold (NUL
// does not fit in PostgreSQL text) is refused with 400 before the card
// processor is called, on both stores, in two-phase mode where the charge
// is made before the payment is recorded.
func TestNULCustomerChargesNothing(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			psrv, proc := startProcessorClient(t)
			f := setupOn(t, kind, idem.ModeTwoPhase, proc)
			for _, tt := range []struct{ name, contentType, body string }{
				{"JSON", jsonType, `{"amount":4321,"currency":"usd","customer":"a\u0000b"}`},
				{"Form", formType, "amount=4321&currency=usd&customer=a%00b"},
			} {
				key := "k-nul-" + tt.name
				r := f.post(t, "sk_alice", key, tt.contentType, tt.body)
				if r.status != http.StatusBadRequest {
					t.Fatalf("%s: status %d, want 400; %s", tt.name, r.status, r.body)
				}
				if p := decode[idem.Problem](t, r.body); p.Code != "invalid-parameter" || p.Param != "customer" {
					t.Errorf("%s: problem %+v, want invalid-parameter naming customer", tt.name, p)
				}
				if n, err := f.repo.Count(context.Background(), "alice", key); err != nil || n != 0 {
					t.Errorf("%s: %d payment rows (err %v), want 0", tt.name, n, err)
				}
			}
			if n := countCharges(t, psrv.URL, "sk_pay", ""); n != 0 {
				t.Errorf("the processor made %d charges, want 0", n)
			}
			// The processor is charged for a valid payment: the count above
			// can see a charge.
			if r := f.post(t, "sk_alice", "k-valid", jsonType, `{"amount":4321,"currency":"usd","customer":"ab"}`); r.status != http.StatusCreated {
				t.Fatalf("valid payment: %d %s", r.status, r.body)
			}
			if n := countCharges(t, psrv.URL, "sk_pay", ""); n != 1 {
				t.Errorf("the processor made %d charges after a valid payment, want 1", n)
			}
		})
	}
}

// TestStringParametersAreCheckedBeforeAnyEffect: every string parameter must
// be valid UTF-8 without control characters, within its length, in JSON and
// form bodies alike; the 400 names the parameter.
func TestStringParametersAreCheckedBeforeAnyEffect(t *testing.T) {
	t.Parallel()
	psrv, proc := startProcessorClient(t)
	f := setup(t, idem.ModeTwoPhase, proc)
	tests := []struct {
		name, contentType, body, param string
	}{
		{"JSONCustomerControl", jsonType, `{"amount":1,"currency":"usd","customer":"a\u0001b"}`, "customer"},
		{"JSONCustomerDEL", jsonType, `{"amount":1,"currency":"usd","customer":"a\u007fb"}`, "customer"},
		{"JSONCustomerC1", jsonType, `{"amount":1,"currency":"usd","customer":"a\u0085b"}`, "customer"},
		{"JSONCustomerNewline", jsonType, `{"amount":1,"currency":"usd","customer":"a\nb"}`, "customer"},
		{"JSONCustomerTooLong", jsonType, `{"amount":1,"currency":"usd","customer":"` + strings.Repeat("é", payments.MaxCustomer+1) + `"}`, "customer"},
		{"JSONDescriptionNUL", jsonType, `{"amount":1,"currency":"usd","customer":"c","description":"a\u0000"}`, "description"},
		{"JSONDescriptionTooLong", jsonType, `{"amount":1,"currency":"usd","customer":"c","description":"` + strings.Repeat("d", payments.MaxDescription+1) + `"}`, "description"},
		{"JSONCurrencyNUL", jsonType, `{"amount":1,"currency":"us\u0000","customer":"c"}`, "currency"},
		{"FormCustomerControl", formType, "amount=1&currency=usd&customer=a%1Fb", "customer"},
		{"FormCustomerInvalidUTF8", formType, "amount=1&currency=usd&customer=a%FFb", "customer"},
		{"FormDescriptionNUL", formType, "amount=1&currency=usd&customer=c&description=%00", "description"},
		{"FormCurrencyNUL", formType, "amount=1&currency=us%00&customer=c", "currency"},
		{"FormEmptyName", formType, "amount=1&currency=usd&customer=c&=x", "body"},
		{"JSONNULName", jsonType, `{"amount":1,"currency":"usd","customer":"c","a\u0000":1}`, "body"},
	}
	t.Run("Refused", func(t *testing.T) { // returns when every subtest has
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				key := "k-" + tt.name
				r := f.post(t, "sk_alice", key, tt.contentType, tt.body)
				if r.status != http.StatusBadRequest {
					t.Fatalf("status %d, want 400; %s", r.status, r.body)
				}
				if p := decode[idem.Problem](t, r.body); p.Code != "invalid-parameter" || p.Param != tt.param || strings.ContainsRune(p.Detail, 0) {
					t.Errorf("problem %+v, want invalid-parameter naming %q", p, tt.param)
				}
				if n, _ := f.repo.Count(context.Background(), "alice", key); n != 0 {
					t.Errorf("%d payment rows, want 0", n)
				}
			})
		}
	})
	if n := countCharges(t, psrv.URL, "sk_pay", ""); n != 0 {
		t.Errorf("the processor made %d charges for refused requests, want 0", n)
	}
	ok := f.post(t, "sk_alice", "k-lines", jsonType, `{"amount":1,"currency":"usd","customer":"c é","description":"line 1\nline 2\ttab"}`)
	if ok.status != http.StatusCreated {
		t.Fatalf("a description with line breaks: %d %s, want 201", ok.status, ok.body)
	}
	if p := decode[payments.Payment](t, ok.body); p.Description != "line 1\nline 2\ttab" || p.Customer != "c é" {
		t.Errorf("payment %+v", p)
	}
}

// TestParseParamsRefusesInvalidUTF8InJSON: encoding/json would turn the
// bytes into U+FFFD; the parser refuses them instead. (The middleware's
// fingerprint refuses such a body first; the parser does not rely on it.)
func TestParseParamsRefusesInvalidUTF8InJSON(t *testing.T) {
	t.Parallel()
	for body, param := range map[string]string{
		"{\"amount\":1,\"currency\":\"usd\",\"customer\":\"a\xffb\"}":                     "customer",
		"{\"amount\":1,\"currency\":\"usd\",\"customer\":\"c\",\"description\":\"\xc3\"}": "description",
		"{\"amount\":1,\"currency\":\"us\xff\",\"customer\":\"c\"}":                       "currency",
	} {
		_, err := payments.ParseParams(jsonType, []byte(body))
		var pe *payments.ParamError
		if !errors.As(err, &pe) || pe.Param != param {
			t.Errorf("ParseParams(%q) = %v, want an error naming %s", body, err, param)
		}
	}
}

// TestAmountIsReadExactly: amounts are integers in minor units, read from
// the JSON number's text and never through a float64, on both stores.
func TestAmountIsReadExactly(t *testing.T) {
	t.Parallel()
	tests := []struct {
		amount string
		want   int64 // 0: refused with 400
	}{
		{"9007199254740993", 0}, // 2^53+1: beyond MaxAmount, not rounded to 2^53
		{"9007199254740992", 0},
		{"9007199254740991", payments.MaxAmount},
		{"0.99999999999999999999", 0},
		{"100.00000000000000001", 0},
		{"1e3", 1000},
		{"4.2e3", 4200},
		{"4200.0", 4200},
		{"1E+2", 100},
		{"1e-1", 0},
		{"12e-1", 0},
		{"1e16", 0},
		{"-1", 0},
		{"0", 0},
		{"0.0", 0},
		{"-0", 0},
		{"1", 1},
	}
	for _, kind := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := setupOn(t, kind, idem.ModeAtomic, nil)
			for _, tt := range tests {
				for _, form := range []bool{false, true} {
					ct, body := jsonType, `{"amount":`+tt.amount+`,"currency":"usd","customer":"c"}`
					if form {
						ct, body = formType, "amount="+url.QueryEscape(tt.amount)+"&currency=usd&customer=c"
					}
					r := f.post(t, "sk_alice", "k-amount-"+ct+tt.amount, ct, body)
					if tt.want == 0 {
						if r.status != http.StatusBadRequest || decode[idem.Problem](t, r.body).Param != "amount" {
							t.Errorf("%s amount %s: %d %s, want 400 naming amount", ct, tt.amount, r.status, r.body)
						}
						continue
					}
					if r.status != http.StatusCreated {
						t.Errorf("%s amount %s: %d %s, want 201", ct, tt.amount, r.status, r.body)
						continue
					}
					p := decode[payments.Payment](t, r.body)
					stored, err := f.repo.Get(context.Background(), "alice", p.ID)
					if p.Amount != tt.want || err != nil || stored.Amount != tt.want {
						t.Errorf("%s amount %s: answered %d, stored %v (err %v); want %d", ct, tt.amount, p.Amount, stored, err, tt.want)
					}
				}
			}
		})
	}
}

// TestEscapedPathIsTheSameRoute: POST /v1/%70ayments reaches the payments
// route, so a retry to /v1/payments with the same key is the same request.
func TestEscapedPathIsTheSameRoute(t *testing.T) {
	t.Parallel()
	f := setup(t, idem.ModeAtomic, nil)
	body := `{"amount":4200,"currency":"usd","customer":"c"}`
	h := func() http.Header {
		return http.Header{"Content-Type": {jsonType}, "Authorization": {"Bearer sk_alice"}, "Idempotency-Key": {"k-route"}}
	}
	first := f.do(t, http.MethodPost, "/v1/%70ayments", h(), body)
	if first.status != http.StatusCreated {
		t.Fatalf("POST /v1/%%70ayments: %d %s", first.status, first.body)
	}
	retry := f.do(t, http.MethodPost, "/v1/payments", h(), body)
	if retry.status != http.StatusCreated || retry.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(first.body, retry.body) {
		t.Fatalf("retry to /v1/payments: %d replayed=%q %s, want the replay", retry.status, retry.header.Get("Idempotent-Replayed"), retry.body)
	}
	if n, _ := f.repo.Count(context.Background(), "alice", "k-route"); n != 1 {
		t.Errorf("%d payments, want 1", n)
	}
}

// TestAuthorizationIsParsedStrictly: one Authorization field, the Bearer
// scheme in any case, a token68 token with nothing trimmed.
func TestAuthorizationIsParsedStrictly(t *testing.T) {
	t.Parallel()
	f := setup(t, idem.ModeAtomic, nil)
	tests := []struct {
		name   string
		fields []string
		want   int
	}{
		{"Bearer", []string{"Bearer sk_alice"}, http.StatusCreated},
		{"LowercaseScheme", []string{"bearer sk_alice"}, http.StatusCreated},
		{"NoBreakSpaceBeforeToken", []string{"Bearer \u00a0sk_alice"}, http.StatusUnauthorized},
		{"EmSpaceAfterToken", []string{"Bearer sk_alice\u2003"}, http.StatusUnauthorized},
		{"TwoFields", []string{"Bearer sk_alice", "Bearer sk_bob"}, http.StatusUnauthorized},
		{"TwoFieldsSameToken", []string{"Bearer sk_alice", "Bearer sk_alice"}, http.StatusUnauthorized},
		{"BadCharacter", []string{"Bearer sk_alice!"}, http.StatusUnauthorized},
		{"Prefix", []string{"Bearer sk_alic"}, http.StatusUnauthorized},
		{"Basic", []string{"Basic c2tfYWxpY2U6"}, http.StatusUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{"Content-Type": {jsonType}, "Idempotency-Key": {"k-auth-" + tt.name}, "Authorization": tt.fields}
			r := f.do(t, http.MethodPost, "/v1/payments", h, `{"amount":1,"currency":"usd","customer":"c"}`)
			if r.status != tt.want {
				t.Fatalf("Authorization %q: %d %s, want %d", tt.fields, r.status, r.body, tt.want)
			}
			if tt.want == http.StatusUnauthorized && (r.header.Get("WWW-Authenticate") == "" || decode[idem.Problem](t, r.body).Code != "invalid-credentials") {
				t.Errorf("401 without WWW-Authenticate or the problem: %v %s", r.header, r.body)
			}
		})
	}
}

// TestParseParamsAmountLimits covers numbers that the middleware's
// fingerprint refuses before the parser sees them over HTTP.
func TestParseParamsAmountLimits(t *testing.T) {
	t.Parallel()
	for amount, want := range map[string]int64{
		"1e999999999": 0, "1e-999999999": 0, "10000000000000000000000e-7": 1000000000000000,
		"1" + strings.Repeat("0", 30) + "e-30": 1, "0.5e1": 5, "9007199254740991.000": payments.MaxAmount,
		"01": 0, "1.": 0, ".5": 0, "+1": 0, "1e": 0, "0x10": 0, "1_000": 0, "NaN": 0, "Infinity": 0,
	} {
		for _, ct := range []string{jsonType, formType} {
			body := `{"amount":` + amount + `,"currency":"usd","customer":"c"}`
			if ct == formType {
				body = "amount=" + url.QueryEscape(amount) + "&currency=usd&customer=c"
			}
			p, err := payments.ParseParams(ct, []byte(body))
			var pe *payments.ParamError
			switch {
			case want == 0 && (!errors.As(err, &pe) || (pe.Param != "amount" && pe.Param != "body")):
				t.Errorf("%s amount %q: %+v, %v; want an error", ct, amount, p, err)
			case want != 0 && (err != nil || p.Amount != want):
				t.Errorf("%s amount %q: %d, %v; want %d", ct, amount, p.Amount, err, want)
			}
		}
	}
}

// failOnce fails its first Insert, as a database that refuses a row would.
type failOnce struct {
	payments.Repo
	failed atomic.Bool
}

func (r *failOnce) Insert(ctx context.Context, p *payments.Payment) error {
	if r.failed.CompareAndSwap(false, true) {
		return errors.New("insert refused")
	}
	return r.Repo.Insert(ctx, p)
}

func (r *failOnce) Settle(ctx context.Context, clientID, id, status string) (*payments.Payment, error) {
	return r.Repo.(interface {
		Settle(context.Context, string, string, string) (*payments.Payment, error)
	}).Settle(ctx, clientID, id, status)
}

// TestMessagesSayWhatIsKnown: when the pending payment cannot be recorded,
// before any charge, the answer is a 503 that asks for a retry with the
// same key and claims nothing it does not know; the retry charges once and
// records one payment.
func TestMessagesSayWhatIsKnown(t *testing.T) {
	t.Parallel()
	psrv, proc := startProcessorClient(t)
	f := setupWith(t, "sqlite", idem.ModeTwoPhase, proc, func(r payments.Repo) payments.Repo { return &failOnce{Repo: r} })
	body := `{"amount":4321,"currency":"usd","customer":"c"}`
	first := f.post(t, "sk_alice", "k-known", jsonType, body)
	p := decode[idem.Problem](t, first.body)
	if first.status != http.StatusServiceUnavailable || p.Code != string(idem.ProblemOperationUnfinished) ||
		first.header.Get("Retry-After") == "" || !strings.Contains(p.Detail, "same Idempotency-Key") {
		t.Fatalf("insert failure before the charge: %d %s", first.status, first.body)
	}
	if n := countCharges(t, psrv.URL, "sk_pay", ""); n != 0 {
		t.Fatalf("%d charges after the failed first phase, want 0", n)
	}
	retry := f.post(t, "sk_alice", "k-known", jsonType, body)
	if retry.status != http.StatusCreated {
		t.Fatalf("retry: %d %s", retry.status, retry.body)
	}
	if n := countCharges(t, psrv.URL, "sk_pay", ""); n != 1 {
		t.Errorf("%d charges, want 1", n)
	}
	if n, _ := f.repo.Count(context.Background(), "alice", "k-known"); n != 1 {
		t.Errorf("%d payments, want 1", n)
	}
}

// TestOpenAPIPublishesTheParameterRules: the published schema holds the
// limits that the parser applies.
func TestOpenAPIPublishesTheParameterRules(t *testing.T) {
	t.Parallel()
	f := setup(t, idem.ModeAtomic, nil)
	var doc struct {
		Paths map[string]map[string]struct {
			RequestBody struct {
				Content map[string]struct {
					Schema struct {
						Properties map[string]map[string]any `json:"properties"`
					} `json:"schema"`
				} `json:"content"`
			} `json:"requestBody"`
		} `json:"paths"`
	}
	r := f.do(t, http.MethodGet, "/openapi.json", http.Header{}, "")
	if err := json.Unmarshal(r.body, &doc); err != nil {
		t.Fatal(err)
	}
	for _, ct := range []string{jsonType, formType} {
		props := doc.Paths["/v1/payments"]["post"].RequestBody.Content[ct].Schema.Properties
		if props["amount"]["maximum"] != float64(payments.MaxAmount) || props["customer"]["maxLength"] != float64(payments.MaxCustomer) {
			t.Errorf("%s schema: %v", ct, props)
		}
	}
}
