package idem

import (
	"fmt"
	"testing"
)

func TestRecentKeysRemembersAndEvictsTheOldest(t *testing.T) {
	r := newRecentKeys()
	a := Scope{ClientID: "alice", Key: "k"}
	if r.seen(a) {
		t.Fatal("a key never claimed was seen")
	}
	if !r.seen(a) {
		t.Fatal("a key just claimed was not seen")
	}
	if r.seen(Scope{ClientID: "bob", Key: "k"}) {
		t.Error("another client's key of the same name was seen")
	}
	if r.seen(Scope{ClientID: "alic", Key: "ek"}) {
		t.Error("a scope whose parts join to the same text was seen")
	}
	// Fill the rest: a was the first in, so the next key evicts it.
	for i := len(r.ring); i < recentCapacity; i++ {
		r.seen(Scope{ClientID: "carol", Key: fmt.Sprint(i)})
	}
	if len(r.set) != recentCapacity {
		t.Fatalf("remembers %d keys, want %d", len(r.set), recentCapacity)
	}
	r.seen(Scope{ClientID: "dave", Key: "new"})
	if len(r.set) != recentCapacity {
		t.Errorf("remembers %d keys after eviction, want %d", len(r.set), recentCapacity)
	}
	if r.seen(a) {
		t.Error("the oldest key was not evicted")
	}
}
