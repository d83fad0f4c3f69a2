package idemtest

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
)

// Harness describes a store to [RunStoreTests].
type Harness struct {
	// NewStore returns a fresh, empty store. It is called once per subtest;
	// register cleanup with t.Cleanup. Required.
	NewStore func(t *testing.T) idemstore.Store

	// Write performs one business write, recording value, inside the
	// transaction that the lease put into ctx (see idemstore.Lease.Context). It
	// returns the write's error. Count returns how many committed business
	// writes recorded value. Both nil: the store has no transactions, and
	// the atomicity tests are skipped.
	Write func(ctx context.Context, store idemstore.Store, value string) error
	Count func(t *testing.T, store idemstore.Store, value string) int

	// NewUnmigrated returns a fresh store whose database has none of the
	// store's schema, for the schema tests. The store must have the
	// methods of a migrating store, as idempg and idemsqlite do:
	//
	//	Migrate(ctx context.Context) error
	//	MigrateTo(ctx context.Context, version int) error
	//	SchemaVersion(ctx context.Context) (int, error)
	//
	// nil skips the schema tests.
	NewUnmigrated func(t *testing.T) idemstore.Store

	// TwoPhaseOnly says that the store keeps two-phase keys only, as a
	// store without transactions (Redis) does: its Claim refuses
	// ModeAtomic with an error. The suite then runs the two-phase cases
	// only, and checks that an atomic claim fails and leaves the key free.
	TwoPhaseOnly bool
}

// purger is a store that deletes keys past retention. A store from
// Harness.NewStore that has this method gets the purge tests.
type purger interface {
	Purge(ctx context.Context, p idemstore.PurgeParams) (int64, error)
}

// migrator is a store with a versioned schema (see Harness.NewUnmigrated).
type migrator interface {
	Migrate(ctx context.Context) error
	MigrateTo(ctx context.Context, version int) error
	SchemaVersion(ctx context.Context) (int, error)
}

// epoch is the suite's clock origin; stores must use ClaimParams.Now.
var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

const (
	lockTimeout = 30 * time.Second
	retention   = 24 * time.Hour
)

// RunStoreTests runs the store conformance suite, in both modes (in
// ModeTwoPhase only for a store that sets [Harness.TwoPhaseOnly]), then
// the tests of purge and of the schema for stores that have them.
func RunStoreTests(t *testing.T, h Harness) {
	t.Helper()

	for _, mode := range []idem.Mode{idem.ModeAtomic, idem.ModeTwoPhase} {
		if mode == idem.ModeAtomic && h.TwoPhaseOnly {
			t.Run(mode.String(), func(t *testing.T) {
				s := suite{h: h, mode: mode}
				t.Run("RefusesAtomicClaim", s.refusesAtomicClaim)
			})
			continue
		}
		t.Run(mode.String(), func(t *testing.T) {
			s := suite{h: h, mode: mode}
			t.Run("ClaimsNewKey", s.claimsNewKey)
			t.Run("ReplaysCompletedKey", s.replaysCompletedKey)
			t.Run("ReportsKeyInFlightWithoutWaiting", s.reportsInFlight)
			t.Run("ReturnsRecordOnMismatch", s.returnsRecordOnMismatch)
			t.Run("ConcurrentClaimsElectOneOwner", s.concurrentClaims)
			t.Run("ReleaseFreesKey", s.releaseFreesKey)
			t.Run("ExpiredKeyIsReplaced", s.expiredKeyIsReplaced)
			t.Run("IsolatesTenants", s.isolatesTenants)
			t.Run("StoresLargeBinaryResponse", s.storesLargeResponse)
			t.Run("CancelledClaimLeavesNothing", s.cancelledClaim)
			t.Run("CompletedLeaseHasEnded", s.completedLeaseHasEnded)
			t.Run("ReleasedLeaseHasEnded", s.releasedLeaseHasEnded)
			t.Run("LeaseCarriesTheRowsCreatedAt", s.leaseCarriesCreatedAt)
			t.Run("StoresTraceContext", s.storesTraceContext)
			if mode == idem.ModeTwoPhase {
				t.Run("TakeoverReplacesTraceContext", s.takeoverReplacesTraceContext)
				t.Run("TakesOverExpiredLease", s.takesOverExpiredLease)
				t.Run("ConcurrentTakeoversElectOneHolder", s.concurrentTakeovers)
				t.Run("NoTakeoverWithDifferentRequest", s.noTakeoverWithDifferentRequest)
				t.Run("StaleHolderCannotRelease", s.staleHolderCannotRelease)
				t.Run("StaleHolderAfterTakeoverRelease", s.staleHolderAfterTakeoverRelease)
				t.Run("StaleHolderOfExpiredKeyCannotComplete", s.staleHolderOfExpiredKey)
				t.Run("LostLeaseHasEnded", s.lostLeaseHasEnded)
			}
			t.Run("CommitsBusinessWritesWithResponse", s.commitsWrites)
			t.Run("ReleaseRollsBackBusinessWrites", s.releaseRollsBack)
			t.Run("NoWritesAfterLeaseEnded", s.noWritesAfterEnd)
			if mode == idem.ModeTwoPhase {
				t.Run("StaleHolderWritesRollBack", s.staleHolderWritesRollBack)
			}
		})
	}
	runRecoveryTests(t, h)
	s := suite{h: h, mode: idem.ModeTwoPhase}
	t.Run("Purge", func(t *testing.T) {
		t.Run("DeletesKeysCreatedBefore", s.purgeDeletesOldKeys)
		t.Run("KeepsKeyCreatedExactlyAtTheCutoff", s.purgeExactCutoff)
		t.Run("ZeroBatchSizeMeansDefault", s.purgeZeroBatchSize)
		t.Run("RejectsNegativeBatchSize", s.purgeRejectsNegativeBatchSize)
		t.Run("RequiresBefore", s.purgeRequiresBefore)
		t.Run("KeepsKeysInFlight", s.purgeKeepsKeysInFlight)
		t.Run("PurgedKeyFencesStalledHolder", s.purgedKeyFencesStalledHolder)
		t.Run("DeletesKeysReleasedAtARecoveryPoint", s.purgeDeletesReleasedAtPoint)
		t.Run("LockIsExclusive", s.purgeLockIsExclusive)
		t.Run("BatchIsBoundedAndKeepsKeysInFlight", s.purgeBatchIsBounded)
		t.Run("KeyStatsCountStartedKeys", s.keyStats)
	})
	t.Run("Schema", func(t *testing.T) {
		t.Run("VersionBeforeAndAfterMigration", s.schemaVersion)
	})
}

