package payments_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/internal/database"
	"github.com/idemkit/idem/cmd/internal/mysqltest"
	"github.com/idemkit/idem/cmd/internal/payments"
	"github.com/idemkit/idem/cmd/internal/processor"
	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/internal/bearer"
	"github.com/idemkit/idem/internal/pgtest"
)

var quiet = slog.New(slog.DiscardHandler)

func TestMain(m *testing.M) { pgtest.Main(m) }

type fixture struct {
	url  string
	repo payments.Repo
}

// setup serves the payments API on SQLite.
func setup(t *testing.T, mode idem.Mode, proc payments.Processor) *fixture {
	t.Helper()
	return setupOn(t, "sqlite", mode, proc)
}

// setupOn serves the payments API on a store of kind sqlite or postgres.
func setupOn(t *testing.T, kind string, mode idem.Mode, proc payments.Processor) *fixture {
	t.Helper()
	return setupWith(t, kind, mode, proc, nil)
}

// setupWith is setupOn with the repository that the service uses wrapped
// by wrap, when it is not nil.
func setupWith(t *testing.T, kind string, mode idem.Mode, proc payments.Processor, wrap func(payments.Repo) payments.Repo) *fixture {
	t.Helper()
	ctx := context.Background()
	url := "sqlite:" + filepath.Join(t.TempDir(), "payments.db")
	switch kind {
	case "postgres":
		url = pgtest.NewDatabase(t)
	case "mysql":
		url = mysqltest.NewDatabase(t)
	}
	db, err := database.Open(ctx, url, &database.Config{Migrate: true, Logger: quiet})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(db.Close)
	repo, err := payments.NewRepo(ctx, db)
	if err != nil {
		t.Fatalf("NewRepo: %v", err)
	}
	served := repo
	if wrap != nil {
		served = wrap(repo)
	}
	svc, err := payments.NewService(payments.Config{
		Repo: served, Store: db.Store(), Logger: quiet, Processor: proc,
		Tokens: must(bearer.Parse("sk_alice=alice,sk_bob=bob")),
		Idem:   idem.Config{Mode: mode},
	})
	if err != nil {
		t.Fatalf("NewService: %v", err)
	}
	srv := httptest.NewServer(svc.Handler())
	t.Cleanup(srv.Close)
	return &fixture{url: srv.URL, repo: repo}
}

type result struct {
	status int
	header http.Header
	body   []byte
}

func (f *fixture) post(t *testing.T, token, key, contentType, body string) result {
	t.Helper()
	h := http.Header{"Content-Type": {contentType}}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	if key != "" {
		h.Set("Idempotency-Key", key)
	}
	return f.do(t, http.MethodPost, "/v1/payments", h, body)
}

func (f *fixture) do(t *testing.T, method, path string, h http.Header, body string) result {
	t.Helper()
	req, err := http.NewRequest(method, f.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return result{res.StatusCode, res.Header, b}
}

func decode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return v
}

const jsonType = "application/json"

func TestCreateAndGetPayment(t *testing.T) {
	t.Parallel()
	f := setup(t, idem.ModeAtomic, nil)
	r := f.post(t, "sk_alice", `"k-create"`, jsonType, `{"amount":4200,"currency":"USD","customer":"cus_123","description":"Order 7"}`)
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	p := decode[payments.Payment](t, r.body)
	if !strings.HasPrefix(p.ID, "pay_") || p.Object != "payment" || p.Amount != 4200 || p.Currency != "usd" ||
		p.Customer != "cus_123" || p.Status != "succeeded" || p.Created == 0 || p.Description != "Order 7" {
		t.Errorf("payment = %+v", p)
	}
	if loc := r.header.Get("Location"); loc != "/v1/payments/"+p.ID {
		t.Errorf("Location = %q", loc)
	}
	got := f.do(t, http.MethodGet, "/v1/payments/"+p.ID, http.Header{"Authorization": {"Bearer sk_alice"}}, "")
	if got.status != http.StatusOK || decode[payments.Payment](t, got.body) != p {
		t.Errorf("GET own payment: %d %s", got.status, got.body)
	}
	other := f.do(t, http.MethodGet, "/v1/payments/"+p.ID, http.Header{"Authorization": {"Bearer sk_bob"}}, "")
	if other.status != http.StatusNotFound || decode[idem.Problem](t, other.body).Code != "not-found" {
		t.Errorf("GET another client's payment: %d %s, want 404", other.status, other.body)
	}
}

