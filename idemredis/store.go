package idemredis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idem/idemstore"
	"github.com/redis/go-redis/v9"
)

// PrefixDefault is the default of [Config.Prefix].
const PrefixDefault = "idem"

// ReplicaTimeoutDefault is the default of [Config.ReplicaTimeout].
const ReplicaTimeoutDefault = time.Second

// LayoutVersion is the version of the key layout this build reads and
// writes; [Store.Migrate] records it and [Store.Ready] checks it.
const LayoutVersion = 1

// ErrAtomicMode is returned, wrapped, by a claim in idem.ModeAtomic:
// Redis has no transaction that a handler's writes could share with the
// stored response. Run the middleware in idem.ModeTwoPhase.
var ErrAtomicMode = errors.New("idemredis: Redis keeps two-phase keys only: ModeAtomic needs a transaction the handler's writes share, which Redis has not")

// Config configures a [Store].
type Config struct {
	// Prefix starts the name of every key the store keeps, so that several
	// services, or tests, share one Redis. Letters, digits, '_', '-' and
	// '.' only. Defaults to PrefixDefault ("idem").
	Prefix string

	// MinReplicas is how many replicas must acknowledge a claim, a
	// checkpoint and a completion (Redis's WAIT) before the store reports
	// them. Fewer within ReplicaTimeout fails the call with an error
	// wrapping idemstore.ErrUnavailable, after the store undid the write
	// on the primary (see the package documentation). Defaults to 0: no
	// wait, and a failover may lose the last writes acknowledged.
	MinReplicas int

	// ReplicaTimeout is how long WAIT waits for MinReplicas. Defaults to
	// ReplicaTimeoutDefault (1 s).
	ReplicaTimeout time.Duration
}

var prefixRe = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

func (c *Config) withDefaults() *Config {
	out := Config{}
	if c != nil {
		out = *c
	}
	if out.Prefix == "" {
		out.Prefix = PrefixDefault
	}
	if out.ReplicaTimeout == 0 {
		out.ReplicaTimeout = ReplicaTimeoutDefault
	}
	return &out
}

func (c *Config) validate() error {
	switch {
	case !prefixRe.MatchString(c.Prefix):
		return fmt.Errorf("idemredis: Config.Prefix %q: want letters, digits, '_', '-' and '.' only", c.Prefix)
	case c.MinReplicas < 0:
		return errors.New("idemredis: Config.MinReplicas must not be negative")
	case c.ReplicaTimeout < 0:
		return errors.New("idemredis: Config.ReplicaTimeout must not be negative")
	}
	return nil
}

var (
	_ idemstore.Store         = (*Store)(nil)
	_ idemstore.RecoveryStore = (*Store)(nil)
	_ idemstore.KeyAdmin      = (*Store)(nil)
	_ idemstore.Readier       = (*Store)(nil)
	_ idemstore.RecoveryLease = (*lease)(nil)
)

// Store is a two-phase [idemstore.Store] in Redis: one server, a primary
// with replicas, or Redis Cluster, through a go-redis UniversalClient.
type Store struct {
	rdb   redis.UniversalClient
	cfg   *Config
	nodes nodeClients // of a cluster, to follow a redirection with WAIT
}

// New returns a store on rdb, which the caller keeps and closes; call
// [Store.Close] too, when done with the store.
func New(rdb redis.UniversalClient, cfg *Config) (*Store, error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &Store{rdb: rdb, cfg: c}, nil
}

// Close closes the clients the store opened itself: with MinReplicas on a
// cluster, those of nodes it was redirected to. It does not close rdb.
func (s *Store) Close() { s.nodes.close() }

