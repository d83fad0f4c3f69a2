// Package recent remembers the keys that a middleware claimed lately.
package recent

import (
	"hash/maphash"
	"sync"

	"github.com/idemkit/idem/idemstore"
)

// The size of Keys: recentBuckets buckets of recentWays digests of 8
// bytes, 512 KiB in all, without pointers for the garbage collector to
// follow. A bucket is one cache line.
const (
	recentWays    = 8 // Seen is written for eight
	recentBuckets = 1 << 13
)

// Seen compares and shifts the eight ways one by one: this fails to
// compile when recentWays is not eight.
var _ [recentWays - 8]struct{} = [8 - recentWays]struct{}{}

// Keys remembers digests of the last keys that a middleware in
// ModeAtomic claimed, so that another request with one of them (a retry
// of a finished request, or a duplicate of one in flight) claims its key
// at once instead of speculatively ([idemstore.ClaimParams.Speculative]). A
// speculative claim saves a new key a round trip but makes a retry run
// its handler up to the first statement before it learns that the key
// exists; most keys are claimed once, and the retries that come back to
// the same process skip that work.
//
// A digest goes to the bucket its low bits choose, and is forgotten when
// recentWays newer ones have come to that bucket: of the keys 16,384
// claims ago about 1 in 1,000 is forgotten, of those 32,768 claims ago
// about 1 in 20. Remembering or forgetting costs a few compares and no
// allocation, which a map of the last keys, with its growth and its
// deletions, did not.
//
// It is a hint and never a fence: a digest that collides or was forgotten
// only chooses the other claim, which is answered the same way. Retries
// that reach another process (behind a load balancer) claim
// speculatively there.
type Keys struct {
	seed    maphash.Seed
	mu      sync.Mutex
	buckets *[recentBuckets][recentWays]uint64 // newest first; 0 is empty; nil until the first key
}

// New returns a Keys that remembers no key yet.
func New() *Keys {
	return &Keys{seed: maphash.MakeSeed()}
}

// digest is the digest of the key of scope, never 0.
func (r *Keys) digest(scope idemstore.Scope) uint64 {
	// Two digests mixed, rather than one of the joined text, which would
	// allocate.
	d := maphash.String(r.seed, scope.ClientID)*0x9e3779b97f4a7c15 ^ maphash.String(r.seed, scope.Key)
	return max(d, 1)
}

// Seen reports whether the key of scope was claimed here recently, and
// remembers it.
func (r *Keys) Seen(scope idemstore.Scope) bool {
	d := r.digest(scope)
	r.mu.Lock()
	if r.buckets == nil {
		r.buckets = new([recentBuckets][recentWays]uint64)
	}
	// Unlocked without a defer, which every claim would pay: nothing
	// below can panic.
	b := &r.buckets[d%recentBuckets]
	// The eight ways are compared, then shifted, in straight lines of
	// code rather than in a loop and by copy: cheaper than the loop's
	// steps and copy's call, for a few words.
	if b[0] == d || b[1] == d || b[2] == d || b[3] == d || b[4] == d || b[5] == d || b[6] == d || b[7] == d {
		r.mu.Unlock()
		return true
	}
	b[7], b[6], b[5], b[4], b[3], b[2], b[1], b[0] = b[6], b[5], b[4], b[3], b[2], b[1], b[0], d
	r.mu.Unlock()
	return false
}
