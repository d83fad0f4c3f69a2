package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/internal/database"
	"github.com/idemkit/idem/cmd/internal/proxy"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/cmdrun"
)

// TestStalledBodyGets408: a client that sends its headers and stops in the
// middle of its body is answered 408 once -read-timeout passed, and its
// connection is closed, instead of holding the proxy's memory for ever.
func TestStalledBodyGets408(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the upstream got %s %s", r.Method, r.URL)
	}))
	t.Cleanup(up.Close)
	addr, _ := started(t, []string{"-listen", "127.0.0.1:0", "-admin-addr", "127.0.0.1:0", "-upstream", up.URL,
		"-db", "sqlite:" + filepath.Join(t.TempDir(), "k.db"), "-client-header", "X-Client-Id", "-read-timeout", "300ms"}, nil)
	conn, err := net.Dial("tcp", strings.TrimPrefix(addr, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "POST /v1/charges HTTP/1.1\r\nHost: proxy\r\nX-Client-Id: acme\r\nIdempotency-Key: stalled\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"amount\":")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to the stalled body: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), string(idem.ProblemBodyTimeout)) {
		t.Fatalf("stalled body: %d %q, want 408 %s", resp.StatusCode, b, idem.ProblemBodyTimeout)
	}
}

// TestRefusesBeforeMigrating: flags that make no proxy are refused before
// the key store is opened, so a mistyped start never migrates a database.
func TestRefusesBeforeMigrating(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "k.db")
	err := run(context.Background(), []string{"-upstream", "http://127.0.0.1:1", "-client-header", "X-Client", "-db", "sqlite:" + path,
		"-upstream-timeout", "1m", "-lock-timeout", "30s"}, io.Discard, io.Discard, envOf(nil))
	if err == nil || !strings.Contains(err.Error(), "lock timeout") {
		t.Fatalf("err %v, want the lock timeout refused", err)
	}
	if cmdrun.ExitCode(err) != 2 {
		t.Errorf("exit code %d for a bad flag, want 2", cmdrun.ExitCode(err))
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the key store was created before the flags were checked: %v", err)
	}
}

// TestReleaseExitCodes: "idemproxy release" exits 2 for a call it cannot
// read, and 1 when it refuses: scripts tell a typo from a key that is not
// held.
func TestReleaseExitCodes(t *testing.T) {
	t.Parallel()
	_, db := refundProxy(t, "sqlite", "http://127.0.0.1:1", "POST /v1/refunds hold") // migrates the store
	_, err := command("release", "-db", db, "-client-id", "header:acme", "-key", "never-held")
	if err == nil || cmdrun.ExitCode(err) != 1 {
		t.Errorf("release of a key that is not held: %v, exit code %d, want a refusal and 1", err, cmdrun.ExitCode(err))
	}
	_, err = command("release", "-db", db, "-key", "k")
	if err == nil || cmdrun.ExitCode(err) != 2 {
		t.Errorf("release without -client-id: %v, exit code %d, want 2", err, cmdrun.ExitCode(err))
	}
}

// TestHeldListsUnstoredHoldForwards: a hold route's key whose forward's
// answer could not be stored is left at the recovery point forwarded with
// no holder; its next retry is held, so "held" lists it and "release"
// frees it. A retry route's key there is not held, and is not listed.
func TestHeldListsUnstoredHoldForwards(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			db, store := refundStore(t, kind)
			for key, policy := range map[string]proxy.Policy{"held-1": proxy.PolicyHold, "retried-1": proxy.PolicyRetry} {
				ctx := context.Background()
				l := claimRefund(t, store, key).(idemstore.RecoveryLease)
				if err := l.Checkpoint(ctx, idemstore.Recovery{Point: proxy.RecoveryForwarded, State: idem.State{"key": key, "policy": string(policy)}}); err != nil {
					t.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			held, err := command("held", "-db", db)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(held, "held-1") || !strings.Contains(held, "hold") || strings.Contains(held, "retried-1") || !strings.Contains(held, "1 held key") {
				t.Fatalf("held printed:\n%s", held)
			}
			if _, err := command("release", "-db", db, "-client-id", "header:acme", "-key", "retried-1"); err == nil {
				t.Error("release freed a retry route's key")
			}
			if _, err := command("release", "-db", db, "-client-id", "header:acme", "-key", "held-1"); err != nil {
				t.Fatal(err)
			}
			if held, _ := command("held", "-db", db); !strings.Contains(held, "0 held keys") {
				t.Fatalf("held after the release printed:\n%s", held)
			}
		})
	}
}

// TestHeldKeysOfEarlierVersions: a held answer stored before the proxy's
// problem took idem's code outcome-unknown carries the former code
// idempotency-outcome-unknown; "held" still lists it and "release" frees
// it.
func TestHeldKeysOfEarlierVersions(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			db, store := refundStore(t, kind)
			ctx := context.Background()
			lease := claimRefund(t, store, "old-1")
			body := `{"type":"/idemproxy/problems/idempotency-outcome-unknown","title":"Outcome unknown","status":502,"detail":"...","code":"idempotency-outcome-unknown"}`
			if err := lease.Complete(ctx, &idemstore.Response{StatusCode: 502, Header: http.Header{"Content-Type": {"application/problem+json"}}, Body: []byte(body)}); err != nil {
				t.Fatal(err)
			}
			if held, err := command("held", "-db", db); err != nil || !strings.Contains(held, "old-1") || !strings.Contains(held, "1 held key") {
				t.Fatalf("held: %v\n%s", err, held)
			}
			if _, err := command("release", "-db", db, "-client-id", "header:acme", "-key", "old-1"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// refundStore starts idemproxy on a new store of kind, which migrates it,
// and opens the store beside it. It returns the store's URL and the store.
func refundStore(t *testing.T, kind string) (string, idemstore.Store) {
	t.Helper()
	_, db := refundProxy(t, kind, "http://127.0.0.1:1", "POST /v1/refunds hold")
	d, err := database.Open(context.Background(), db, &database.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return db, d.Store()
}

// claimRefund claims client acme's refund key as the proxy does, two-phase.
func claimRefund(t *testing.T, store idemstore.Store, key string) idemstore.Lease {
	t.Helper()
	res, err := store.Claim(context.Background(), idemstore.ClaimParams{Scope: idemstore.Scope{ClientID: "header:acme", Key: key}, Method: "POST", Path: "/v1/refunds",
		RequestHash: []byte("h"), TwoPhase: true, Now: time.Now(), LockTimeout: time.Minute, Retention: time.Hour})
	if err != nil || res.Lease == nil {
		t.Fatalf("claim %s: %v %+v", key, err, res)
	}
	return res.Lease
}