type suite struct {
	h    Harness
	mode idem.Mode
	// inFlightDeadline overrides the in-flight test's deadline, for the
	// test that shows that the check fails for a store that waits.
	inFlightDeadline time.Duration
}

var keySeq struct {
	sync.Mutex
	n int
}

func newScope(client string) idemstore.Scope {
	keySeq.Lock()
	defer keySeq.Unlock()
	keySeq.n++
	return idemstore.Scope{ClientID: client, Key: fmt.Sprintf("key-%d-%d", time.Now().UnixNano(), keySeq.n)}
}

func hashOf(s string) []byte {
	sum := sha256.Sum256([]byte(s))
	return sum[:]
}

func (s suite) params(scope idemstore.Scope, body string, now time.Time) idemstore.ClaimParams {
	return idemstore.ClaimParams{
		Scope: scope, Method: http.MethodPost, Path: "/v1/payments",
		RequestHash: hashOf(body), RequestFields: []byte(`{"/amount":"` + body + `"}`),
		TwoPhase: s.mode == idem.ModeTwoPhase, Now: now, LockTimeout: lockTimeout, Retention: retention,
	}
}

// callTimeout bounds each store call of the suite's helpers, so that a
// store that waits forever (for a connection its own lease holds, say)
// fails the case by name instead of hanging the test binary.
const callTimeout = 10 * time.Second

// callContext is the context of one store call: it ends after callTimeout.
func callContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), callTimeout)
}

func (s suite) claim(t testing.TB, store idemstore.Store, p idemstore.ClaimParams) idemstore.ClaimResult {
	t.Helper()
	ctx, cancel := callContext()
	defer cancel()
	res, err := store.Claim(ctx, p)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	if (res.Lease == nil) == (res.Record == nil) {
		t.Fatalf("Claim returned lease=%v record=%v; want exactly one", res.Lease != nil, res.Record != nil)
	}
	return res
}

func (s suite) mustLease(t testing.TB, store idemstore.Store, p idemstore.ClaimParams) idemstore.Lease {
	t.Helper()
	res := s.claim(t, store, p)
	if res.Lease == nil {
		t.Fatalf("Claim returned a record (status %q); want a lease", res.Record.Status)
	}
	return res.Lease
}

func (s suite) mustRecord(t testing.TB, store idemstore.Store, p idemstore.ClaimParams) *idemstore.Record {
	t.Helper()
	res := s.claim(t, store, p)
	if res.Record == nil {
		t.Fatalf("Claim returned a lease (token %d); want the existing record", res.Lease.Info().Token)
	}
	return res.Record
}

func complete(t testing.TB, l idemstore.Lease, resp *idemstore.Response) {
	t.Helper()
	ctx, cancel := callContext()
	defer cancel()
	if err := l.Complete(ctx, resp); err != nil {
		t.Fatalf("Complete: %v", err)
	}
}

func release(t testing.TB, l idemstore.Lease) {
	t.Helper()
	ctx, cancel := callContext()
	defer cancel()
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

func sampleResponse(body string) *idemstore.Response {
	return &idemstore.Response{
		StatusCode: http.StatusCreated,
		Header:     http.Header{"Content-Type": {"application/json"}, "Location": {"/v1/payments/pay_1"}},
		Body:       []byte(body),
	}
}

func sameTime(a, b time.Time) bool { return a.Sub(b).Abs() < time.Millisecond }
