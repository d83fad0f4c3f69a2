package idem

import (
	"hash/maphash"
	"sync"
)

// recentCapacity is how many keys a middleware remembers in recentKeys:
// a digest of 8 bytes each, about 1 MiB in all with the map's overhead.
const recentCapacity = 1 << 15

// recentKeys remembers digests of the last keys that a middleware in
// ModeAtomic claimed, so that another request with one of them (a retry
// of a finished request, or a duplicate of one in flight) claims its key
// at once instead of speculatively ([ClaimParams.Speculative]). A
// speculative claim saves a new key a round trip but makes a retry run
// its handler up to the first statement before it learns that the key
// exists; most keys are claimed once, and the retries that come back to
// the same process skip that work.
//
// It is a hint and never a fence: a digest that collides or was evicted
// only chooses the other claim, which is answered the same way. Retries
// that reach another process (behind a load balancer) claim
// speculatively there.
type recentKeys struct {
	seed maphash.Seed
	mu   sync.Mutex
	set  map[uint64]struct{}
	ring []uint64 // the digests in set, oldest at next once full
	next int
}

func newRecentKeys() *recentKeys {
	return &recentKeys{seed: maphash.MakeSeed(), set: make(map[uint64]struct{})}
}

// seen reports whether the key of scope was claimed here recently, and
// remembers it.
func (r *recentKeys) seen(scope Scope) bool {
	// Two digests mixed, rather than one of the joined text, which would
	// allocate.
	d := maphash.String(r.seed, scope.ClientID)*0x9e3779b97f4a7c15 ^ maphash.String(r.seed, scope.Key)

	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.set[d]; ok {
		return true
	}
	if len(r.ring) < recentCapacity {
		r.ring = append(r.ring, d)
	} else {
		delete(r.set, r.ring[r.next])
		r.ring[r.next] = d
		r.next = (r.next + 1) % recentCapacity
	}
	r.set[d] = struct{}{}
	return false
}