func TestFormBodyIsAccepted(t *testing.T) {
	t.Parallel()
	f := setup(t, idem.ModeAtomic, nil)
	form := "application/x-www-form-urlencoded"
	r := f.post(t, "sk_alice", "k-form", form, "amount=100&currency=eur&customer=cus_9")
	again := f.post(t, "sk_alice", "k-form", form, "customer=cus_9&currency=eur&amount=100")
	if r.status != 201 || again.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(r.body, again.body) {
		t.Fatalf("form create %d, reordered retry %d replayed=%q", r.status, again.status, again.header.Get("Idempotent-Replayed"))
	}
}

func TestValidationFailsWithoutStoringTheKey(t *testing.T) {
	t.Parallel()
	f := setup(t, idem.ModeAtomic, nil)
	tests := []struct {
		name, body, param string
	}{
		{"MissingAmount", `{"currency":"usd","customer":"c"}`, "amount"},
		{"ZeroAmount", `{"amount":0,"currency":"usd","customer":"c"}`, "amount"},
		{"FractionalAmount", `{"amount":42.5,"currency":"usd","customer":"c"}`, "amount"},
		{"StringAmount", `{"amount":"42","currency":"usd","customer":"c"}`, "amount"},
		{"BadCurrency", `{"amount":1,"currency":"dollars","customer":"c"}`, "currency"},
		{"NumericCurrency", `{"amount":1,"currency":"123","customer":"c"}`, "currency"},
		{"EmptyCustomer", `{"amount":1,"currency":"usd","customer":""}`, "customer"},
		{"LongCustomer", `{"amount":1,"currency":"usd","customer":"` + strings.Repeat("c", 256) + `"}`, "customer"},
		{"UnknownParameter", `{"amount":1,"currency":"usd","customer":"c","capture":true}`, "capture"},
		{"NotAnObject", `[1,2]`, "body"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			key := "k-" + tt.name
			r := f.post(t, "sk_alice", key, jsonType, tt.body)
			if r.status != http.StatusBadRequest {
				t.Fatalf("status %d, want 400; %s", r.status, r.body)
			}
			if p := decode[idem.Problem](t, r.body); p.Code != "invalid-parameter" || p.Param != tt.param {
				t.Errorf("problem %+v, want invalid-parameter naming %q", p, tt.param)
			}
			// Not stored: the corrected request with the same key succeeds.
			ok := f.post(t, "sk_alice", key, jsonType, `{"amount":1,"currency":"usd","customer":"c"}`)
			if ok.status != http.StatusCreated || ok.header.Get("Idempotent-Replayed") != "" {
				t.Errorf("corrected retry: %d %s", ok.status, ok.body)
			}
		})
	}
}

func TestBadCredentialsGet401(t *testing.T) {
	t.Parallel()
	f := setup(t, idem.ModeAtomic, nil)
	for _, token := range []string{"", "sk_nobody"} {
		r := f.post(t, token, "k", jsonType, `{"amount":1,"currency":"usd","customer":"c"}`)
		if r.status != http.StatusUnauthorized || r.header.Get("WWW-Authenticate") == "" || decode[idem.Problem](t, r.body).Code != "invalid-credentials" {
			t.Errorf("token %q: %d %s", token, r.status, r.body)
		}
	}
}

func TestUnknownRouteIsAProblem(t *testing.T) {
	t.Parallel()
	f := setup(t, idem.ModeAtomic, nil)
	r := f.do(t, http.MethodGet, "/v2/nothing", http.Header{}, "")
	if r.status != http.StatusNotFound || r.header.Get("Content-Type") != idem.ProblemContentType {
		t.Errorf("unknown route: %d %q", r.status, r.header.Get("Content-Type"))
	}
	for _, path := range []string{"/healthz", "/openapi.json", "/problems/idempotency-key-reused", "/problems/invalid-parameter"} {
		if r := f.do(t, http.MethodGet, path, http.Header{}, ""); r.status != http.StatusOK {
			t.Errorf("GET %s: %d", path, r.status)
		}
	}
	doc := decode[map[string]any](t, f.do(t, http.MethodGet, "/openapi.json", http.Header{}, "").body)
	policy, _ := doc["x-idempotency"].(map[string]any)
	if policy["retention"] != "24 hours" || policy["retention_seconds"] != float64(86400) {
		t.Errorf("published policy = %v, want 24 hours", policy)
	}
}

