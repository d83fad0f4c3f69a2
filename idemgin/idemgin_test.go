package idemgin_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgin"
	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/internal/check"
)

var quiet = slog.New(slog.DiscardHandler)

func init() { gin.SetMode(gin.TestMode) }

// service is a small Gin payments service on SQLite: gin.BasicAuth in
// front, then, with idem, idemgin's middleware, in the given mode.
type service struct {
	url   string
	store *idemsqlite.Store
}

func basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

// openAPI is the service's published idempotency policy, at the
// well-known /openapi.json, as the draft asks a resource to publish it
// (idem check's retention-published looks there).
var openAPI = fmt.Appendf(nil, `{"openapi":"3.1.0","info":{"title":"payments","version":"1",`+
	`"description":"Idempotency keys are retained for %d hours after their first use; a request that reuses an older key runs as new."},`+
	`"x-idempotency":{"header":%q,"retention_seconds":%d,"scope":"per authenticated client"},"paths":{}}`,
	int(idem.RetentionDefault.Hours()), idem.HeaderKey, int(idem.RetentionDefault.Seconds()))

func newService(t *testing.T, withIdem bool, mode idem.Mode) *service {
	t.Helper()
	store, err := idemsqlite.Open(filepath.Join(t.TempDir(), "idem.db"), &idemsqlite.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	ctx := context.Background()
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := store.DB().Exec(`CREATE TABLE payments (id INTEGER PRIMARY KEY AUTOINCREMENT, client TEXT NOT NULL, amount INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	r := gin.New()
	r.Use(gin.Recovery())
	group := []gin.HandlerFunc{gin.BasicAuth(gin.Accounts{"alice": "pw-a", "bob": "pw-b"})}
	if withIdem {
		m, err := idemgin.New(store, &idem.Config{Mode: mode, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		group = append(group, m.Handler())
		r.GET("/openapi.json", func(c *gin.Context) { c.Data(http.StatusOK, "application/json", openAPI) })
	}
	v1 := r.Group("/v1", group...)
	v1.POST("/payments", func(c *gin.Context) {
		var in struct {
			Amount   int    `json:"amount" binding:"required"`
			Currency string `json:"currency" binding:"required"`
			Fail     bool   `json:"fail"`
		}
		if err := c.ShouldBindJSON(&in); err != nil {
			c.AbortWithStatusJSON(http.StatusBadRequest, gin.H{"error": err.Error()})
			return
		}
		ctx := c.Request.Context()
		insert := store.DB().ExecContext
		if withIdem && mode == idem.ModeAtomic {
			tx, err := idemsqlite.TxFromContext(ctx) // the key's transaction
			if err != nil {
				c.AbortWithError(http.StatusInternalServerError, err)
				return
			}
			insert = tx.ExecContext
		}
		res, err := insert(ctx, `INSERT INTO payments (client, amount) VALUES (?, ?)`, c.GetString(gin.AuthUserKey), in.Amount)
		if err != nil {
			c.AbortWithError(http.StatusInternalServerError, err)
			return
		}
		if in.Fail { // after the write: the 500 must roll it back
			c.AbortWithStatusJSON(http.StatusInternalServerError, gin.H{"error": "the processor failed"})
			return
		}
		id, _ := res.LastInsertId()
		c.Header("Location", fmt.Sprintf("/v1/payments/pay_%d", id))
		c.JSON(http.StatusCreated, gin.H{"id": fmt.Sprintf("pay_%d", id), "amount": in.Amount, "currency": in.Currency})
	})
	v1.POST("/exports", func(c *gin.Context) {
		if !idemgin.StreamResponse(c, 1<<20) {
			c.AbortWithStatus(http.StatusInternalServerError)
			return
		}
		c.Header("Content-Type", "text/csv")
		c.Status(http.StatusOK)
		for i := range 3 {
			fmt.Fprintf(c.Writer, "row,%d\n", i)
			c.Writer.Flush()
		}
	})
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return &service{url: srv.URL, store: store}
}

// runCheck runs the conformance checker of `idem check` against the
// service's payments endpoint, as alice with bob as the second client,
// and logs its table.
func runCheck(t *testing.T, s *service) check.Report {
	t.Helper()
	report, err := check.Run(context.Background(), check.Config{
		URL:                s.url + "/v1/payments",
		Header:             http.Header{"Authorization": {basic("alice", "pw-a")}},
		SecondClientHeader: http.Header{"Authorization": {basic("bob", "pw-b")}},
		Body:               []byte(`{"amount":100,"currency":"usd"}`),
		Logger:             quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	report.WriteTable(&b)
	t.Logf("idem check %s/v1/payments:\n%s", s.url, b.String())
	return report
}

// TestCheck runs `idem check` against the Gin service, with idem in both
// modes (every required check passes) and without (the checks of the
// contract that a plain service breaks fail).
func TestCheck(t *testing.T) {
	for _, mode := range []idem.Mode{idem.ModeAtomic, idem.ModeTwoPhase} {
		t.Run("idem/"+mode.String(), func(t *testing.T) {
			report := runCheck(t, newService(t, true, mode))
			for _, r := range report.Results { // the advisory ones too
				if r.Outcome != check.Pass {
					t.Errorf("%s: %s %s", r.Name, r.Outcome, r.Summary)
				}
			}
		})
	}
	t.Run("without-idem", func(t *testing.T) {
		report := runCheck(t, newService(t, false, idem.ModeAtomic))
		for _, name := range []string{check.MissingKey, check.MalformedKey, check.LongKey, check.Replay, check.Mismatch, check.Concurrency, check.ClientScope} {
			if r, _ := report.Result(name); r.Outcome != check.Fail {
				t.Errorf("%s: %s %s; want fail", name, r.Outcome, r.Summary)
			}
		}
		if report.Passed() {
			t.Error("the service without idem passed")
		}
	})
}

func post(t *testing.T, url, key, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Authorization", basic("alice", "pw-a"))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(idem.HeaderKey, key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func count(t *testing.T, s *service) int {
	t.Helper()
	var n int
	if err := s.store.DB().QueryRow(`SELECT count(*) FROM payments`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestAtomicTransactionInRequestContext checks that the handler's write
// runs in the key's transaction: a 500 after it rolls it back and frees
// the key; a 201 commits it with the response, which a retry replays.
func TestAtomicTransactionInRequestContext(t *testing.T) {
	s := newService(t, true, idem.ModeAtomic)
	if resp, body := post(t, s.url+"/v1/payments", `"k1"`, `{"amount":5,"currency":"eur","fail":true}`); resp.StatusCode != http.StatusInternalServerError {
		t.Fatalf("failing request: %d %s", resp.StatusCode, body)
	}
	if n := count(t, s); n != 0 {
		t.Fatalf("%d payments after the 500; want the write rolled back", n)
	}
	resp, first := post(t, s.url+"/v1/payments", `"k2"`, `{"amount":5,"currency":"eur"}`)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("first: %d %s", resp.StatusCode, first)
	}
	resp, again := post(t, s.url+"/v1/payments", `"k2"`, `{"amount":5,"currency":"eur"}`)
	if resp.StatusCode != http.StatusCreated || again != first || resp.Header.Get(idem.HeaderReplayed) != "true" {
		t.Fatalf("retry: %d %s (replayed %q); want the replay of %s", resp.StatusCode, again, resp.Header.Get(idem.HeaderReplayed), first)
	}
	if n := count(t, s); n != 1 {
		t.Errorf("%d payments; want 1", n)
	}
	// A body Gin's binding refuses: its 400 is the handler's, through
	// Gin's own error answer, and no payment is made.
	if resp, body := post(t, s.url+"/v1/payments", `"k3"`, `{"currency":"eur"}`); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "Amount") {
		t.Errorf("invalid payment: %d %s", resp.StatusCode, body)
	}
	// No client identity: gin.BasicAuth answers 401 before idem.
	req, _ := http.NewRequest(http.MethodPost, s.url+"/v1/payments", strings.NewReader(`{}`))
	req.Header.Set(idem.HeaderKey, `"k4"`)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("no credentials: %v %v", resp, err)
	}
}

// TestStreaming streams a two-phase response and replays it.
func TestStreaming(t *testing.T) {
	s := newService(t, true, idem.ModeTwoPhase)
	resp, first := post(t, s.url+"/v1/exports", `"e1"`, `{}`)
	if resp.StatusCode != http.StatusOK || first != "row,0\nrow,1\nrow,2\n" || resp.ContentLength != -1 {
		t.Fatalf("streamed: %d (length %d) %q", resp.StatusCode, resp.ContentLength, first)
	}
	resp, again := post(t, s.url+"/v1/exports", `"e1"`, `{}`)
	if resp.StatusCode != http.StatusOK || again != first || resp.Header.Get(idem.HeaderReplayed) != "true" {
		t.Fatalf("replay: %d %q", resp.StatusCode, again)
	}
}
