package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/cmd/internal/database"
	"github.com/idemkit/idem/cmd/internal/payments"
)

// rig is one database of a run, with an endpoint per variant: the run's
// only one, or, with Config.Prefill, the prefilled key table or the empty
// one.
type rig struct {
	db                        *database.DB
	servers                   map[string]*httptest.Server
	holder                    *holdRepo
	bouncer                   *bouncerDB
	rows                      *rowsDB
	replayKeys, rowReplayKeys []string
	coldKey                   func(seq int64) string
	coldSeq, seq              atomic.Int64
}

// newRig opens the database at url and serves cfg's variants on it.
func newRig(ctx context.Context, cfg Config, url string, client *http.Client) (_ *rig, err error) {
	db, err := database.Open(ctx, url, &database.Config{Migrate: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	g := &rig{db: db, servers: map[string]*httptest.Server{}, bouncer: &bouncerDB{url: cfg.BouncerURL}, rows: &rowsDB{url: url}}
	defer func() {
		if err != nil {
			g.close()
		}
	}()
	repo, err := payments.NewRepo(ctx, db)
	if err != nil {
		return nil, err
	}
	g.holder = &holdRepo{Repo: repo}

	// Replays are retries sent to the atomic endpoint, which creates the keys.
	endpoints := slices.Clone(cfg.Variants)
	if (slices.Contains(endpoints, Replay) || slices.Contains(endpoints, ReplayCold)) && !slices.Contains(endpoints, Atomic) {
		endpoints = append(endpoints, Atomic)
	}
	if slices.Contains(endpoints, ReplayRows) && !slices.Contains(endpoints, AtomicRows) {
		endpoints = append(endpoints, AtomicRows)
	}
	for _, v := range endpoints {
		if v == Replay || v == ReplayRows {
			continue
		}
		variantRepo := repo
		if v == Conflict {
			variantRepo = g.holder
		}
		var h http.Handler
		switch {
		case slices.Contains(BouncerVariants, v):
			h, err = g.bouncer.handler(ctx, v)
		case slices.Contains(RowVariants, v):
			h, err = g.rows.handler(ctx, v)
		case v == ReplayCold:
			// A second instance of the atomic endpoint, as another process
			// behind a load balancer is: its middleware claimed none of
			// the keys.
			h, err = variantHandler(db, variantRepo, Atomic)
		default:
			h, err = variantHandler(db, variantRepo, v)
		}
		if err != nil {
			return nil, err
		}
		g.servers[v] = httptest.NewServer(labeled(v, h))
	}
	return g, nil
}

// prepare creates the keys that the replay variants retry.
func (g *rig) prepare(ctx context.Context, cfg Config, client *http.Client) (err error) {
	if slices.Contains(cfg.Variants, Replay) || slices.Contains(cfg.Variants, ReplayCold) {
		if g.replayKeys, err = createReplayKeys(ctx, client, g.servers[Atomic].URL); err != nil {
			return err
		}
	}
	if slices.Contains(cfg.Variants, ReplayRows) {
		if g.rowReplayKeys, err = createReplayKeys(ctx, client, g.servers[AtomicRows].URL); err != nil {
			return err
		}
	}
	if slices.Contains(cfg.Variants, ReplayCold) {
		n := int64(coldPerRound)
		if cfg.Requests > 0 {
			n = cfg.Requests
		}
		if g.coldKey, err = coldKeys(ctx, g.db, g.replayKeys[0], n*int64(cfg.Rounds)); err != nil {
			return err
		}
	}
	return nil
}

// run measures one round of variant v.
func (g *rig) run(ctx context.Context, cfg Config, client *http.Client, v string) (*tally, error) {
	var url string
	var next func() string
	want := http.StatusCreated
	finish := func() error { return nil }
	switch v {
	case Replay:
		url = g.servers[Atomic].URL
		next = func() string { return g.replayKeys[int(g.seq.Add(1))%len(g.replayKeys)] }
	case ReplayRows:
		url = g.servers[AtomicRows].URL
		next = func() string { return g.rowReplayKeys[int(g.seq.Add(1))%len(g.rowReplayKeys)] }
	case ReplayCold:
		url = g.servers[v].URL
		next = func() string { return g.coldKey(g.coldSeq.Add(1) - 1) }
	case Conflict:
		url = g.servers[v].URL
		key, f, err := g.holder.hold(ctx, client, url, g.seq.Add(1))
		if err != nil {
			return nil, err
		}
		finish, want = f, http.StatusConflict
		next = func() string { return key }
	default:
		url = g.servers[v].URL
		next = newKey
	}
	t := measure(ctx, client, url, cfg, next, want)
	if err := finish(); err != nil {
		return nil, err
	}
	return t, nil
}

func (g *rig) close() {
	for _, srv := range g.servers {
		srv.Close()
	}
	g.bouncer.close()
	g.rows.close()
	g.db.Close()
}

// createReplayKeys creates, through the atomic endpoint at url, the 256
// keys that a replay variant retries.
func createReplayKeys(ctx context.Context, client *http.Client, url string) ([]string, error) {
	var keys []string
	for i := range 256 {
		key := fmt.Sprintf("bench-replay-%d-%d", time.Now().UnixNano(), i)
		if status, said, err := send(ctx, client, url, key, http.StatusCreated); err != nil || status != http.StatusCreated {
			return nil, fmt.Errorf("bench: create replay key: %s: %v", said, err)
		}
		keys = append(keys, key)
	}
	return keys, nil
}

// newKey returns a new idempotency key: random, as clients' keys are (a
// version 4 UUID, most often), so that the key indexes take them all over
// rather than at one end.
func newKey() string { return "bench-" + rand.Text() }
