// Package idemredis is a two-phase idemstore.Store in Redis: one server, a
// primary with replicas, or Redis Cluster, through a go-redis
// UniversalClient. It is made for idemproxy and for handlers whose effects
// live elsewhere (an upstream API, a payment processor, a queue), which run
// in idem.ModeTwoPhase.
//
//	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{"10.0.0.1:6379"}})
//	store, err := idemredis.New(rdb, &idemredis.Config{MinReplicas: 1})
//	...
//	if err := store.Migrate(ctx); err != nil { ... } // records the layout version
//	mw, err := idem.New(store, &idem.Config{Mode: idem.ModeTwoPhase, ClientID: clientOf})
//
// # When to choose Redis, and when not
//
// Choose it for two-phase handlers whose effects are external and
// idempotent downstream (the handler passes a key derived from the claim,
// idem.DeriveKey, to the service it calls), where the key store need only
// be fast and shared by every instance: idemproxy in front of an API, a
// gateway, a worker that calls a processor. Do not choose it for a handler
// that writes to its own database: there the key belongs in that database
// (idempg, idemsqlite), where the key and the business rows commit in one
// transaction (idem.ModeAtomic) and no failover of a second system can
// part them. Redis has no transaction that the handler's writes could
// share, so this store refuses ModeAtomic: every claim in it fails with
// an error wrapping [ErrAtomicMode]. paymentsd therefore does not accept a
// Redis URL; idemproxy does.
//
// # Layout
//
// Each key is one hash, named "{PREFIX:CLIENT:KEY}" with CLIENT and KEY
// percent-escaped ('%', ':', '{', '}' and SCAN's wildcards), so no client
// or key can spell another scope's name, move the hash tag or widen a
// listing's pattern. The whole name is the hash tag: every operation
// touches that one key, so one slot, and works unchanged on Redis
// Cluster. Its fields are listed in scripts.go: request identity and hash,
// status, created_at, the holder's locked_at and lease expiry, the fencing
// token, the holder's nonce, the response, and the recovery point with its
// state. Times are Unix microseconds. The layout's version is the key
// "PREFIX:schema", written by [Store.Migrate] and checked by [Store.Ready],
// which also asks every primary to answer and, with MinReplicas, to have
// that many replicas online.
//
// # Scripts and the rules they implement
//
// Every change is a Lua script that compares and sets the status, the
// fencing token and the holder's nonce together. The nonce is random per
// claim (and per takeover): a token alone can go backwards when a failover
// loses an increment, or restart at 1 when a key expires and is made
// anew, and the nonce, like idempg's created_at fence, tells the holders
// apart then. The rules are those of idemstore/rules.go; the claim script
// restates them, and TestClaimScriptDecidesAsRules checks, at each
// boundary, that it decides as the Go predicates do. Every decision uses
// the caller's clock (idemstore.ClaimParams.Now and the like), never
// Redis's TIME.
//
//   - claim: no key, a new key at token 1. idemstore.Expired (retention > 0
//     and now >= created + retention): replaced as new, token + 1.
//     ClaimParams.CanTakeOver (started, idemstore.LeaseExpired: now >=
//     locked + lock timeout, or no holder at all; same request hash):
//     taken over, token + 1, a new nonce, a new lease expiry. Otherwise the
//     record is returned, and the middleware answers it: a replay, 422, or
//     409 with Retry-After from its recorded lease expiry
//     (idemstore.Record.LeaseEnd). A claim resent by go-redis after a lost
//     answer finds its own nonce and gets its lease again. [Store.ClaimAt]
//     also saves a recovery point in a key the claim makes (new or past
//     its retention), as the lease's first checkpoint would, in the same
//     script; a key taken over keeps its point.
//   - complete: the lease's token and nonce and status started (the
//     lease's fence, as idemtest's memory store's held): the response is
//     stored. Another holder's completed key is an *idemstore.CompletedError;
//     anything else idemstore.ErrLeaseLost.
//   - release: under the same fence, a key past no recovery point is
//     deleted, and one past a point loses its holder (locked_at and the
//     lease expiry go), for the next claim to take over at once.
//   - checkpoint: under the same fence, the recovery point and its state.
//   - operators' release and delete read the key, decide in Go
//     (idemstore.ReleaseKeyParams.Check, idemstore.CheckDelete), and apply
//     only if the token and nonce are still those read, else
//     idemstore.ErrKeyChanged. A release raises the token and draws a new
//     nonce.
//   - [Store.Unfinished] and [Store.ListKeys] decide in Go
//     (idemstore.UnfinishedParams.Lists and the listing's filters).
//
// # Retention without a purge
//
// A key's retention is its Redis expiry: a claim that makes a key sets it
// to expire Retention later (PEXPIRE, a span, so that the injected clock
// of tests, which may be far in the past, does not expire keys at once;
// with the real clock it is the same instant as created_at + Retention).
// A takeover keeps it. So there is no purge job: the store implements no
// idemstore.PurgeStore, and idemproxy runs no purger on Redis. Redis's
// own eviction must not remove keys: run it with maxmemory-policy
// noeviction (or volatile-* with nothing else volatile), or an evicted
// key runs its request a second time.
//
// # Listing and its cost
//
// Redis has no index on a key's state or age. [Store.ListKeys] and
// [Store.Unfinished] SCAN every key of the prefix on every primary and
// read each (pipelined, 500 a batch), then filter and sort in memory: a
// pass costs a read of every key kept, and holds the matches in memory.
// That is fine for an operator's listing and for a resumer that runs
// every few minutes over some hundred thousand keys; beyond that, give the
// resumer a longer interval, or keep the keys that need one in
// PostgreSQL.
//
// # Durability: MinReplicas and WAIT
//
// Redis replicates asynchronously: a primary answers a write before any
// replica has it. With [Config.MinReplicas] 0 (the default), a failover
// that promotes a replica which had not yet received the last writes loses
// them: a claim (the retry then runs the request again, a second execution
// downstream unless the downstream call is itself idempotent by the
// derived key) or a completion (the retry runs again, or finds the key in
// flight and waits out the lease, then runs again). A primary that
// restarts without persistence loses every key.
//
// With MinReplicas n, after a claim, a checkpoint and a completion the
// store sends WAIT n on the connection that ran the script. Fewer
// acknowledgements within [Config.ReplicaTimeout] is never a silent
// success, and the store undoes the write on the primary, so that it
// reports what it did: a claim gives the key back and fails (no lease:
// the middleware answers 503, nothing ran; a key it made is deleted, with
// the point ClaimAt saved in it); a checkpoint puts back the
// recovery point it replaced and fails; a completion makes the key started
// again, with no response, at the recovery point it had (which a
// completion keeps, with MinReplicas, for that) and fails, its lease still
// open for the Release that follows, so that the middleware's answer, the
// result not recorded and the key released, is true. These errors wrap
// idemstore.ErrUnavailable and not idemstore.ErrOutcomeUnknown; only a
// script whose answer is lost (the connection fails after it was sent),
// or an undo that gets no answer, is an unknown outcome. An undo that a
// failover loses can bring the write back (WAIT short is "not confirmed in
// time", not "absent"): a completion undone then replays instead of
// running again. What WAIT protects: an acknowledged claim, checkpoint or
// completion is on n replicas, so a failover that promotes one of them
// keeps it. What it does not: WAIT does not make Redis strongly
// consistent. A failover may promote a replica that missed the write (the
// cluster picks by replication offset, but a replica that lagged beyond
// the others can still win, and manual failovers choose freely); writes
// acknowledged by replicas that then restart without persistence are lost.
// Persistence (appendonly yes, appendfsync everysec or always) is a
// separate guard, against a restart rather than a failover. The script
// and its WAIT go in one round trip, so a claim that finds the key (a
// replay, a 409) waits too: while fewer than MinReplicas replicas are
// connected, every claim, replays included, takes ReplicaTimeout. Release
// does not WAIT: losing one leaves the key held until its lease ends.
//
// Measured, through idemproxy on a cluster of three primaries with one
// replica each, each primary killed (SIGKILL) in turn under a storm of
// retried requests: see docs/proxy.md ("Redis: failover, measured") and
// TestRedisFailover in cmd/internal/proxy. With MinReplicas 1 no key ran
// twice upstream and no acknowledged answer was lost over nine failovers;
// with MinReplicas 0 none was either in those runs on loopback, where a
// replica lags its primary by well under a millisecond: what MinReplicas 0
// can lose is the writes inside that lag when the primary dies, more on a
// slower link or a lagging replica.
//
// # The client: go-redis, and rueidis
//
// The store is on go-redis v9. rueidis (v1.0.79) was weighed against it;
// client-side caching, its headline, is of no use to claims, which must
// read the primary. What matters is pipelining and cluster support. Both
// clients follow a cluster's slots and redirections. rueidis pipelines
// the commands of concurrent callers on one connection (auto-pipelining),
// and that is measurably cheaper: idemredis/clientbench runs a script of
// the claim's shape (HMGET of seven fields, HSET of fourteen, PEXPIRE) on
// a new key per call against a server of its own, and on this project's
// shared two-core machine (load average 17 to 19, so the figures are
// indicative) gave, from 128 concurrent callers, 134 µs a call with
// go-redis's pool and 40 µs with rueidis (3.3 times the throughput), and
// from one caller 51 µs and 62 µs; 27 allocations (824 B) a call against
// 9 (300 B). But the gain is not to be had where durability is asked
// for: with MinReplicas the store must send WAIT on the connection that
// ran the script (WAIT counts that connection's writes), and rueidis
// tags WAIT as a blocking command, which it sends on a dedicated
// connection of another pool, where it would count nothing; the pair
// must then go together on a dedicated connection (DoMulti with a
// blocking command does that), as go-redis's pool does anyway. So a
// switch would help MinReplicas 0 at high concurrency only, and
// idemproxy's new-key cost on this machine lies mostly outside the
// script's round trip (see the benchmarks in docs/proxy.md). The store
// stays on go-redis; rueidis is the candidate to measure end to end if a
// deployment with MinReplicas 0 finds the client's CPU to be its limit.
//
// # Cluster
//
// On a *redis.ClusterClient every script goes to the key's primary;
// with MinReplicas, the script and its WAIT are pipelined on that
// primary's own client, so that WAIT counts that connection's writes, and
// the store follows a slot that moved (MOVED) or is moving (ASK) itself,
// to the node named, five redirections at most; without MinReplicas
// go-redis follows them. TestClusterReshardLosesNothing moves 1500 slots
// during a storm of claims, completions and replays, with MinReplicas 0
// and 1, and loses no key. Listings scan every primary.
package idemredis
