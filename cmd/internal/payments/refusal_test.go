package payments_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/internal/database"
	"github.com/idemkit/idem/cmd/internal/payments"
	"github.com/idemkit/idem/cmd/internal/processor"
	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/bearer"
)

// countingProcessor serves processord's handler at a new address and
// counts the charge requests that reach it.
func countingProcessor(t *testing.T) (url string, charges *atomic.Int64) {
	t.Helper()
	psrv := startProcessor(t)
	charges = new(atomic.Int64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/v1/charges") {
			charges.Add(1)
		}
		psrv.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, charges
}

// TestProcessorRefusalFailsPayment: a processor that refuses the charge
// request itself (processord's 401 for a token it does not know, its 404
// at a wrong address) charged nothing, and a retry would be refused again.
// The payment is recorded as failed and answered 424 payment-failed, which
// names the processor's refusal and is no decline; the answer is stored and
// replayed, and the processor is asked once, neither again by the client's
// retry nor by the resumer.
func TestProcessorRefusalFailsPayment(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, token, path string
		status            string
	}{
		{"UnknownToken", "sk_revoked", "", "401"},
		{"WrongAddress", "sk_pay", "/typo", "404"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			base, charges := countingProcessor(t)
			proc, err := payments.NewProcessorClient(base+tt.path, tt.token, nil)
			if err != nil {
				t.Fatal(err)
			}
			f := setupPhasedWith(t, proc)
			body := `{"amount":4200,"currency":"usd","customer":"cus_1"}`
			first := f.post(t, "sk_alice", "k-refused", jsonType, body)
			p := decode[idem.Problem](t, first.body)
			if first.status != http.StatusFailedDependency || p.Code != "payment-failed" {
				t.Fatalf("refused charge: %d %s; want 424 payment-failed", first.status, first.body)
			}
			if !strings.Contains(p.Detail, "HTTP "+tt.status) || !strings.Contains(p.Detail, "nothing was charged") ||
				strings.Contains(strings.ToLower(p.Detail), "declined") {
				t.Errorf("detail %q; want the processor's %s, nothing charged, and no decline", p.Detail, tt.status)
			}
			loc := first.header.Get("Location")
			got := f.do(t, http.MethodGet, loc, http.Header{"Authorization": {"Bearer sk_alice"}}, "")
			if pay := decode[payments.Payment](t, got.body); got.status != http.StatusOK || pay.Status != "failed" {
				t.Errorf("GET %s: %d %s; want the payment, failed", loc, got.status, got.body)
			}
			again := f.post(t, "sk_alice", "k-refused", jsonType, body)
			if again.status != http.StatusFailedDependency || again.header.Get(idem.HeaderReplayed) != "true" {
				t.Errorf("retry: %d %s; want the 424 replayed", again.status, again.body)
			}
			c, err := idem.NewResumer(f.db.Store().(idemstore.RecoveryStore), &idem.Config{
				Logger: quiet, Now: func() time.Time { return time.Now().Add(time.Hour) }, Resume: idem.ResumeOpts{Operations: map[string]idem.Phases{"POST /v1/payments": f.svc.ResumePhases()}},
			})
			if err != nil {
				t.Fatal(err)
			}
			if res, err := c.RunOnce(context.Background()); err != nil || res.Completed+res.Failed+res.Released != 0 {
				t.Errorf("resumer pass = %+v, %v; want nothing to do", res, err)
			}
			if n := charges.Load(); n != 1 {
				t.Errorf("%d charge requests reached the processor; want 1", n)
			}
		})
	}
}

// setupPhasedWith serves the payments API on SQLite, charging at proc.
func setupPhasedWith(t *testing.T, proc payments.Processor) *phasedFixture {
	t.Helper()
	ctx := context.Background()
	db, err := database.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "payments.db"), &database.Config{Migrate: true, Logger: quiet})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(db.Close)
	repo, err := payments.NewRepo(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := payments.NewService(payments.Config{
		Repo: repo, Store: db.Store(), Logger: quiet, Processor: proc,
		Tokens: must(bearer.Parse("sk_alice=alice")),
		Idem:   idem.Config{Mode: idem.ModeTwoPhase},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(svc.Handler())
	t.Cleanup(srv.Close)
	return &phasedFixture{fixture: &fixture{url: srv.URL, repo: repo}, svc: svc, db: db}
}

// TestResumerGivesUpOnUnansweredCharge: a processor that fails every
// charge before charging (processord's 503 processor-busy) leaves the
// charge unknown, so the payment stays pending; the resumer runs it
// MaxAttempts times, then gives up on it, says so at Error, counts it,
// and asks the processor no more.
func TestResumerGivesUpOnUnansweredCharge(t *testing.T) {
	t.Parallel()
	pstore, err := idemsqlite.Open(filepath.Join(t.TempDir(), "processor.db"), &idemsqlite.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pstore.Close() })
	if err := pstore.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	ph, err := processor.NewHandler(context.Background(), processor.Config{
		Store: pstore, Tokens: must(bearer.Parse("sk_pay=paymentsd")), FailRate: 1, Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	var charges atomic.Int64
	psrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			charges.Add(1)
		}
		ph.ServeHTTP(w, r)
	}))
	t.Cleanup(psrv.Close)
	proc, err := payments.NewProcessorClient(psrv.URL, "sk_pay", &idemclient.Config{MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	f := setupPhasedWith(t, proc)
	if r := f.post(t, "sk_alice", "k-busy", jsonType, `{"amount":4200,"currency":"usd","customer":"cus_1"}`); r.status != http.StatusServiceUnavailable {
		t.Fatalf("charge at a busy processor: %d %s; want 503 operation-unfinished", r.status, r.body)
	}
	var logs strings.Builder
	var mu sync.Mutex
	c, err := idem.NewResumer(f.db.Store().(idemstore.RecoveryStore), &idem.Config{Now: func() time.Time { return time.Now().Add(time.Hour) },
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelError})), Resume: idem.ResumeOpts{Operations: map[string]idem.Phases{"POST /v1/payments": f.svc.ResumePhases()}, MaxAttempts: 2},
	})
	if err != nil {
		t.Fatal(err)
	}
	var results []idem.ResumerResult
	for range 4 {
		res, err := c.RunOnce(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, res)
	}
	if results[0].Failed != 1 || results[1].Failed != 1 || results[2].GaveUp != 1 || results[3].GaveUp != 1 || results[3].Failed != 0 {
		t.Errorf("passes = %+v; want two failed, then the key given up on", results)
	}
	if n := charges.Load(); n != 1+2 {
		t.Errorf("%d charge requests; want 3: the client's and the resumer's 2", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Count(logs.String(), "idem: resumer gave up on a key") != 1 {
		t.Errorf("error log:\n%s\nwant one line that the resumer gave up", logs.String())
	}
	if n, _ := f.repo.Count(context.Background(), "alice", "k-busy"); n != 1 {
		t.Errorf("%d payments; want 1, pending", n)
	}
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