// escaper spells the characters that would let a client or key forge
// another scope's name ('%', ':'), move its hash tag ('{', '}') or match
// more than itself in SCAN's MATCH ('*', '?', '[', ']', '\').
var escaper = strings.NewReplacer("%", "%25", ":", "%3A", "{", "%7B", "}", "%7D",
	"*", "%2A", "?", "%3F", "[", "%5B", "]", "%5D", `\`, "%5C")

// keyName is the name of scope's hash: "{prefix:client:key}", all of it
// the hash tag, so that any key the store may add for a scope lands in
// its slot.
func (s *Store) keyName(scope idemstore.Scope) string {
	return "{" + s.cfg.Prefix + ":" + escaper.Replace(scope.ClientID) + ":" + escaper.Replace(scope.Key) + "}"
}

// match is the SCAN pattern of the keys of client, or of every client's
// for "".
func (s *Store) match(client string) string {
	if client == "" {
		return "{" + s.cfg.Prefix + ":*"
	}
	return "{" + s.cfg.Prefix + ":" + escaper.Replace(client) + ":*}"
}

func (s *Store) schemaKey() string { return s.cfg.Prefix + ":schema" }

func micros(t time.Time) string { return strconv.FormatInt(t.UnixMicro(), 10) }

func newNonce() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// unavailable wraps err, a failure to reach Redis, with
// idemstore.ErrUnavailable; a context's own error is returned as it is.
func unavailable(what string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("idemredis: %s: %w", what, err)
	}
	return fmt.Errorf("idemredis: %s: %w: %w", what, idemstore.ErrUnavailable, err)
}

// unknown wraps err, a failure after a write may have been applied, with
// idemstore.ErrOutcomeUnknown and idemstore.ErrUnavailable.
func unknown(what string, err error) error {
	return fmt.Errorf("idemredis: %s: %w: %w: %w", what, idemstore.ErrOutcomeUnknown, idemstore.ErrUnavailable, err)
}

// errReplicas reports that fewer replicas than Config.MinReplicas
// acknowledged a write.
type errReplicas struct{ got, want int }

func (e errReplicas) Error() string {
	return fmt.Sprintf("%d of %d replicas acknowledged the write", e.got, e.want)
}

// run runs script on key. With Config.MinReplicas set, it sends WAIT on
// the same connection, right after the script (WAIT counts the
// acknowledgements of that connection's writes), and returns errReplicas
// when fewer replicas acknowledged; wait false skips it.
func (s *Store) run(ctx context.Context, script *redis.Script, key string, wait bool, args ...any) (any, error) {
	if !wait || s.cfg.MinReplicas == 0 {
		return script.Run(ctx, s.rdb, []string{key}, args...).Result()
	}
	cc, cluster := s.rdb.(*redis.ClusterClient)
	if !cluster {
		return s.runWaiting(ctx, s.rdb, false, script, key, args)
	}
	node, err := cc.MasterForKey(ctx, key)
	if err != nil {
		return nil, err
	}
	// The script and its WAIT go to the key's primary on its own client,
	// which follows no redirection: a slot that moved (MOVED) or is moving
	// (ASK) is followed here, a few times at most.
	asking := false
	for range 5 {
		res, err := s.runWaiting(ctx, node, asking, script, key, args)
		addr, ask, redirected := redirection(err)
		if !redirected {
			return res, err
		}
		if !ask {
			cc.ReloadState(ctx)
		}
		node, asking = s.nodes.client(cc, addr), ask
	}
	return nil, errors.New("redirected five times")
}

// runWaiting runs script on key and WAIT in one pipeline on node, after
// ASKING when asking.
func (s *Store) runWaiting(ctx context.Context, node redis.Cmdable, asking bool, script *redis.Script, key string, args []any) (any, error) {
	var res, acks *redis.Cmd
	pipe := func() error {
		_, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
			if asking {
				p.Do(ctx, "ASKING")
			}
			res = p.EvalSha(ctx, script.Hash(), []string{key}, args...)
			acks = p.Do(ctx, "WAIT", s.cfg.MinReplicas, s.cfg.ReplicaTimeout.Milliseconds())
			return nil
		})
		return err
	}
	err := pipe()
	if res != nil && redis.HasErrorPrefix(res.Err(), "NOSCRIPT") {
		// The primary has not seen the script yet, or lost it in a restart.
		if err := script.Load(ctx, node).Err(); err != nil {
			return nil, err
		}
		err = pipe()
	}
	if err := res.Err(); err != nil {
		return nil, err
	}
	if err != nil {
		return res.Val(), err
	}
	n, _ := acks.Int()
	if n < s.cfg.MinReplicas {
		return res.Val(), errReplicas{n, s.cfg.MinReplicas}
	}
	return res.Val(), nil
}

// redirection reads a cluster's "MOVED slot addr" or "ASK slot addr".
func redirection(err error) (addr string, ask, ok bool) {
	if err == nil {
		return "", false, false
	}
	f := strings.Fields(err.Error())
	if len(f) != 3 || f[0] != "MOVED" && f[0] != "ASK" {
		return "", false, false
	}
	return f[2], f[0] == "ASK", true
}

// nodeClients are clients of a cluster's nodes by address, for the calls
// that must run on one connection of a given node (see Store.run).
type nodeClients struct {
	mu sync.Mutex
	m  map[string]*redis.Client
}

func (n *nodeClients) client(cc *redis.ClusterClient, addr string) *redis.Client {
	n.mu.Lock()
	defer n.mu.Unlock()
	if c, ok := n.m[addr]; ok {
		return c
	}
	o := cc.Options()
	c := redis.NewClient(&redis.Options{
		Addr: addr, Username: o.Username, Password: o.Password, TLSConfig: o.TLSConfig, Dialer: o.Dialer,
		DialTimeout: o.DialTimeout, ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout, Protocol: o.Protocol,
	})
	if n.m == nil {
		n.m = make(map[string]*redis.Client)
	}
	n.m[addr] = c
	return c
}

// close closes the clients.
func (n *nodeClients) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, c := range n.m {
		c.Close()
	}
	n.m = nil
}

// Claim implements [idemstore.Store]. It refuses a claim in ModeAtomic
// with an error wrapping [ErrAtomicMode].
func (s *Store) Claim(ctx context.Context, p idemstore.ClaimParams) (idemstore.ClaimResult, error) {
	return s.ClaimAt(ctx, p, idemstore.Recovery{})
}

// ClaimAt claims as Claim does, and a key that the claim makes (a new key,
// or one whose retention ran out) starts at the recovery point at, saved
// with the claim in one script, under its WAIT with MinReplicas: a lease
// that did not take the key over (LeaseInfo.TakenOver false) holds it at
// that point, as if its first Checkpoint had saved it, at no round trip
// of its own. A key taken over keeps the point it had, for the new holder
// to read. An empty at.Point saves none, as Claim.
//
// A claim that fails gives the key back whole: with too few replicas, a
// key it made is deleted, point and all, since nothing ran under it.
func (s *Store) ClaimAt(ctx context.Context, p idemstore.ClaimParams, at idemstore.Recovery) (idemstore.ClaimResult, error) {
	if !p.TwoPhase {
		return idemstore.ClaimResult{}, fmt.Errorf("idemredis: claim key: %w", ErrAtomicMode)
	}
	if err := ctx.Err(); err != nil {
		return idemstore.ClaimResult{}, err
	}
	nonce, err := newNonce()
	if err != nil {
		return idemstore.ClaimResult{}, fmt.Errorf("idemredis: claim key: %w", err)
	}
	leaseExp := ""
	if e := p.LeaseExpires(); !e.IsZero() {
		leaseExp = micros(e)
	}
	ttl := int64(0)
	if p.Retention > 0 {
		ttl = max(p.Retention.Milliseconds(), 1)
	}
	state, err := encodeState(at)
	if err != nil {
		return idemstore.ClaimResult{}, fmt.Errorf("idemredis: claim key: %w", err)
	}
	key := s.keyName(p.Scope)
	raw, err := s.run(ctx, claimScript, key, true,
		micros(p.Now), max(p.Retention.Microseconds(), 0), p.LockTimeout.Microseconds(),
		p.Method, p.Path, p.RequestHash, p.RequestFields, nonce, leaseExp, ttl, p.Scope.ClientID, p.Scope.Key, p.TraceContext,
		at.Point, state)
	var short errReplicas
	if err != nil && !errors.As(err, &short) {
		return idemstore.ClaimResult{}, unavailable("claim key", err)
	}
	reply, _ := raw.([]any)
	if len(reply) < 2 {
		return idemstore.ClaimResult{}, fmt.Errorf("idemredis: claim key: unexpected reply %v", raw)
	}
	kind, _ := reply[0].(string)
	if kind == "exists" {
		fields, _ := reply[1].([]any)
		rec, err := decodeRecord(fields)
		if err != nil {
			return idemstore.ClaimResult{}, fmt.Errorf("idemredis: claim key: %w", err)
		}
		return idemstore.ClaimResult{Record: rec}, nil
	}
	tok, err1 := replyInt(reply[1])
	created, err2 := replyInt(reply[2])
	if err := errors.Join(err1, err2); err != nil {
		return idemstore.ClaimResult{}, fmt.Errorf("idemredis: claim key: %w", err)
	}
	l := &lease{store: s, key: key, token: strconv.FormatInt(tok, 10), nonce: nonce,
		info: idemstore.LeaseInfo{Token: tok, TakenOver: kind == "takeover", CreatedAt: time.UnixMicro(created).UTC()}}
	if short.want > 0 {
		// The key is ours on the primary only: give it back, so that the
		// client's retry does not wait out the lease. No lease was handed
		// out, so nothing ran: an error wrapping ErrUnavailable, not
		// ErrOutcomeUnknown. A key the claim made goes, with the point
		// ClaimAt saved in it; one taken over keeps the point it had.
		// Should the give-back fail, the key waits out its lease, and
		// still nothing ran; a retry that takes it over then finds at's
		// point.
		made := ""
		if kind == "new" {
			made = "made"
		}
		_, _ = releaseScript.Run(context.WithoutCancel(ctx), s.rdb, []string{key}, l.token, l.nonce, made).Result()
		return idemstore.ClaimResult{}, unavailable("claim key", short)
	}
	return idemstore.ClaimResult{Lease: l}, nil
}

// replyInt reads a number from a script's reply: the string it was given,
// or an integer.
func replyInt(v any) (int64, error) {
	switch v := v.(type) {
	case string:
		return strconv.ParseInt(v, 10, 64)
	case int64:
		return v, nil
	}
	return 0, fmt.Errorf("reply %v (%T) is not a number", v, v)
}
