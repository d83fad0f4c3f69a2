package recent

import (
	"fmt"
	"testing"

	"github.com/idemkit/idem/idemstore"
)

func TestRecentKeysRemembersAndForgetsTheOldest(t *testing.T) {
	r := New()
	a := idemstore.Scope{ClientID: "alice", Key: "k"}
	if r.Seen(a) {
		t.Fatal("a key never claimed was seen")
	}
	if !r.Seen(a) {
		t.Fatal("a key just claimed was not seen")
	}
	if r.Seen(idemstore.Scope{ClientID: "bob", Key: "k"}) {
		t.Error("another client's key of the same name was seen")
	}
	if r.Seen(idemstore.Scope{ClientID: "alic", Key: "ek"}) {
		t.Error("a scope whose parts join to the same text was seen")
	}
	// Keys of a's bucket, newer than a: a is remembered until the bucket
	// holds recentWays of them. A new Keys, with a alone in its bucket:
	// the scopes above land in a's bucket of this one once in 4,000 runs.
	r = New()
	r.Seen(a)
	bucket := r.digest(a) % recentBuckets
	var newer []idemstore.Scope
	for i := 0; len(newer) < recentWays; i++ {
		s := idemstore.Scope{ClientID: "carol", Key: fmt.Sprint(i)}
		if r.digest(s)%recentBuckets == bucket {
			newer = append(newer, s)
		}
	}
	for i, s := range newer[:recentWays-1] {
		if r.Seen(s) {
			t.Fatalf("newer key %d was seen before it was claimed", i)
		}
	}
	if !r.Seen(a) {
		t.Fatalf("a was forgotten after %d newer keys in its bucket, want %d", recentWays-1, recentWays)
	}
	// Seeing a again does not make it newer: the next key in the bucket
	// is the recentWays-th after it.
	r.Seen(newer[recentWays-1])
	if r.Seen(a) {
		t.Errorf("a was remembered after %d newer keys in its bucket", recentWays)
	}
	for i, s := range newer[1:] {
		if !r.Seen(s) {
			t.Errorf("newer key %d was forgotten", i+1)
		}
	}
}

// TestRecentKeysRemembersMostOfTheLast counts what the buckets forget of
// the last keys.
func TestRecentKeysRemembersMostOfTheLast(t *testing.T) {
	r := New()
	const keys, lookback = 40_000, 16_384
	for i := range keys {
		r.Seen(idemstore.Scope{ClientID: "c", Key: fmt.Sprint(i)})
	}
	forgotten := 0
	for i := keys - lookback; i < keys; i++ {
		if !r.remembers(idemstore.Scope{ClientID: "c", Key: fmt.Sprint(i)}) {
			forgotten++
		}
	}
	// A key is forgotten when 8 newer keys came to its bucket: at most 2 a
	// bucket on average here, so about 3 of these keys in all. 1 in 50
	// would be a bucket scheme that is broken rather than unlucky.
	if forgotten > lookback/50 {
		t.Errorf("%d of the last %d keys forgotten, want about 3", forgotten, lookback)
	}
	t.Logf("%d of the last %d keys forgotten", forgotten, lookback)
}

// remembers reports whether r remembers the key of scope, as Seen does,
// without remembering it.
func (r *Keys) remembers(scope idemstore.Scope) bool {
	d := r.digest(scope)
	for _, x := range r.buckets[d%recentBuckets] {
		if x == d {
			return true
		}
	}
	return false
}
