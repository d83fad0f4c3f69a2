//go:build unix

package idemredis_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemredis"
	"github.com/idemkit/idem/idemstore"
	"github.com/redis/go-redis/v9"
)

// TestMinReplicasWithReplica: a primary with one replica. While the
// replica follows, claims, checkpoints and completions with MinReplicas 1
// succeed; once it stops (SIGSTOP), none is reported done: a checkpoint
// fails and the key keeps the point it had, a completion fails and is
// undone (the key is started again, with no response), Release then frees
// the key or leaves it at its point for the next holder, and a new claim
// fails and gives its key back. Each error wraps ErrUnavailable and not
// ErrOutcomeUnknown: the store knows what it did.
func TestMinReplicasWithReplica(t *testing.T) {
	needRedis(t)
	primary := startServer(t, t.TempDir())
	_, replica := startServerProcess(t, t.TempDir(), "--replicaof", "127.0.0.1", primary[strings.LastIndex(primary, ":")+1:])
	rdb := redis.NewClient(&redis.Options{Addr: primary})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	poll(t, "the replica to sync", func() bool {
		info, err := rdb.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online")
	})
	store, err := idemredis.New(rdb, &idemredis.Config{Prefix: "replica", MinReplicas: 1, ReplicaTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	claim := func(key string) (idemstore.ClaimResult, error) {
		return store.Claim(ctx, claimParams(idemstore.Scope{ClientID: "alice", Key: key}, "a", t0, time.Minute, time.Hour))
	}
	must(t, store.Migrate(ctx))
	must(t, store.Ready(ctx))
	res, err := claim("k1")
	if err != nil || res.Lease == nil {
		t.Fatalf("claim with a replica following = %+v, %v; want a lease", res, err)
	}
	res2, err := claim("k2")
	if err != nil || res2.Lease == nil {
		t.Fatalf("claim with a replica following = %+v, %v; want a lease", res2, err)
	}
	must(t, res2.Lease.Complete(ctx, &idemstore.Response{StatusCode: 201}))

	res3, err := claim("k3")
	if err != nil || res3.Lease == nil {
		t.Fatalf("claim with a replica following = %+v, %v; want a lease", res3, err)
	}
	l3 := res3.Lease.(idemstore.RecoveryLease)
	must(t, l3.Checkpoint(ctx, idemstore.Recovery{Point: "forwarded", State: map[string]string{"key": "k3"}}))

	must(t, replica.Signal(syscall.SIGSTOP))
	t.Cleanup(func() { _ = replica.Signal(syscall.SIGCONT) })
	known := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, idemstore.ErrUnavailable) || errors.Is(err, idemstore.ErrOutcomeUnknown) {
			t.Fatalf("%s with the replica stopped = %v; want ErrUnavailable, not ErrOutcomeUnknown", what, err)
		}
	}
	known("Complete", res.Lease.Complete(ctx, &idemstore.Response{StatusCode: 201, Body: []byte("done")}))
	if rec, err := store.GetKey(ctx, idemstore.Scope{ClientID: "alice", Key: "k1"}); err != nil || rec.Status != idemstore.StatusInFlight || rec.Response != nil {
		t.Fatalf("key after the unacknowledged completion = %+v, %v; want it started again, with no response", rec, err)
	}
	must(t, res.Lease.Release(ctx))
	if _, err := store.GetKey(ctx, idemstore.Scope{ClientID: "alice", Key: "k1"}); !errors.Is(err, idemstore.ErrKeyNotFound) {
		t.Errorf("key after the failed completion and a Release: %v; want it freed", err)
	}

	known("Checkpoint", l3.Checkpoint(ctx, idemstore.Recovery{Point: "answered"}))
	if r, err := l3.Recovery(ctx); err != nil || r.Point != "forwarded" || r.State["key"] != "k3" {
		t.Fatalf("recovery point after the unacknowledged checkpoint = %+v, %v; want the one before it", r, err)
	}
	known("Complete", l3.Complete(ctx, &idemstore.Response{StatusCode: 201}))
	must(t, l3.Release(ctx))
	rec, err := store.GetKey(ctx, idemstore.Scope{ClientID: "alice", Key: "k3"})
	if err != nil || rec.Status != idemstore.StatusInFlight || !rec.LockedAt.IsZero() {
		t.Fatalf("key past a point after the failed completion and a Release = %+v, %v; want it started, with no holder", rec, err)
	}
	if r, err := l3.Recovery(ctx); err == nil {
		t.Errorf("Recovery after Release = %+v; want the lease ended", r)
	}
	res4, err := claim("k3")
	if err == nil || res4.Lease != nil {
		t.Fatalf("claim of the released key with the replica stopped = %+v, %v; want a failure", res4, err)
	}
	known("Claim", err)
	if res, err := claim("k4"); res.Lease != nil {
		t.Errorf("claim with the replica stopped = %+v; want none", res)
	} else {
		known("Claim", err)
	}
	if _, err := store.GetKey(ctx, idemstore.Scope{ClientID: "alice", Key: "k4"}); !errors.Is(err, idemstore.ErrKeyNotFound) {
		t.Errorf("key of the failed claim: %v; want it given back", err)
	}
	if rec, err := store.GetKey(ctx, idemstore.Scope{ClientID: "alice", Key: "k2"}); err != nil || rec.Status != idemstore.StatusCompleted {
		t.Errorf("key completed while the replica followed = %+v, %v; want it completed", rec, err)
	}
}

