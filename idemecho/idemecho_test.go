package idemecho_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemecho"
	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/internal/frametest"
)

var quiet = slog.New(slog.DiscardHandler)

// newService starts a small Echo payments service on SQLite, as
// frametest describes it: Echo's BasicAuth in front, then, with idem,
// idemecho's middleware, in the given mode.
func newService(t *testing.T, withIdem bool, mode idem.Mode) *frametest.Service {
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
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.Use(middleware.Recover())
	accounts := map[string]string{"alice": "pw-a", "bob": "pw-b"}
	group := []echo.MiddlewareFunc{middleware.BasicAuth(func(user, pass string, c echo.Context) (bool, error) {
		if accounts[user] == "" || accounts[user] != pass {
			return false, nil
		}
		c.Set("user", user)
		return true, nil
	})}
	if withIdem {
		m, err := idemecho.New(store, &idem.Config{Mode: mode, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		group = append(group, m.Handler())
		e.GET("/openapi.json", func(c echo.Context) error { return c.Blob(http.StatusOK, "application/json", frametest.OpenAPI) })
	}
	v1 := e.Group("/v1", group...)
	v1.POST("/payments", func(c echo.Context) error {
		var in struct {
			Amount   int    `json:"amount"`
			Currency string `json:"currency"`
			Fail     bool   `json:"fail"`
		}
		if err := c.Bind(&in); err != nil {
			return err
		}
		if in.Amount <= 0 || in.Currency == "" {
			return echo.NewHTTPError(http.StatusBadRequest, "Amount and currency are required")
		}
		ctx := c.Request().Context()
		insert := store.DB().ExecContext
		if withIdem && mode == idem.ModeAtomic {
			tx, err := idemsqlite.TxFromContext(ctx) // the key's transaction
			if err != nil {
				return err
			}
			insert = tx.ExecContext
		}
		res, err := insert(ctx, `INSERT INTO payments (client, amount) VALUES (?, ?)`, c.Get("user"), in.Amount)
		if err != nil {
			return err
		}
		if in.Fail { // after the write: the 500 must roll it back
			return echo.NewHTTPError(http.StatusInternalServerError, "the processor failed")
		}
		id, _ := res.LastInsertId()
		c.Response().Header().Set("Location", fmt.Sprintf("/v1/payments/pay_%d", id))
		return c.JSON(http.StatusCreated, map[string]any{"id": fmt.Sprintf("pay_%d", id), "amount": in.Amount, "currency": in.Currency})
	})
	v1.POST("/exports", func(c echo.Context) error {
		if !idemecho.StreamResponse(c, 1<<20) {
			return echo.NewHTTPError(http.StatusInternalServerError, "not streaming")
		}
		c.Response().Header().Set("Content-Type", "text/csv")
		c.Response().WriteHeader(http.StatusOK)
		for i := range 3 {
			fmt.Fprintf(c.Response(), "row,%d\n", i)
			c.Response().Flush()
		}
		return nil
	})
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return &frametest.Service{URL: srv.URL, Payments: func(t *testing.T) int {
		var n int
		if err := store.DB().QueryRow(`SELECT count(*) FROM payments`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}}
}

// TestCheck runs idem check against the Echo service, with idem and without.
func TestCheck(t *testing.T) { frametest.Check(t, newService) }

// TestAtomicTransactionInRequestContext: the handler"s write is in the
// key"s transaction; Echo"s own 400 and 401 pass through.
func TestAtomicTransactionInRequestContext(t *testing.T) {
	frametest.AtomicTransaction(t, newService, "Amount and currency")
}

// TestStreaming streams a two-phase response and replays it.
func TestStreaming(t *testing.T) { frametest.Streaming(t, newService) }
