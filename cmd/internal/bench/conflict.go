package bench

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idem/cmd/internal/payments"
)

// Conflict is the variant that measures how fast a duplicate is told that
// its key is in flight: in each round one request with a new key inserts its
// payment and then sleeps in its transaction (atomic mode) until the round
// ends, while the clients send that same request again and again; every
// answer must be 409. Its latency is the figure, not its ratio.
const Conflict = "conflict"

// holdPrefix starts the keys of the conflict variant's holders.
const holdPrefix = "bench-hold-"

// holdRepo is a repository whose Insert, for a key of a conflict round's
// holder, waits after inserting until the round releases it: the holder
// sleeps in its transaction with its payment row written.
type holdRepo struct {
	payments.Repo

	mu      sync.Mutex
	entered chan struct{} // closed when the current holder has inserted
	release chan struct{} // closed when the current holder may finish
}

func (r *holdRepo) Insert(ctx context.Context, p *payments.Payment) error {
	if err := r.Repo.Insert(ctx, p); err != nil {
		return err
	}
	if !strings.HasPrefix(p.IdempotencyKey, holdPrefix) {
		return nil
	}
	r.mu.Lock()
	entered, release := r.entered, r.release
	r.mu.Unlock()
	close(entered)
	select {
	case <-release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// hold starts a holder of a new key on url and returns the key, once the
// holder has inserted its payment, and a function that lets the holder
// finish and waits for its answer. No duplicate is sent before then: the
// first request with the key must be the holder's.
func (r *holdRepo) hold(ctx context.Context, client *http.Client, url string, n int64) (string, func() error, error) {
	entered, release := make(chan struct{}), make(chan struct{})
	r.mu.Lock()
	r.entered, r.release = entered, release
	r.mu.Unlock()
	key := fmt.Sprintf("%s%d-%d", holdPrefix, time.Now().UnixNano(), n)
	answered := make(chan error, 1)
	go func() {
		status, said, err := send(ctx, client, url, key, http.StatusCreated)
		if err == nil && status != http.StatusCreated {
			err = fmt.Errorf("bench: the conflict holder answered %s, want 201", said)
		}
		answered <- err
	}()
	finish := func() error {
		close(release)
		return <-answered
	}
	select {
	case <-entered:
		return key, finish, nil
	case err := <-answered:
		return "", nil, fmt.Errorf("bench: the conflict holder ended before it was measured: %v", err)
	case <-ctx.Done():
		close(release)
		return "", nil, ctx.Err()
	}
}