// TestUnacknowledgedCompletionAnswer: through idem's middleware, a
// completion that no replica acknowledges (the replica is stopped while
// the handler runs) is answered with what happened: 503, the result not
// recorded and the key released; the retry, once the replica follows
// again, runs the request again, as the answer said.
func TestUnacknowledgedCompletionAnswer(t *testing.T) {
	needRedis(t)
	primary := startServer(t, t.TempDir())
	_, replica := startServerProcess(t, t.TempDir(), "--replicaof", "127.0.0.1", primary[strings.LastIndex(primary, ":")+1:])
	rdb := redis.NewClient(&redis.Options{Addr: primary})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	poll(t, "the replica to sync", func() bool {
		info, err := rdb.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online")
	})
	store, err := idemredis.New(rdb, &idemredis.Config{Prefix: "answer", MinReplicas: 1, ReplicaTimeout: time.Second})
	must(t, err)
	mw, err := idem.New(store, &idem.Config{Mode: idem.ModeTwoPhase, Logger: slog.New(slog.DiscardHandler),
		ClientID: func(r *http.Request) (string, bool) { return "alice", true }})
	must(t, err)
	var runs atomic.Int32
	stopped := false
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		if !stopped {
			stopped = true
			must(t, replica.Signal(syscall.SIGSTOP))
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "charged")
	}))
	t.Cleanup(func() { _ = replica.Signal(syscall.SIGCONT) })
	post := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "/v1/charges", strings.NewReader(`{"amount":1}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "k1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	w := post()
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "failed to record the result, and the key was released") {
		t.Fatalf("answer to the unacknowledged completion: %d %s; want 503 saying the result was not recorded and the key released", w.Code, w.Body)
	}
	if _, err := store.GetKey(ctx, idemstore.Scope{ClientID: "alice", Key: "k1"}); !errors.Is(err, idemstore.ErrKeyNotFound) {
		t.Fatalf("key after that answer: %v; want it released", err)
	}
	must(t, replica.Signal(syscall.SIGCONT))
	poll(t, "the replica to follow again", func() bool { return rdb.Wait(ctx, 1, 100*time.Millisecond).Val() == 1 })
	if w := post(); w.Code != http.StatusCreated || runs.Load() != 2 {
		t.Fatalf("retry: %d %s after %d runs; want 201 from a second run", w.Code, w.Body, runs.Load())
	}
	if w := post(); w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "true" || runs.Load() != 2 {
		t.Fatalf("second retry: %d, replayed %q, %d runs; want the stored answer", w.Code, w.Header().Get("Idempotent-Replayed"), runs.Load())
	}
}
