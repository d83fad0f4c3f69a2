package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemfingerprint"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/keyspec"
)

// keysEnv is a migrated database, a service's middleware on it in
// two-phase mode with a 30 s lease, and the CLI, all on one clock that the
// test moves.
type keysEnv struct {
	db   string
	now  time.Time
	runs atomic.Int64
	srv  *httptest.Server
}

func newKeysEnv(t *testing.T, db string) *keysEnv {
	t.Helper()
	ctx := context.Background()
	if code, _, errOut := runIdem(t, "migrate", "--db", db); code != exitOK {
		t.Fatalf("migrate: %s", errOut)
	}
	store, err := openStore(ctx, db, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	e := &keysEnv{db: db, now: time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)}
	mw, err := idem.New(store.Store(), &idem.Config{
		ClientID: func(r *http.Request) (string, bool) { return r.Header.Get("X-Client"), true },
		Mode:     idem.ModeTwoPhase, LockTimeout: 30 * time.Second, Logger: slog.New(slog.DiscardHandler),
		Now: func() time.Time { return e.now },
	})
	if err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.runs.Add(1)
		w.Header().Set("Location", "/v1/payments/pay_1")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"pay_1","card":"4242"}`)
	})))
	t.Cleanup(e.srv.Close)
	return e
}

// keys runs "idem keys args..." at the env's clock.
func (e *keysEnv) keys(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	c := &cli{stdout: &stdout, stderr: &stderr, now: func() time.Time { return e.now },
		lookupEnv: func(k string) (string, bool) {
			switch k {
			case "DATABASE_URL":
				return e.db, true
			case "USER":
				return "oncall", true
			}
			return "", false
		}}
	code := c.run(context.Background(), append([]string{"keys"}, args...))
	return code, stdout.String(), stderr.String()
}

func (e *keysEnv) post(t *testing.T, client, key, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/v1/payments", strings.NewReader(body))
	req.Header.Set("X-Client", client)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(idem.HeaderKey, `"`+key+`"`)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// strand leaves a started key behind, as a two-phase request whose process
// died after its claim committed.
func (e *keysEnv) strand(t *testing.T, client, key, body string) {
	t.Helper()
	e.strandFor(t, client, key, body, 30*time.Second)
}

// strandFor is strand for a service whose lease is lockTimeout long.
func (e *keysEnv) strandFor(t *testing.T, client, key, body string, lockTimeout time.Duration) {
	t.Helper()
	store, err := openStore(context.Background(), e.db, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	fp, err := idemfingerprint.New(idemfingerprint.Params{Method: "POST", Path: "/v1/payments", ContentType: "application/json", Body: []byte(body)})
	if err != nil {
		t.Fatal(err)
	}
	res, err := store.Store().Claim(context.Background(), idemstore.ClaimParams{
		Scope: idemstore.Scope{ClientID: client, Key: key}, Method: "POST", Path: "/v1/payments",
		RequestHash: fp.Hash, RequestFields: fp.Fields, TwoPhase: true,
		Now: e.now, LockTimeout: lockTimeout, Retention: idem.RetentionDefault,
	})
	if err != nil || res.Lease == nil {
		t.Fatalf("claim: %v %+v", err, res)
	}
	// The lease is dropped: its process is gone.
}

func TestKeysFreeAStuckKey(t *testing.T) {
	t.Parallel()
	for kind, db := range databases(t) {
		t.Run(kind, func(t *testing.T) {
			e := newKeysEnv(t, db)
			body := `{"amount":1}`
			e.strand(t, "alice", "stuck-1", body)
			e.post(t, "bob", "done-1", `{"amount":2}`) // a completed key, listed too
			if resp := e.post(t, "alice", "stuck-1", body); resp.StatusCode != http.StatusConflict {
				t.Fatalf("retry of the stuck key: %d, want 409", resp.StatusCode)
			}

			// Within the lease: the key is too young to list, and release refuses it.
			if code, out, _ := e.keys(t, "list", "--state", "started", "--older-than", "1m"); code != exitOK || !strings.Contains(out, "0 keys") {
				t.Fatalf("list before a minute: exit %d\n%s", code, out)
			}
			code, out, errOut := e.keys(t, "release", "alice", "stuck-1")
			if code != exitFail || !strings.Contains(errOut, "the lease is live") || !strings.Contains(errOut, "outcome=executed") {
				t.Fatalf("release of a live lease: exit %d\n%s%s", code, out, errOut)
			}

			e.now = e.now.Add(2 * time.Minute)
			code, out, _ = e.keys(t, "list", "--state", "started", "--older-than", "1m")
			t.Logf("idem keys list --state started --older-than 1m\n%s", out)
			if code != exitOK || !strings.Contains(out, "alice") || !strings.Contains(out, "stuck-1") ||
				!strings.Contains(out, "expired 1m30s ago") || strings.Contains(out, "done-1") || !strings.Contains(out, "1 key\n") {
				t.Fatalf("list: exit %d\n%s", code, out)
			}
			code, out, _ = e.keys(t, "list", "--json")
			var views []keyView
			if err := json.Unmarshal([]byte(out), &views); code != exitOK || err != nil || len(views) != 2 {
				t.Fatalf("list --json: exit %d, %v\n%s", code, err, out)
			}
			if strings.Contains(out, "4242") {
				t.Errorf("list printed a response body:\n%s", out)
			}

			code, out, errOut = e.keys(t, "release", "alice", "stuck-1", "--reason", "INC-42 holder killed")
			t.Logf("idem keys release alice stuck-1\n%s%s", out, errOut)
			if code != exitOK || !strings.Contains(out, "released alice stuck-1") || !strings.Contains(errOut, "reason=\"INC-42 holder killed\"") ||
				!strings.Contains(errOut, "key_digest="+keyspec.Digest("stuck-1")) || strings.Contains(errOut, "stuck-1") {
				t.Fatalf("release: exit %d\n%s%s", code, out, errOut)
			}

			// The client's next retry runs, once; the one after replays.
			before := e.runs.Load()
			if resp := e.post(t, "alice", "stuck-1", body); resp.StatusCode != http.StatusCreated || resp.Header.Get(idem.HeaderReplayed) != "" {
				t.Fatalf("retry after release: %d replayed=%q, want a 201 that ran", resp.StatusCode, resp.Header.Get(idem.HeaderReplayed))
			}
			if resp := e.post(t, "alice", "stuck-1", body); resp.StatusCode != http.StatusCreated || resp.Header.Get(idem.HeaderReplayed) != "true" {
				t.Fatalf("second retry: %d replayed=%q, want the replay", resp.StatusCode, resp.Header.Get(idem.HeaderReplayed))
			}
			if n := e.runs.Load() - before; n != 1 {
				t.Errorf("the handler ran %d times after the release, want 1", n)
			}

			// Now completed: release refuses it, show hides the body.
			code, _, errOut = e.keys(t, "release", "alice", "stuck-1", "--force")
			if code != exitFail || !strings.Contains(errOut, "second time") {
				t.Fatalf("release of a completed key: exit %d\n%s", code, errOut)
			}
			code, out, _ = e.keys(t, "show", "alice", "stuck-1")
			if code != exitOK || !strings.Contains(out, "completed") || !strings.Contains(out, "Location: /v1/payments/pay_1") || strings.Contains(out, "4242") {
				t.Fatalf("show: exit %d\n%s", code, out)
			}
			code, out, _ = e.keys(t, "show", "--with-body", "alice", "stuck-1", "--json")
			var v keyView
			if err := json.Unmarshal([]byte(out), &v); code != exitOK || err != nil || v.ResponseBody == nil || !strings.Contains(*v.ResponseBody, "4242") {
				t.Fatalf("show --with-body --json: exit %d %v\n%s", code, err, out)
			}
		})
	}
}

// TestKeysJudgeLeaseByRecordedExpiry: a service with a 10-minute lease
// claimed a key; an operator who forgets --lock-timeout (default 30s) must
// not free it a minute later without --force: the lease is live until the
// expiry the store recorded.
func TestKeysJudgeLeaseByRecordedExpiry(t *testing.T) {
	t.Parallel()
	for kind, db := range databases(t) {
		t.Run(kind, func(t *testing.T) {
			e := newKeysEnv(t, db)
			e.strandFor(t, "alice", "long-1", `{"amount":1}`, 10*time.Minute)
			expires := e.now.Add(10 * time.Minute)
			e.now = e.now.Add(time.Minute)

			code, out, errOut := e.keys(t, "release", "alice", "long-1")
			if code != exitFail || !strings.Contains(errOut, "refused: the lease is live until "+expires.Format(time.RFC3339)+" (in 9m0s)") {
				t.Fatalf("release of a 10-minute lease a minute in, default --lock-timeout: exit %d\n%s%s", code, out, errOut)
			}
			code, out, _ = e.keys(t, "list", "--state", "started")
			if code != exitOK || !strings.Contains(out, "live, 9m0s left") {
				t.Errorf("list: exit %d\n%s", code, out)
			}
			code, out, _ = e.keys(t, "show", "alice", "long-1")
			if code != exitOK || !strings.Contains(out, "live, 9m0s left (expires "+expires.Format(time.RFC3339)+", as the store recorded)") {
				t.Errorf("show: exit %d\n%s", code, out)
			}
			code, out, _ = e.keys(t, "show", "alice", "long-1", "--json")
			var v map[string]any
			if err := json.Unmarshal([]byte(out), &v); code != exitOK || err != nil || v["lease_live"] != true ||
				v["lease_expiry_recorded"] != true || v["lease_expires"] != expires.Format(time.RFC3339) {
				t.Errorf("show --json: exit %d, %v\n%s", code, err, out)
			}

			e.now = expires
			code, out, errOut = e.keys(t, "release", "alice", "long-1", "--reason", "INC-16")
			if code != exitOK || !strings.Contains(out, "released alice long-1") {
				t.Fatalf("release once the recorded lease expired: exit %d\n%s%s", code, out, errOut)
			}
		})
	}
}

func TestKeysForceReleaseAndDelete(t *testing.T) {
	t.Parallel()
	for kind, db := range databases(t) {
		t.Run(kind, func(t *testing.T) {
			e := newKeysEnv(t, db)
			e.strand(t, "alice", "live-1", `{"amount":1}`)
			code, out, errOut := e.keys(t, "release", "--force", "alice", "live-1")
			if code != exitOK || !strings.Contains(errOut, "force=true") {
				t.Fatalf("forced release of a live lease: exit %d\n%s%s", code, out, errOut)
			}

			e.post(t, "bob", "done-1", `{"amount":2}`)
			for _, args := range [][]string{
				{"delete", "bob", "done-1"},
				{"delete", "bob", "done-1", "--i-know"},
				{"delete", "bob", "done-1", "--reason", "x"},
			} {
				if code, _, _ := e.keys(t, args...); code != exitUsage {
					t.Errorf("idem keys %s: exit %d, want %d", strings.Join(args, " "), code, exitUsage)
				}
			}
			if code, _, errOut := e.keys(t, "delete", "alice", "live-1", "--i-know", "--reason", "x"); code != exitFail || !strings.Contains(errOut, "release") {
				t.Errorf("delete of a started key: exit %d %s", code, errOut)
			}
			code, out, errOut = e.keys(t, "delete", "bob", "done-1", "--i-know", "--reason", "TICKET-7 wrong stored response")
			t.Logf("idem keys delete bob done-1 --i-know --reason ...\n%s%s", out, errOut)
			if code != exitOK || !strings.Contains(errOut, `reason="TICKET-7 wrong stored response"`) || !strings.Contains(errOut, "operator=oncall") ||
				!strings.Contains(errOut, "action=deleted") {
				t.Fatalf("delete: exit %d\n%s%s", code, out, errOut)
			}
			before := e.runs.Load()
			if resp := e.post(t, "bob", "done-1", `{"amount":2}`); resp.StatusCode != http.StatusCreated || e.runs.Load() != before+1 {
				t.Errorf("after delete: %d, %d runs, want the request to run again", resp.StatusCode, e.runs.Load()-before)
			}
			if code, _, errOut := e.keys(t, "show", "carol", "nothing"); code != exitFail || !strings.Contains(errOut, "no such key") {
				t.Errorf("show of an unknown key: exit %d %s", code, errOut)
			}
		})
	}
}

func TestKeysRejectBadUse(t *testing.T) {
	t.Parallel()
	e := &keysEnv{db: "sqlite:" + t.TempDir() + "/x.db", now: time.Now()}
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"list", "extra"},
		{"list", "--state", "done"},
		{"list", "--limit", "0"},
		{"list", "--older-than", "-1m"},
		{"show", "alice"},
		{"release", "alice", "k", "extra"},
		{"release", "alice", "k", "--lock-timeout", "0s"},
	} {
		if code, _, _ := e.keys(t, args...); code != exitUsage {
			t.Errorf("idem keys %s: exit %d, want %d", strings.Join(args, " "), code, exitUsage)
		}
	}
	for _, sub := range []string{"list", "show", "release", "delete"} {
		code, _, errOut := e.keys(t, sub, "-h")
		if code != exitOK || !strings.Contains(errOut, "Usage: idem keys "+sub) || !strings.Contains(errOut, "-db") {
			t.Errorf("idem keys %s -h: exit %d\n%s", sub, code, errOut)
		}
	}
}

func TestKeysRejectBadEnvironment(t *testing.T) {
	var stdout, stderr bytes.Buffer
	c := &cli{stdout: &stdout, stderr: &stderr, lookupEnv: func(k string) (string, bool) {
		if k == "IDEM_LOCK_TIMEOUT" {
			return "soon", true
		}
		return "sqlite:x.db", k == "DATABASE_URL"
	}}
	if code := c.run(context.Background(), []string{"keys", "list"}); code != exitUsage || !strings.Contains(stderr.String(), "IDEM_LOCK_TIMEOUT") {
		t.Fatalf("IDEM_LOCK_TIMEOUT=soon: exit %d %q, want a usage error naming it", code, stderr.String())
	}
}
