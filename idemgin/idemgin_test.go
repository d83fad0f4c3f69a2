package idemgin_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgin"
	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/internal/frametest"
)

var quiet = slog.New(slog.DiscardHandler)

func init() { gin.SetMode(gin.TestMode) }

// newService starts a small Gin payments service on SQLite, as
// frametest describes it: gin.BasicAuth in front, then, with idem,
// idemgin's middleware, in the given mode.
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
	r := gin.New()
	r.Use(gin.Recovery())
	group := []gin.HandlerFunc{gin.BasicAuth(gin.Accounts{"alice": "pw-a", "bob": "pw-b"})}
	if withIdem {
		m, err := idemgin.New(store, &idem.Config{Mode: mode, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		group = append(group, m.Handler())
		r.GET("/openapi.json", func(c *gin.Context) { c.Data(http.StatusOK, "application/json", frametest.OpenAPI) })
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
	return &frametest.Service{URL: srv.URL, Payments: func(t *testing.T) int {
		var n int
		if err := store.DB().QueryRow(`SELECT count(*) FROM payments`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}}
}

// TestCheck runs idem check against the Gin service, with idem and without.
func TestCheck(t *testing.T) { frametest.Check(t, newService) }

// TestAtomicTransactionInRequestContext: the handler"s write is in the
// key"s transaction; Gin"s own 400 and 401 pass through.
func TestAtomicTransactionInRequestContext(t *testing.T) {
	frametest.AtomicTransaction(t, newService, "Amount")
}

// TestStreaming streams a two-phase response and replays it.
func TestStreaming(t *testing.T) { frametest.Streaming(t, newService) }