// TestConcurrentRetriesChargeOnce sends one key 50 times at once: exactly
// one payment row, and every answer a 201 with the same body or a 409.
func TestConcurrentRetriesChargeOnce(t *testing.T) {
	t.Parallel()
	for _, mode := range []idem.Mode{idem.ModeAtomic, idem.ModeTwoPhase} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			f := setup(t, mode, nil)
			const n = 50
			start := make(chan struct{})
			results := make([]result, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					results[i] = f.post(t, "sk_alice", "burst-key", jsonType, `{"amount":4200,"currency":"usd","customer":"cus_123"}`)
				}()
			}
			close(start)
			wg.Wait()
			var body []byte
			statuses := map[int]int{}
			for _, r := range results {
				statuses[r.status]++
				switch r.status {
				case http.StatusCreated:
					if body == nil {
						body = r.body
					} else if !bytes.Equal(body, r.body) {
						t.Errorf("different 201 bodies: %s vs %s", body, r.body)
					}
				case http.StatusConflict:
				default:
					t.Errorf("status %d: %s", r.status, r.body)
				}
			}
			rows, err := f.repo.Count(context.Background(), "alice", "burst-key")
			if err != nil || rows != 1 {
				t.Fatalf("%d payment rows (err %v), want exactly 1; statuses %v", rows, err, statuses)
			}
			t.Logf("statuses: %v", statuses)
		})
	}
}

// lossyProcessor charges through the real processor, then loses the first
// answer, as a network that drops the response after the charge would.
type lossyProcessor struct {
	real *payments.ProcessorClient
	mu   sync.Mutex
	lost bool
	keys []string
}

func (p *lossyProcessor) Charge(ctx context.Context, key string, params payments.Params) (string, error) {
	id, err := p.real.Charge(ctx, key, params)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keys = append(p.keys, key)
	if err == nil && !p.lost {
		p.lost = true
		return "", io.ErrUnexpectedEOF
	}
	return id, err
}

func TestLostProcessorAnswerChargesOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	psrv := startProcessor(t)
	client, err := payments.NewProcessorClient(psrv.URL, "sk_pay", &idemclient.Config{MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	proc := &lossyProcessor{real: client}
	f := setup(t, idem.ModeTwoPhase, proc)
	body := `{"amount":4200,"currency":"usd","customer":"cus_123"}`
	first := f.post(t, "sk_alice", "k-lossy", jsonType, body)
	if p := decode[idem.Problem](t, first.body); first.status != http.StatusServiceUnavailable ||
		p.Code != string(idem.ProblemOperationUnfinished) || first.header.Get("Retry-After") == "" {
		t.Fatalf("first attempt: %d %s, want 503 operation-unfinished with Retry-After (processor answer lost)", first.status, first.body)
	}
	retry := f.post(t, "sk_alice", "k-lossy", jsonType, body)
	if retry.status != http.StatusCreated {
		t.Fatalf("retry: %d %s, want 201", retry.status, retry.body)
	}
	if len(proc.keys) != 2 || proc.keys[0] != proc.keys[1] || strings.Contains(proc.keys[0], "k-lossy") {
		t.Fatalf("downstream keys %q: want the same derived key twice, not containing the client's key", proc.keys)
	}
	if n := countCharges(t, psrv.URL, "sk_pay", proc.keys[0]); n != 1 {
		t.Errorf("processor made %d charges for the key, want 1", n)
	}
	if n, _ := f.repo.Count(ctx, "alice", "k-lossy"); n != 1 {
		t.Errorf("%d payment rows, want 1", n)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// countCharges asks the processor how many charges the token's client made
// with key, or in all when key is "".
func countCharges(t *testing.T, base, token, key string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/charges/count?key="+url.QueryEscape(key), nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("charges/count: %d", res.StatusCode)
	}
	return decode[map[string]int](t, must(io.ReadAll(res.Body)))["charges"]
}

// startProcessorClient starts processord's handler, as startProcessor
// does, and returns it with a client of it that charges as paymentsd.
func startProcessorClient(t *testing.T) (*httptest.Server, *payments.ProcessorClient) {
	t.Helper()
	psrv := startProcessor(t)
	proc, err := payments.NewProcessorClient(psrv.URL, "sk_pay", nil)
	if err != nil {
		t.Fatal(err)
	}
	return psrv, proc
}

// startProcessor serves a simulated processor that accepts the token sk_pay.
func startProcessor(t *testing.T) *httptest.Server {
	t.Helper()
	pstore, err := idemsqlite.Open(filepath.Join(t.TempDir(), "processor.db"), &idemsqlite.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pstore.Close() })
	if err := pstore.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	ph, err := processor.NewHandler(context.Background(), processor.Config{Store: pstore, Tokens: must(bearer.Parse("sk_pay=paymentsd")), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	psrv := httptest.NewServer(ph)
	t.Cleanup(psrv.Close)
	return psrv
}
