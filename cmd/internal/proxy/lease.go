package proxy

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
)

// The recovery points of a key route's key, beside RecoveryOutcomeUnknown.
// The proxy saves one before it sends anything upstream, so that whoever
// holds the key next (a retry that takes over a dead or stalled proxy's
// lease, or one that claims a key released after its response could not be
// stored) knows whether a forward may have reached the upstream. Their
// state holds the Idempotency-Key field value as the first forward sent it
// ("key") and the route's policy ("policy").
const (
	// RecoveryForwarded: a forward was about to be sent, and may have
	// reached the upstream. Hold and probe routes save it before they send;
	// a retry route, whose forward may be repeated, saves it only when its
	// key is released after an unknown outcome, to keep the key's field
	// value, so that its forwards cost no store write. A hold route's key
	// there is never forwarded again; a probe route's retry probes first; a
	// retry route's retry is forwarded again with the first forward's key.
	RecoveryForwarded = "forwarded"
	// RecoveryNotProcessed: the last forward never reached the upstream, or
	// the upstream answered that it did not process it (a status of
	// idem.NotProcessed, a 409, or a 503 with Retry-After): the next retry
	// is forwarded on every policy.
	RecoveryNotProcessed = "not_processed"
)

// keyStore gives the forwarder its lease: each lease it hands the
// middleware puts itself in the handler's context (the middleware builds
// that context with Lease.Context), where the forwarder reads and saves
// the key's recovery points.
//
// On hold and probe routes, whose forward saves RecoveryForwarded before
// it sends, a store that can (pointClaimer) saves that point with the
// claim that makes the key, so that a new key's forward costs the claim
// and the completion, and no checkpoint between them: nothing happens
// between the claim and the send but local work (the middleware runs the
// forwarder at once, and begin and probeFirst forward a key that was not
// taken over at once). A key taken over keeps its own point, for begin to
// read.
type keyStore struct{ idemstore.Store }

// pointClaimer is a store that saves a key's first recovery point with
// the claim that makes it (idemredis.Store.ClaimAt).
type pointClaimer interface {
	ClaimAt(ctx context.Context, p idemstore.ClaimParams, at idemstore.Recovery) (idemstore.ClaimResult, error)
}

func (s keyStore) Claim(ctx context.Context, p idemstore.ClaimParams) (idemstore.ClaimResult, error) {
	a, _ := ctx.Value(attemptKey{}).(*attempt)
	pc, ok := s.Store.(pointClaimer)
	if a == nil || a.policy == PolicyRetry || !ok {
		res, err := s.Store.Claim(ctx, p)
		if res.Lease != nil {
			res.Lease = &keyLease{Lease: res.Lease}
		}
		return res, err
	}
	res, err := pc.ClaimAt(ctx, p, a.recovery(RecoveryForwarded))
	if res.Lease != nil {
		res.Lease = &keyLease{Lease: res.Lease, forwarded: !res.Lease.Info().TakenOver}
	}
	return res, err
}

type keyLeaseKey struct{}

// keyLease is a lease of a key route's key.
type keyLease struct {
	idemstore.Lease
	// keep is set when the key could not be marked as it must be: Release
	// then leaves the key to its holder until the lease expires, instead
	// of freeing it for a retry that would be forwarded unchecked. The
	// retry that takes the key over decides from its recovery point. A
	// two-phase lease holds no transaction or connection between store
	// calls, so the lease left unended holds nothing.
	keep atomic.Bool
	// forwarded is set when the claim saved RecoveryForwarded (see
	// keyStore): the forward need not save it again.
	forwarded bool
}

func (l *keyLease) Context(ctx context.Context) context.Context {
	return context.WithValue(l.Lease.Context(ctx), keyLeaseKey{}, l)
}

func (l *keyLease) Release(ctx context.Context) error {
	if l.keep.Load() {
		return nil
	}
	return l.Lease.Release(ctx)
}

func keyLeaseOf(ctx context.Context) *keyLease {
	l, _ := ctx.Value(keyLeaseKey{}).(*keyLease)
	return l
}

// prior is what a key's recovery point says of its earlier forwards.
type prior struct {
	takenOver bool   // the claim took the key over: an earlier holder had it
	point     string // its recovery point; idemstore.RecoveryStarted when none
	key       string // the Idempotency-Key field value the first forward sent; "" if none was sent
	status    int    // the outcome-unknown status saved with RecoveryOutcomeUnknown
}

// mayHaveReached reports whether an earlier forward of the key may have
// reached the upstream: the key was taken over at a recovery point other
// than RecoveryNotProcessed. A key taken over with no recovery point was
// never sent: the proxy saves RecoveryForwarded before it sends.
func (pr prior) mayHaveReached() bool {
	return pr.takenOver && pr.point != idemstore.RecoveryStarted && pr.point != RecoveryNotProcessed
}

// recovery returns the lease as an idemstore.RecoveryLease. New checks that the
// store keeps recovery points.
func (l *keyLease) recovery() idemstore.RecoveryLease { return l.Lease.(idemstore.RecoveryLease) }

// prior reads the key's recovery point when the claim took it over; a new
// key has none.
func (p *Proxy) prior(ctx context.Context, l *keyLease) (prior, error) {
	if !l.Info().TakenOver {
		return prior{point: idemstore.RecoveryStarted}, nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), idem.StoreTimeoutDefault)
	defer cancel()
	at, err := l.recovery().Recovery(ctx)
	if err != nil {
		return prior{}, err
	}
	pr := prior{takenOver: true, point: at.Point, key: at.State["key"]}
	pr.status = statusOf(at.State["status"])
	return pr, nil
}

// save saves the key's recovery point with the attempt's key (the first
// forward's) and its route's policy, and extra state.
func (p *Proxy) save(ctx context.Context, a *attempt, point string, extra ...string) error {
	l := keyLeaseOf(ctx)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), idem.StoreTimeoutDefault)
	defer cancel()
	return l.recovery().Checkpoint(ctx, a.recovery(point, extra...))
}

// recovery is the recovery point point of the attempt's key: its state
// holds the attempt's key (the first forward's) and its route's policy,
// and extra state.
func (a *attempt) recovery(point string, extra ...string) idemstore.Recovery {
	st := idem.State{"key": a.key, "policy": string(a.policy)}
	for i := 0; i+1 < len(extra); i += 2 {
		st[extra[i]] = extra[i+1]
	}
	return idemstore.Recovery{Point: point, State: st}
}

// statusOf reads a saved outcome-unknown status: 502 or 504, else 502.
func statusOf(s string) int {
	switch strings.TrimSpace(s) {
	case "504":
		return http.StatusGatewayTimeout
	}
	return http.StatusBadGateway
}

// errNoRecoveryStore is New's error for a store that keeps no recovery
// points.
var errNoRecoveryStore = errors.New("proxy: the key store must keep recovery points (idemstore.RecoveryStore: idempg, idemsqlite, idemtest's memory store), by which a key whose forward may have reached the upstream is never forwarded twice")
